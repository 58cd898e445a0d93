/**
 * The lock-delay after a failover (issue 25), with real processes and a
 * real PostgreSQL: a new active grants a name only once no holder of the
 * old active can still believe it holds it. A holder believes until 0.8 x
 * its lease after it *sent* its last confirmed frame (protocol.md section
 * 8.3); the holders here are raw peers that heartbeat on schedule and keep
 * exactly that account (test/faults/believer.ts), so "never before" is
 * asserted against the holder's own deadline, on this process's clock.
 *
 * - The active is frozen (SIGSTOP) just after confirming a heartbeat of a
 *   holder with a 20 s lease: the standby takes over an expired row, and no
 *   name at all is granted before the holder's deadline.
 * - The active stops cleanly (SIGTERM) while one holder is cut off (a proxy
 *   that stops forwarding: it never reads SHUTTING_DOWN): only the names
 *   held at the stop wait, each for its holder's lease.
 *
 * Waits are for events (log lines, frames). Where the rule is about time,
 * lower bounds are strict and upper bounds generous (safety, not speed).
 */
import { expectDelayed, metric, readyz, tryClaim } from "../helpers/delay-probe.ts";
import { describe, expect, test } from "bun:test";
import { delayFor, roundLease } from "../../src/core/delay.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { Believer, GIVE_UP_SHARE } from "../faults/believer.ts";
import { SilentProxy } from "../faults/proxy.ts";
import { type ServerFrame, WirePeer } from "../helpers/wire.ts";
import { freePort, freePorts, type Postgres, suitePostgres } from "./pg.ts";

/** The coordinator lease of both instances. */
const LEASE = 2000;
/** How late after its earliest allowed moment a held-back grant may come and still pass: generous, not a performance figure. */
const SLACK = 3000;

let pg: Postgres;
suitePostgres((started) => (pg = started));

let serial = 0;
const nextService = () => `lock-delay-${process.pid}-${++serial}`;

function instance(service: string, listenPort: number, coordinator = pg.url()): ChildServer {
  return ChildServer.spawn(
    ["serve", "--service", service, "--coordinator-lease", `${LEASE}ms`, "--listen", `127.0.0.1:${listenPort}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"],
    { LOCKD_COORDINATOR: coordinator },
  );
}

async function opsPort(child: ChildServer): Promise<number> {
  return Number(String((await child.line("lockd started")).ops).split(":").pop());
}

describe("the lock-delay after a failover", () => {
  test("SIGSTOP of the active just after it confirmed a 20 s holder: the standby takes over, and no name is granted before the holder's deadline; then promptly", async () => {
    const service = nextService();
    const [portA, portB] = (await freePorts(2)) as [number, number];
    const a = instance(service, portA);
    await using _a = a;
    expect((await a.line("active: listening")).why).toBe("created");
    const b = instance(service, portB);
    await using _b = b;
    expect((await b.line("lockd started")).role).toBe("standby");
    const bOps = await opsPort(b);

    // The holder: 20 s lease, heartbeating every second (faster than lease/4, so that a
    // few heartbeats are waiting in the stopped active's socket when it wakes).
    const HOLDER_LEASE = 20_000;
    using holder = await Believer.claim(portA, "k", HOLDER_LEASE, { everyMs: 1000 });
    expect(holder.first.type).toBe(FrameType.ACQUIRED);
    expect((await holder.confirm()).type).toBe(FrameType.ACQUIRED);
    a.proc.kill("SIGSTOP");
    const stoppedAt = performance.now();
    let contAt = Infinity;
    try {
      const took = await b.line("active: listening", 15_000);
      expect(took.why).toBe("expired");
      expect(took.lockDelayNames).toBe("every name");
      expect(took.lockDelayMs).toBeGreaterThan(0);
      // The holder's deadline as it stands (recomputed at the end: it must not have moved).
      const deadline = holder.believesUntil;
      // The case under test: the takeover came well inside the holder's deadline (with room for what follows).
      expect(performance.now()).toBeLessThan(deadline - 5000);

      // At the new active: a claim of the same name and one of another name wait; TRY claims are refused.
      using same = await Believer.claim(portB, "k", 20_000, { everyMs: 4000 });
      using other = await Believer.claim(portB, "other", 20_000, { everyMs: 4000 });
      for (const waiter of [same, other]) expect({ type: waiter.first.type, flags: waiter.first.flags }).toEqual({ type: FrameType.WAITING, flags: 1 });
      expectDelayed(await tryClaim(portB, "k"));
      expectDelayed(await tryClaim(portB, "fresh"));
      const ready = await readyz(bOps);
      expect(ready.status).toBe(200); // ready: claims must be able to queue here
      expect(ready.body.lockDelay).toEqual({ why: "takeover", remainingMs: expect.any(Number), names: 0, everyName: true });
      expect(ready.body.lockDelay.remainingMs).toBeGreaterThan(0);
      // Never more than the design's wait: 0.82 x the (rounded-up) largest lease, counted from the takeover.
      expect(ready.body.lockDelay.remainingMs).toBeLessThanOrEqual(delayFor(roundLease(HOLDER_LEASE)));
      expect(await metric(bOps, "lockd_lock_delay_seconds")).toBeGreaterThan(0);
      expect(await metric(bOps, "lockd_lock_delay_names")).toBe(0);
      expect(await metric(bOps, "lockd_lock_delayed_total")).toBe(2);
      expect(same.peer.frames.some((f) => f.type === FrameType.ACQUIRED)).toBe(false);

      // Wake the old active inside its holder's deadline, with heartbeats waiting in its socket:
      // past its own coordinator deadline it must answer none of them (that would move the
      // holder's deadline past what the new active waits for) and step down.
      expect(holder.outstanding).toBeGreaterThan(0);
      a.proc.kill("SIGCONT");
      contAt = performance.now();
      const down = await a.line("stepping down: ending every session with SHUTTING_DOWN, closing the listener", 15_000);
      expect(down.reason).toMatch(/no renewal confirmed|taken|deadline/);
      await holder.peer.closed(10_000);
      expect(holder.peer.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN });
      expect(holder.confirmationArrivals.every((at) => at < contAt)).toBe(true);
      expect(holder.confirmedSends.every((at) => at < stoppedAt)).toBe(true);
      expect(holder.believesUntil).toBe(deadline);

      // The grants: both waiting claims, pushed, never before the holder's deadline, and promptly after it.
      const grants = await Promise.all([same.granted(deadline - performance.now() + 15_000), other.granted(deadline - performance.now() + 15_000)]);
      for (const grant of grants) {
        expect(grant.flags).toBe(0); // a push: their ACQUIRE was answered WAITING
        expect(grant.at).toBeGreaterThanOrEqual(deadline);
        expect(grant.at).toBeLessThanOrEqual(deadline + LEASE + SLACK); // the takeover itself came about a coordinator lease after the stop
      }
      const over = await b.line("lock-delay over: every name may be granted", 5000);
      expect(over.why).toBe("takeover");
      expect((await tryClaim(portB, "fresh")).type).toBe(FrameType.ACQUIRED);
      expect((await readyz(bOps)).body.lockDelay).toBeNull();
      expect(await metric(bOps, "lockd_lock_delay_seconds")).toBe(0);
    } finally {
      if (contAt === Infinity) a.proc.kill("SIGCONT");
    }
  }, 40_000);

  test("a clean stop (SIGTERM) while one holder is cut off: only the names held at the stop wait, each for its holder's lease; any other name is granted at once", async () => {
    const service = nextService();
    const port = await freePort();
    // Both instances on one lock port: the standby listens only once active.
    const a = instance(service, port);
    await using _a = a;
    expect((await a.line("active: listening")).why).toBe("created");
    const b = instance(service, port);
    await using _b = b;
    expect((await b.line("lockd started")).role).toBe("standby");
    const bOps = await opsPort(b);
    await using proxy = new SilentProxy(port);

    const CUT_LEASE = 10_000;
    const SEEN_LEASE = 2000;
    // Cut off: it never reads SHUTTING_DOWN, and believes until 0.8 x 10 s after its last confirmed send.
    using cut = await Believer.claim(proxy.port, "cut", CUT_LEASE, { everyMs: 2500 });
    // Connected directly: it reads SHUTTING_DOWN, but the server cannot know that, so its name is held back too.
    using seen = await Believer.claim(port, "seen", SEEN_LEASE, { everyMs: 500 });
    expect([cut.first.type, seen.first.type]).toEqual([FrameType.ACQUIRED, FrameType.ACQUIRED]);
    expect((await cut.confirm()).type).toBe(FrameType.ACQUIRED);
    proxy.cut();
    const termAt = performance.now();
    a.proc.kill("SIGTERM");
    expect(await a.exit(15_000)).toBe(0);
    expect((await a.line("coordinator row released: a standby, if one is running, takes over at its next read")).published).toBe(2);
    await seen.peer.closed(5000);
    expect(seen.peer.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN });
    expect(cut.peer.isClosed).toBe(false); // it heard nothing

    const took = await b.line("active: listening", 15_000);
    const tookAt = performance.now();
    expect(took.why).toBe("released");
    expect(took.lockDelayNames).toBe(2);
    expect(took.lockDelayMs).toBeLessThanOrEqual(delayFor(CUT_LEASE));

    // A name nobody held at the stop: at once, even as a TRY claim.
    const fresh = await tryClaim(port, "fresh");
    expect(fresh.type).toBe(FrameType.ACQUIRED);
    expect(performance.now() - tookAt).toBeLessThan(SLACK);
    // The held names: TRY refused, claims wait.
    expectDelayed(await tryClaim(port, "cut"));
    using waitCut = await Believer.claim(port, "cut", CUT_LEASE, { everyMs: 2500 });
    using waitSeen = await Believer.claim(port, "seen", SEEN_LEASE, { everyMs: 500 });
    expect([waitCut.first.type, waitSeen.first.type]).toEqual([FrameType.WAITING, FrameType.WAITING]);
    const early = await readyz(bOps);
    expect(early.status).toBe(200);
    // Both published names still wait (the shorter one, 0.82 x 2 s, has not run out yet unless this machine is very slow).
    expect(early.body.lockDelay).toMatchObject({ why: "released", everyName: false });
    expect(early.body.lockDelay.remainingMs).toBeLessThanOrEqual(delayFor(CUT_LEASE));

    // "seen": 0.82 x its 2 s lease after the takeover, which came after the SIGTERM.
    const seenGrant = await waitSeen.granted(10_000);
    expect(seenGrant.flags).toBe(0);
    expect(seenGrant.at).toBeGreaterThanOrEqual(termAt + delayFor(SEEN_LEASE));
    expect(seenGrant.at).toBeLessThanOrEqual(tookAt + delayFor(SEEN_LEASE) + SLACK);
    expect(waitCut.peer.frames.some((f) => f.type === FrameType.ACQUIRED)).toBe(false);

    // Now only "cut" waits: names 1, not every name.
    const asked = performance.now();
    const later = await readyz(bOps);
    expect(later.body.lockDelay).toEqual({ why: "released", remainingMs: expect.any(Number), names: 1, everyName: false });
    const remaining = later.body.lockDelay.remainingMs as number;
    expect(remaining).toBeGreaterThan(0);
    expect(remaining).toBeLessThanOrEqual(delayFor(CUT_LEASE) - (asked - tookAt));
    expect(await metric(bOps, "lockd_lock_delay_names")).toBe(1);
    expect(await metric(bOps, "lockd_lock_delay_seconds")).toBeGreaterThan(0);
    expectDelayed(await tryClaim(port, "cut"));
    expect((await tryClaim(port, "fresh-2")).type).toBe(FrameType.ACQUIRED);

    // "cut": not before its holder's deadline, nor before 0.82 x its lease after the takeover.
    const deadline = cut.believesUntil;
    expect(deadline).toBeLessThanOrEqual(termAt + GIVE_UP_SHARE * CUT_LEASE);
    const cutGrant = await waitCut.granted(delayFor(CUT_LEASE) + 10_000);
    expect(cutGrant.flags).toBe(0);
    expect(cutGrant.at).toBeGreaterThanOrEqual(deadline);
    expect(cutGrant.at).toBeGreaterThanOrEqual(termAt + delayFor(CUT_LEASE));
    expect(cutGrant.at).toBeGreaterThanOrEqual(asked + remaining - 2); // the delay /readyz showed ran out first
    expect(cutGrant.at).toBeLessThanOrEqual(tookAt + delayFor(CUT_LEASE) + SLACK);
    expect(cutGrant.token!).toBeGreaterThan(cut.first.token!);
    expect((await b.line("lock-delay over: every name may be granted", 5000)).why).toBe("released");
    expect((await readyz(bOps)).body.lockDelay).toBeNull();
  }, 40_000);

  test("the active cut off from PostgreSQL confirms its holder up to its own deadline, then steps down: the new active's delay still covers the holder's last confirmation", async () => {
    const service = nextService();
    const [portA, portB] = (await freePorts(2)) as [number, number];
    // The active reaches PostgreSQL through a proxy that can stop forwarding; the standby directly.
    await using pgProxy = new SilentProxy(pg.port);
    const a = instance(service, portA, pg.url().replace(`:${pg.port}/`, `:${pgProxy.port}/`));
    await using _a = a;
    expect((await a.line("active: listening")).why).toBe("created");
    const b = instance(service, portB);
    await using _b = b;
    expect((await b.line("lockd started")).role).toBe("standby");

    // A lease on a rounding step (10 x 2^11 ms): the recorded largest lease is exact, so the
    // only cushion left is the 2 % margin. Heartbeats every 100 ms: the last one the active
    // confirms comes within about 100 ms of its own deadline, the worst case for the takeover's wait.
    const HOLDER_LEASE = 20_480;
    expect(roundLease(HOLDER_LEASE)).toBe(HOLDER_LEASE);
    using holder = await Believer.claim(portA, "k", HOLDER_LEASE, { everyMs: 100 });
    expect(holder.first.type).toBe(FrameType.ACQUIRED);
    expect((await holder.confirm()).type).toBe(FrameType.ACQUIRED);
    pgProxy.cut();
    const cutAt = performance.now();
    // No renewal confirmed for 0.8 x the coordinator lease: it stops confirming, and steps down.
    const down = await a.line("stepping down: ending every session with SHUTTING_DOWN, closing the listener", 10_000);
    expect(down.reason).toMatch(/no renewal confirmed/);
    await holder.peer.closed(5000);
    // It kept confirming while it could no longer renew (the case under test) ...
    expect(holder.confirmedSends.at(-1)!).toBeGreaterThan(cutAt);
    // ... but nothing it confirmed was sent later than 0.8 x the coordinator lease after the cut.
    expect(holder.confirmedSends.at(-1)!).toBeLessThan(cutAt + 0.8 * LEASE);
    // The model: the holder may have missed SHUTTING_DOWN, and believes until its own deadline.
    const deadline = holder.believesUntil;

    const took = await b.line("active: listening", 15_000);
    expect(took.why).toBe("expired");
    expect(performance.now()).toBeLessThan(deadline - 5000);
    using same = await Believer.claim(portB, "k", 20_000, { everyMs: 4000 });
    using other = await Believer.claim(portB, "other", 20_000, { everyMs: 4000 });
    expect([same.first.type, other.first.type]).toEqual([FrameType.WAITING, FrameType.WAITING]);
    expectDelayed(await tryClaim(portB, "fresh"));
    const grants = await Promise.all([same.granted(deadline - performance.now() + 15_000), other.granted(deadline - performance.now() + 15_000)]);
    for (const grant of grants) {
      expect(grant.flags).toBe(0);
      expect(grant.at).toBeGreaterThanOrEqual(deadline);
      expect(grant.at).toBeLessThanOrEqual(deadline + LEASE + SLACK);
    }
  }, 40_000);

  test("a new active stopped cleanly inside its own delay: the next active still holds every name back for the earlier holder (the carried lease)", async () => {
    const service = nextService();
    const [portA, portB] = (await freePorts(2)) as [number, number];
    const a = instance(service, portA);
    await using _a = a;
    expect((await a.line("active: listening")).why).toBe("created");
    const b = instance(service, portB);
    await using _b = b;
    expect((await b.line("lockd started")).role).toBe("standby");
    const aOps = await opsPort(a);

    const HOLDER_LEASE = 20_000;
    using holder = await Believer.claim(portA, "k", HOLDER_LEASE, { everyMs: 1000 });
    expect((await holder.confirm()).type).toBe(FrameType.ACQUIRED);
    a.proc.kill("SIGSTOP");
    const stoppedAt = performance.now();
    let continued = false;
    try {
      expect((await b.line("active: listening", 15_000)).why).toBe("expired");
      // The old active wakes, steps down and watches the row again, as a standby.
      a.proc.kill("SIGCONT");
      continued = true;
      await a.line("stepping down: ending every session with SHUTTING_DOWN, closing the listener", 10_000);
    } finally {
      if (!continued) a.proc.kill("SIGCONT");
    }
    const deadline = holder.believesUntil;
    expect(holder.confirmedSends.every((at) => at < stoppedAt)).toBe(true);
    // The new active holds nothing; it stops cleanly while its own delay runs.
    const termAt = performance.now();
    b.proc.kill("SIGTERM");
    expect(await b.exit(15_000)).toBe(0);
    expect((await b.line("coordinator row released: a standby, if one is running, takes over at its next read")).published).toBe(0);

    // The old active takes the released row back: nothing was held at the stop, yet every name waits.
    const took = await a.nthLine("active: listening", 2, 15_000);
    const tookAt = performance.now();
    expect(took).toMatchObject({ why: "released", epoch: 3, lockDelayNames: "every name" });
    expect(tookAt).toBeLessThan(deadline - 5000); // the case under test: the first holder still believes
    const ready = await readyz(aOps);
    expect(ready.body.lockDelay).toEqual({ why: "released", remainingMs: expect.any(Number), names: 0, everyName: true });
    expect(ready.body.lockDelay.remainingMs).toBeLessThanOrEqual(delayFor(roundLease(HOLDER_LEASE)));
    expectDelayed(await tryClaim(portA, "fresh"));
    using same = await Believer.claim(portA, "k", 20_000, { everyMs: 4000 });
    using other = await Believer.claim(portA, "other", 20_000, { everyMs: 4000 });
    expect([same.first.type, other.first.type]).toEqual([FrameType.WAITING, FrameType.WAITING]);
    const grants = await Promise.all([same.granted(deadline - performance.now() + 20_000), other.granted(deadline - performance.now() + 20_000)]);
    for (const grant of grants) {
      expect(grant.flags).toBe(0);
      expect(grant.at).toBeGreaterThanOrEqual(deadline);
      // The design: 0.82 x the carried (rounded-up) largest lease from this activation, which came after the SIGTERM.
      expect(grant.at).toBeGreaterThanOrEqual(termAt + delayFor(roundLease(HOLDER_LEASE)));
      expect(grant.at).toBeLessThanOrEqual(tookAt + delayFor(roundLease(HOLDER_LEASE)) + SLACK);
    }
  }, 45_000);
});
