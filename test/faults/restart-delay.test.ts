// The lock-delay of a single server restarted on its data directory (issue
// 25): the restarted server grants a name only once no holder of its
// earlier run can still believe it holds it. A holder believes until 0.8 x
// its lease after it sent its last confirmed frame (protocol.md 8.3); the
// holders here are raw peers that heartbeat on schedule and keep exactly
// that account (believer.ts). A holder behind a proxy that stopped
// forwarding never reads SHUTTING_DOWN nor sees the close.
//
// - SIGKILL, restart: the last stop was not clean, so every name waits
//   0.82 x the largest lease the last run recorded, from the restart.
// - SIGTERM, restart: only the names held at the stop wait, each 0.82 x its
//   own holder's lease; other names are granted at once.
// - SIGKILL, restart, then a clean stop while that run's own delay still
//   runs, restart again: the first run's holder is still waited for.
//
// Waits are for events (log lines, frames); where the rule is about time,
// lower bounds are strict and upper bounds generous (safety, not speed).
import { expectDelayed, metric, readyz, tryClaim } from "../helpers/delay-probe.ts";
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { delayFor, roundLease } from "../../src/core/delay.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { freePort } from "../helpers/ports.ts";
import { type ServerFrame, WirePeer } from "../helpers/wire.ts";
import { Believer } from "./believer.ts";
import { SilentProxy } from "./proxy.ts";

/** How late after its earliest allowed moment a held-back grant may come and still pass: generous, not a performance figure. */
const SLACK = 3000;

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lockd-fault-restart-delay-"));
  dirs.push(dir);
  return dir;
}

function serve(dir: string, port: number): ChildServer {
  return ChildServer.spawn(["serve", "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_DATA_DIR: dir });
}

/** A pushed grant (the claim was answered WAITING) no earlier than `notBefore`, no later than `notAfter`. */
function expectGrantBetween(grant: ServerFrame, notBefore: number, notAfter: number): void {
  expect(grant.flags).toBe(0);
  expect(grant.at).toBeGreaterThanOrEqual(notBefore);
  expect(grant.at).toBeLessThanOrEqual(notAfter);
}

test("SIGKILL, restart on the same data directory while a holder is cut off: no name is granted until 0.8 x its lease from the restart", async () => {
  const dir = dataDir();
  // A port from outside the kernel's ephemeral range (restart.test.ts says why).
  const port = await freePort();
  const LEASE = 8000;
  await using first = serve(dir, port);
  const firstStart = await first.line("lockd listening");
  expect({ lastStop: firstStart.lastStop, lockDelay: firstStart.lockDelay }).toEqual({ lastStop: "none recorded", lockDelay: "none" });
  await using proxy = new SilentProxy(port);
  using holder = await Believer.claim(proxy.port, "k", LEASE, { everyMs: 2000 });
  expect(holder.first.type).toBe(FrameType.ACQUIRED);
  expect((await holder.confirm()).type).toBe(FrameType.ACQUIRED);
  proxy.cut();
  first.proc.kill("SIGKILL");
  await first.exit();

  const restartAt = performance.now();
  await using second = serve(dir, port);
  const start = await second.line("lockd listening");
  const listeningAt = performance.now();
  expect(start.lastStop).toBe("not clean");
  expect(start.lockDelayNames).toBe("every name");
  expect(start.lockDelayMs).toBeGreaterThan(0);
  expect(start.lockDelayMs).toBeLessThanOrEqual(delayFor(roundLease(LEASE)));
  const { opsPort } = await second.addresses();

  // Every name waits: the holder's and any other; TRY claims are refused.
  using same = await Believer.claim(port, "k", LEASE, { everyMs: 2000 });
  using other = await Believer.claim(port, "other", LEASE, { everyMs: 2000 });
  expect([same.first.type, other.first.type]).toEqual([FrameType.WAITING, FrameType.WAITING]);
  expectDelayed(await tryClaim(port, "k"));
  expectDelayed(await tryClaim(port, "fresh"));
  const ready = await readyz(opsPort);
  expect(ready.status).toBe(200);
  expect(ready.body.lockDelay).toEqual({ why: "restart", remainingMs: expect.any(Number), names: 0, everyName: true });
  expect(ready.body.lockDelay.remainingMs).toBeGreaterThan(0);
  expect(await metric(opsPort, "lockd_lock_delay_seconds")).toBeGreaterThan(0);
  expect(await metric(opsPort, "lockd_lock_delayed_total")).toBe(2);

  // Not before the holder's deadline, nor before 0.82 x its lease from the restart (the server started after `restartAt`).
  const deadline = holder.believesUntil;
  const notBefore = Math.max(deadline, restartAt + delayFor(LEASE));
  const grants = await Promise.all([same.granted(delayFor(roundLease(LEASE)) + 10_000), other.granted(delayFor(roundLease(LEASE)) + 10_000)]);
  for (const grant of grants) expectGrantBetween(grant, notBefore, listeningAt + delayFor(roundLease(LEASE)) + SLACK);
  expect(grants[0]!.token!).toBeGreaterThan(holder.first.token!);
  expect(holder.confirmedSends.at(-1)!).toBeLessThan(restartAt); // nothing confirmed it since

  expect(await second.line("lock-delay over: every name may be granted", 5000)).toMatchObject({ why: "restart" });
  expect((await tryClaim(port, "fresh")).type).toBe(FrameType.ACQUIRED);
  expect((await readyz(opsPort)).body.lockDelay).toBeNull();
}, 30_000);

test("SIGTERM, restart: only the names held at the stop wait, each for its own holder's lease; other names are granted at once", async () => {
  const dir = dataDir();
  const port = await freePort();
  const LONG = 8000;
  const SHORT = 3000;
  await using first = serve(dir, port);
  await first.line("lockd listening");
  await using proxy = new SilentProxy(port);
  // "long": cut off, it never reads SHUTTING_DOWN. "short": connected directly, it reads it, but the server cannot know.
  using long = await Believer.claim(proxy.port, "long", LONG, { everyMs: 2000 });
  using short = await Believer.claim(port, "short", SHORT, { everyMs: 750 });
  expect([long.first.type, short.first.type]).toEqual([FrameType.ACQUIRED, FrameType.ACQUIRED]);
  expect((await long.confirm()).type).toBe(FrameType.ACQUIRED);
  proxy.cut();
  first.proc.kill("SIGTERM");
  expect(await first.exit()).toBe(0);
  expect((await first.line("held names published for the next start")).names).toBe(2);
  await short.peer.closed(5000);
  expect(short.peer.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN });

  const restartAt = performance.now();
  await using second = serve(dir, port);
  const start = await second.line("lockd listening");
  const listeningAt = performance.now();
  expect(start.lastStop).toBe("clean");
  expect(start.lockDelayNames).toBe(2);
  expect(start.lockDelayMs).toBeLessThanOrEqual(delayFor(LONG));
  const { opsPort } = await second.addresses();

  // A name nobody held at the stop: at once, even as a TRY claim.
  expect((await tryClaim(port, "fresh")).type).toBe(FrameType.ACQUIRED);
  expect(performance.now() - listeningAt).toBeLessThan(SLACK);
  expectDelayed(await tryClaim(port, "long"));
  expectDelayed(await tryClaim(port, "short"));
  using waitLong = await Believer.claim(port, "long", LONG, { everyMs: 2000 });
  using waitShort = await Believer.claim(port, "short", SHORT, { everyMs: 750 });
  expect([waitLong.first.type, waitShort.first.type]).toEqual([FrameType.WAITING, FrameType.WAITING]);
  const ready = await readyz(opsPort);
  expect(ready.status).toBe(200);
  expect(ready.body.lockDelay).toMatchObject({ why: "clean-restart", everyName: false });
  expect(ready.body.lockDelay.remainingMs).toBeLessThanOrEqual(delayFor(LONG));

  // Each name for its own holder's lease, from the restart.
  const shortGrant = await waitShort.granted(delayFor(SHORT) + 10_000);
  expectGrantBetween(shortGrant, Math.max(short.believesUntil, restartAt + delayFor(SHORT)), listeningAt + delayFor(SHORT) + SLACK);
  expect(waitLong.peer.frames.some((f) => f.type === FrameType.ACQUIRED)).toBe(false);
  // Only "long" waits now.
  expect((await readyz(opsPort)).body.lockDelay).toEqual({ why: "clean-restart", remainingMs: expect.any(Number), names: 1, everyName: false });
  expect(await metric(opsPort, "lockd_lock_delay_names")).toBe(1);
  expect((await tryClaim(port, "fresh-2")).type).toBe(FrameType.ACQUIRED);
  const longGrant = await waitLong.granted(delayFor(LONG) + 10_000);
  expectGrantBetween(longGrant, Math.max(long.believesUntil, restartAt + delayFor(LONG)), listeningAt + delayFor(LONG) + SLACK);
  expect(longGrant.token!).toBeGreaterThan(long.first.token!);
  expect(await second.line("lock-delay over: every name may be granted", 5000)).toMatchObject({ why: "clean-restart" });
  expect((await readyz(opsPort)).body.lockDelay).toBeNull();
}, 30_000);

test("SIGKILL, restart, then a clean stop inside that run's own delay, restart again: the first run's holder is still waited for, for every name", async () => {
  const dir = dataDir();
  const port = await freePort();
  const LEASE = 8000;
  await using first = serve(dir, port);
  await first.line("lockd listening");
  await using proxy = new SilentProxy(port);
  using holder = await Believer.claim(proxy.port, "k", LEASE, { everyMs: 2000 });
  expect((await holder.confirm()).type).toBe(FrameType.ACQUIRED);
  proxy.cut();
  first.proc.kill("SIGKILL");
  await first.exit();

  await using second = serve(dir, port);
  expect(await second.line("lockd listening")).toMatchObject({ lastStop: "not clean", lockDelayNames: "every name" });
  // Nothing is held at this stop, but the first run's holder may still believe: the record must keep it.
  second.proc.kill("SIGTERM");
  expect(await second.exit()).toBe(0);
  expect((await second.line("held names published for the next start")).names).toBe(0);
  const deadline = holder.believesUntil;
  expect(performance.now()).toBeLessThan(deadline - 1000); // the case under test: the holder still believes

  const restartAt = performance.now();
  await using third = serve(dir, port);
  const start = await third.line("lockd listening");
  const listeningAt = performance.now();
  expect(start).toMatchObject({ lastStop: "clean", lockDelayNames: "every name" });
  const { opsPort } = await third.addresses();
  expect((await readyz(opsPort)).body.lockDelay).toMatchObject({ why: "clean-restart", names: 0, everyName: true });
  expectDelayed(await tryClaim(port, "fresh"));
  using same = await Believer.claim(port, "k", LEASE, { everyMs: 2000 });
  using other = await Believer.claim(port, "other", LEASE, { everyMs: 2000 });
  expect([same.first.type, other.first.type]).toEqual([FrameType.WAITING, FrameType.WAITING]);
  // The carried lease from the first run: 0.82 x its (rounded-up) largest lease from this start.
  const grants = await Promise.all([same.granted(delayFor(roundLease(LEASE)) + 10_000), other.granted(delayFor(roundLease(LEASE)) + 10_000)]);
  for (const grant of grants) expectGrantBetween(grant, Math.max(deadline, restartAt + delayFor(LEASE)), listeningAt + delayFor(roundLease(LEASE)) + SLACK);
}, 30_000);
