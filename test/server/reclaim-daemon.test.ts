// Reclaim through the Daemon in this process, on a real data directory
// (protocol.md section 14): what a clean stop publishes for exclusive,
// shared and semaphore grants, who gets the RECLAIM flag, and how the next
// run's grace shows in /readyz, /metrics and `lockd status` as holders come
// back (each grant counted once). A run with reclaim off on that directory
// still accepts the reclaims, and its own stop publishes none.
// Every wait is for a frame, a close or an HTTP answer.
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reclaimText } from "../../src/cli/status.ts";
import { NO_SLOT, SHARED_CLAIM } from "../../src/core/session.ts";
import { decodeSlot, encodeAcquire, ErrorCode, FLAG_RECLAIM, FLAG_RECLAIMABLE, FLAG_REPLY, FLAG_SLOT, FrameType } from "../../src/protocol/index.ts";
import { FileTokens, type TokenStoreError } from "../../src/tokens/file.ts";
import { LeasesFile, readLeases, type ReclaimSetting } from "../../src/tokens/leases.ts";
import { body, startDaemon, type TestDaemon } from "../ops/harness.ts";
import { WirePeer } from "../helpers/wire.ts";

const dirs: string[] = [];
const peers: WirePeer[] = [];
afterEach(() => {
  for (const peer of peers.splice(0)) peer.terminate();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const fatal = (error: TokenStoreError): never => {
  throw error;
};

/** A daemon on `dir` as `lockd serve` starts one: the token floor and the lease record, both started before any grant. */
function run(dir: string, reclaim: ReclaimSetting): TestDaemon & { leases: LeasesFile } {
  const tokens = FileTokens.open(dir, 1000, fatal);
  const leases = LeasesFile.open(dir, performance.now(), fatal, reclaim);
  const d = startDaemon({ tokens, leases });
  tokens.start();
  leases.start();
  return Object.assign(d, { leases });
}

interface Claim {
  readonly name: string;
  readonly leaseMs: number;
  readonly limit?: number;
  readonly shared?: boolean;
  readonly reclaim?: { token: bigint; slot?: number };
}

async function claim(port: number, c: Claim): Promise<WirePeer> {
  const peer = await WirePeer.connect(port);
  peers.push(peer);
  peer.write(encodeAcquire({ name: c.name, leaseMs: c.leaseMs, owner: "", try: false, limit: c.limit ?? 1, shared: c.shared ?? false, ...(c.reclaim === undefined ? {} : { reclaim: c.reclaim }) }));
  await peer.frame(0);
  return peer;
}

const slotOf = (peer: WirePeer) => decodeSlot(peer.frames[0]!.body, 0, peer.frames[0]!.body.length);

async function metrics(d: TestDaemon): Promise<Record<string, number>> {
  const text = await (await d.get("/metrics")).text();
  return Object.fromEntries([...text.matchAll(/^(lockd_reclaim\w*) (\S+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
}

async function grace(d: TestDaemon): Promise<Record<string, any> | undefined> {
  const ready = await d.get("/readyz");
  expect(ready.status).toBe(200);
  return (await body(ready)).lockDelay?.reclaim;
}

test("a clean stop publishes every reclaimable grant; the next run's grace counts each reclaimed grant once", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-reclaim-daemon-"));
  dirs.push(dir);
  const first = run(dir, { maxLeaseMs: 10_000 });
  const a = await claim(first.port, { name: "a", leaseMs: 5000 });
  const s1 = await claim(first.port, { name: "s", leaseMs: 3000, shared: true });
  const s2 = await claim(first.port, { name: "s", leaseMs: 3000, shared: true });
  const m1 = await claim(first.port, { name: "sem", leaseMs: 4000, limit: 3 });
  const m2 = await claim(first.port, { name: "sem", leaseMs: 4000, limit: 3 });
  const big = await claim(first.port, { name: "big", leaseMs: 20_000 });
  const holders = [a, s1, s2, m1, m2];
  for (const h of holders) expect(h.frames[0]!.type).toBe(FrameType.ACQUIRED);
  for (const h of holders) expect(h.frames[0]!.flags & FLAG_RECLAIMABLE).toBe(FLAG_RECLAIMABLE);
  expect(big.frames[0]!.flags).toBe(FLAG_REPLY);
  expect([m1, m2].map((m) => m.frames[0]!.flags & FLAG_SLOT)).toEqual([FLAG_SLOT, FLAG_SLOT]);
  const token = (p: WirePeer) => p.frames[0]!.token!;

  await first.daemon.shutdown("test");
  await first[Symbol.asyncDispose]();
  for (const h of holders) expect(h.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: FLAG_RECLAIM });
  expect(big.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: 0 });
  expect(first.logs.find((l) => l.event === "reclaim.published")).toMatchObject({ grants: 5, names: 3 });
  expect(readLeases(dir)!.reclaim).toEqual([
    ["a", [[Number(token(a)), NO_SLOT, 1, 5000]]],
    ["s", [[Number(token(s1)), SHARED_CLAIM, 1, 3000], [Number(token(s2)), SHARED_CLAIM, 1, 3000]]],
    ["sem", [[Number(token(m1)), slotOf(m1), 3, 4000], [Number(token(m2)), slotOf(m2), 3, 4000]]],
  ]);

  await using second = run(dir, { maxLeaseMs: 10_000 });
  expect(await grace(second)).toEqual({ remainingMs: expect.any(Number), published: 5, reclaimed: 0, unclaimedNames: ["a", "s", "sem"], unclaimedNameCount: 3 });
  const before = await metrics(second);
  expect(before).toMatchObject({ lockd_reclaims_total: 0, lockd_reclaims_refused_total: 0, lockd_reclaim_unclaimed: 5 });
  expect(before.lockd_reclaim_grace_seconds).toBeGreaterThan(0);

  // Back: the exclusive holder, one shared holder, one semaphore holder (with its slot); each its own token.
  const backA = await claim(second.port, { name: "a", leaseMs: 5000, reclaim: { token: token(a) } });
  const backS = await claim(second.port, { name: "s", leaseMs: 3000, shared: true, reclaim: { token: token(s1) } });
  const backM = await claim(second.port, { name: "sem", leaseMs: 4000, limit: 3, reclaim: { token: token(m2), slot: slotOf(m2) } });
  expect(backA.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: token(a) });
  expect(backS.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: token(s1) });
  expect(backM.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE | FLAG_SLOT, token: token(m2) });
  expect(slotOf(backM)).toBe(slotOf(m2));
  // The same grant again from a new connection replaces the first: still one grant reclaimed.
  const againA = await claim(second.port, { name: "a", leaseMs: 5000, reclaim: { token: token(a) } });
  expect(againA.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, token: token(a) });
  await backA.closed();
  expect(backA.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.RECLAIM_REFUSED });

  const view = await grace(second);
  expect(view).toMatchObject({ published: 5, reclaimed: 3, unclaimedNames: ["s", "sem"], unclaimedNameCount: 2 });
  expect(await metrics(second)).toMatchObject({ lockd_reclaims_total: 4, lockd_reclaim_unclaimed: 2 });
  expect(reclaimText(view)).toMatch(/^reclaim grace: \d+\.\d s left, reclaimed 3 of 5 published grants; 2 not yet, on "s", "sem"\n$/);
}, 20_000);

test("off on a directory whose last stop published grants: their reclaims are accepted, and this run's stop publishes none", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-reclaim-daemon-"));
  dirs.push(dir);
  const first = run(dir, { maxLeaseMs: 10_000 });
  const a = await claim(first.port, { name: "a", leaseMs: 5000 });
  await first.daemon.shutdown("test");
  await first[Symbol.asyncDispose]();
  expect(a.frames.at(-1)!.flags).toBe(FLAG_RECLAIM);

  const second = run(dir, { maxLeaseMs: null });
  const back = await claim(second.port, { name: "a", leaseMs: 5000, reclaim: { token: a.frames[0]!.token! } });
  expect(back.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, token: a.frames[0]!.token! });
  await second.daemon.shutdown("test");
  await second[Symbol.asyncDispose]();
  expect(back.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: 0 });
  expect(second.logs.some((l) => l.event === "reclaim.published")).toBe(false);
  expect(readLeases(dir)).toMatchObject({ clean: true, held: [["a", 5000]], reclaimMaxLeaseMs: 10_000 });
  expect(readLeases(dir)!.reclaim).toBeUndefined();

  // The run after: nothing to honour and reclaim off, so the holder's reclaim is refused.
  await using third = run(dir, { maxLeaseMs: null });
  expect(third.leases.reclaim.maxLeaseMs).toBeNull();
  const late = await claim(third.port, { name: "a", leaseMs: 5000, reclaim: { token: a.frames[0]!.token! } });
  expect(late.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.RECLAIM_REFUSED });
  expect(late.frames[0]!.message).toContain("reclaim is off");
}, 20_000);
