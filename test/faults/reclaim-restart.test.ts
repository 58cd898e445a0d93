// Reclaim across a restart of a single server on its data directory
// (protocol.md section 14), with real processes: `lockd serve
// --reclaim-max-lease 10s` and raw protocol peers.
//
// - SIGTERM (a clean stop): the holder of a grant within the cap was told
//   RECLAIMABLE, gets SHUTTING_DOWN with the RECLAIM flag; a holder above
//   the cap and a waiter get plain SHUTTING_DOWN. After the restart on the
//   same directory the holder reclaims with its token and gets ACQUIRED
//   with that same token; a wrong token is RECLAIM_REFUSED; a fresh claim
//   of the name queues behind the reclaimed holder and is granted once it
//   leaves, with a token above the old one. /readyz, /metrics and `lockd
//   status` show the grace.
// - SIGKILL (a crash): nothing was published, no reclaim is accepted.
//
// Every wait is for an event (a frame, a close, a log line, an exit). The
// unclaimed gauge before a reclaim is in test/server/reclaim-daemon.test.ts
// (/metrics reuses a body for a second, so one scrape per state here).
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ErrorCode, FLAG_RECLAIM, FLAG_RECLAIMABLE, FLAG_REPLY, FrameType, encodeAcquire } from "../../src/protocol/index.ts";
import { metric, readyz, tryClaim, expectDelayed } from "../helpers/delay-probe.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";
import { freePort } from "../helpers/ports.ts";
import { WirePeer } from "../helpers/wire.ts";

const LEASE = 5000;

const dirs: string[] = [];
const peers: WirePeer[] = [];
afterEach(() => {
  for (const peer of peers.splice(0)) peer.terminate();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lockd-fault-reclaim-"));
  dirs.push(dir);
  return dir;
}

function serve(dir: string, port: number): ChildServer {
  return ChildServer.spawn(["serve", "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--reclaim-max-lease", "10s"], { LOCKD_DATA_DIR: dir });
}

/** Connect and send ACQUIRE (a reclaim with `reclaimToken`); the first answer is `frames[0]`. */
async function claim(port: number, name: string, leaseMs: number, reclaimToken?: bigint): Promise<WirePeer> {
  const peer = await WirePeer.connect(port);
  peers.push(peer);
  peer.write(encodeAcquire({ name, leaseMs, owner: "reclaim-test", try: false, limit: 1, shared: false, ...(reclaimToken === undefined ? {} : { reclaim: { token: reclaimToken } }) }));
  await peer.frame(0);
  return peer;
}

/** The lock view of `name` from the ops server. */
async function lockView(opsPort: number, name: string): Promise<Record<string, any>> {
  const response = await fetch(`http://127.0.0.1:${opsPort}/v1/locks?name=${encodeURIComponent(name)}`);
  expect(response.status).toBe(200);
  return (await response.json()) as Record<string, any>;
}

test("SIGTERM, restart on the same data directory: the holder reclaims its lock with its token; fresh claims wait behind it", async () => {
  const dir = dataDir();
  const port = await freePort();
  await using first = serve(dir, port);
  expect(await first.event("server.listening")).toMatchObject({ reclaimMaxLeaseMs: 10_000, reclaimPublished: 0 });

  // Within the cap: flagged. Above it: not. A waiter: never.
  const holder = await claim(port, "k", LEASE);
  expect(holder.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE });
  const token = holder.frames[0]!.token!;
  const big = await claim(port, "big", 20_000);
  expect(big.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY });
  const waiter = await claim(port, "k", LEASE);
  expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);

  first.proc.kill("SIGTERM");
  expect(await first.exit()).toBe(0);
  expect(await first.event("reclaim.published")).toMatchObject({ grants: 1, names: 1 });
  await Promise.all([holder.closed(), big.closed(), waiter.closed()]);
  expect(holder.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: FLAG_RECLAIM });
  expect(big.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: 0 });
  expect(waiter.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: 0 });

  await using second = serve(dir, port);
  const start = await second.event("server.listening");
  expect(start).toMatchObject({ lastStop: "clean", reclaimMaxLeaseMs: 10_000, reclaimPublished: 1 });
  expect(start.reclaimGraceMs).toBeGreaterThan(0);
  const { opsPort } = await second.addresses();

  // Before the reclaim: the name is held back, fresh claims queue (TRY: LOCK_DELAYED), the grace awaits "k".
  const fresh = await claim(port, "k", LEASE);
  expect(fresh.frames[0]!.type).toBe(FrameType.WAITING);
  expectDelayed(await tryClaim(port, "k"));
  const before = await readyz(opsPort);
  expect(before.status).toBe(200);
  expect(before.body.lockDelay.reclaim).toEqual({ remainingMs: expect.any(Number), published: 1, reclaimed: 0, unclaimedNames: ["k"], unclaimedNameCount: 1 });

  // A token that was not published: refused, and nothing changes.
  const wrong = await claim(port, "k", LEASE, token + 1n);
  expect(wrong.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.RECLAIM_REFUSED });
  await wrong.closed();

  // The holder's reclaim: at once, its own token.
  const back = await claim(port, "k", LEASE, token);
  expect(back.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token });
  // The first scrape of this run (the ops server reuses a body for a second): after both answers.
  expect(await metric(opsPort, "lockd_reclaims_total")).toBe(1);
  expect(await metric(opsPort, "lockd_reclaims_refused_total")).toBe(1);
  expect(await metric(opsPort, "lockd_reclaim_unclaimed")).toBe(0);
  expect(await metric(opsPort, "lockd_reclaim_grace_seconds")).toBeGreaterThan(0);
  const after = await readyz(opsPort);
  expect(after.body.lockDelay.reclaim).toMatchObject({ published: 1, reclaimed: 1, unclaimedNames: [], unclaimedNameCount: 0 });
  const status = await runCli(["status", "--ops", `127.0.0.1:${opsPort}`]);
  expect(status.code).toBe(0);
  expect(status.out).toMatch(/^reclaim grace: \d+\.\d s left, reclaimed 1 of 1 published grant$/m);

  // The reclaimed holder heartbeats as any holder (answered with its token).
  back.heartbeat();
  expect(await back.frame(1)).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token });

  // The fresh claim waits behind the reclaimed holder, also once "k" is no longer held back ("big" still is).
  expect(await second.event("reclaim.grace_over", 10_000)).toMatchObject({ published: 1, reclaimed: 1, unclaimed: 0 });
  const over = (await readyz(opsPort)).body.lockDelay;
  expect(over).toMatchObject({ why: "clean-restart", names: 1 });
  expect(over.reclaim).toBeUndefined();
  back.heartbeat();
  expect((await back.frame(2)).type).toBe(FrameType.ACQUIRED);
  const view = await lockView(opsPort, "k");
  expect(view.holder.token).toBe(String(token));
  expect(view.waiting).toBe(1);
  expect(fresh.frames.length).toBe(1);
  const leftAt = performance.now();
  back.end();
  const grant = await fresh.frame(1, 5000);
  expect(grant.type).toBe(FrameType.ACQUIRED);
  expect(grant.at).toBeGreaterThanOrEqual(leftAt);
  expect(grant.token!).toBeGreaterThan(token);
}, 40_000);

test("SIGKILL, restart: nothing was published, so no reclaim is accepted", async () => {
  const dir = dataDir();
  const port = await freePort();
  await using first = serve(dir, port);
  await first.event("server.listening");
  const holder = await claim(port, "k", LEASE);
  expect(holder.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE });
  const token = holder.frames[0]!.token!;
  first.proc.kill("SIGKILL");
  await first.exit();
  await holder.closed();
  // A crash says nothing: EOF, no SHUTTING_DOWN (the holder's claim is lost, as today).
  expect(holder.frames.length).toBe(1);

  await using second = serve(dir, port);
  expect(await second.event("server.listening")).toMatchObject({ lastStop: "not clean", reclaimPublished: 0 });
  const { opsPort } = await second.addresses();
  const back = await claim(port, "k", LEASE, token);
  expect(back.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.RECLAIM_REFUSED });
  expect(await metric(opsPort, "lockd_reclaims_total")).toBe(0);
  expect(await metric(opsPort, "lockd_reclaims_refused_total")).toBe(1);
  expect((await readyz(opsPort)).body.lockDelay).toMatchObject({ why: "restart", everyName: true });
  expect((await readyz(opsPort)).body.lockDelay.reclaim).toBeUndefined();
}, 30_000);
