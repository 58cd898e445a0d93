// The lock-delay in the engine (core/delay.ts): held-back names queue, TRY
// claims get LOCK_DELAYED, grants resume when a delay ends or a raise of the
// durable lease lands; heartbeats past the deadline go unanswered.
import { describe, expect, test } from "bun:test";
import { delayFor, LockDelay, roundLease } from "../../src/core/delay.ts";
import { SessionState } from "../../src/core/index.ts";
import { ErrorCode, FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { Harness } from "../helpers/engine.ts";

/** A delay that answers raises later (like the coordinator row), recording what it was asked. */
function asyncDelay(options: { until?: number; names?: [string, number][]; durableMaxMs?: number } = {}) {
  const raises: number[] = [];
  const delay = new LockDelay({
    why: "takeover",
    until: options.until ?? 0,
    names: new Map(options.names ?? []),
    durableMaxMs: options.durableMaxMs ?? Infinity,
    raise: (leaseMs) => {
      raises.push(leaseMs);
      return false;
    },
  });
  return { delay, raises };
}

describe("the lock-delay", () => {
  test("every name: claims queue (WAITING), TRY claims get LOCK_DELAYED, and at the end the heads are pushed ACQUIRED in FIFO order", () => {
    const { delay } = asyncDelay({ until: 5000 }); // the harness starts at 1000
    const h = new Harness({ delay });
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    const c = h.client("M", 1000, "c");
    expect(a.sent).toEqual([{ type: FrameType.WAITING, flags: FLAG_REPLY }]);
    expect(c.sent).toEqual([{ type: FrameType.WAITING, flags: FLAG_REPLY }]);
    const t = h.open("t");
    h.acquire(t, "N", 1000, { try: true });
    expect(t.closeFrame).toEqual({ type: FrameType.ERROR, flags: 0, code: ErrorCode.LOCK_DELAYED });
    expect(h.engine.stats.delayed).toBe(1);
    // Before the end nothing moves, however often the shell asks.
    h.now = 4999;
    h.heartbeat(a);
    expect(h.engine.resume(h.now)).toBe(false);
    expect(a.session!.state).toBe(SessionState.WAITING);
    h.now = 5000;
    expect(h.engine.resume(h.now)).toBe(false);
    expect(a.last).toMatchObject({ type: FrameType.ACQUIRED, flags: 0 }); // a push: its ACQUIRE was answered WAITING
    expect(c.last).toMatchObject({ type: FrameType.ACQUIRED, flags: 0 });
    expect(b.session!.state).toBe(SessionState.WAITING);
    expect(a.last!.token! < c.last!.token!).toBe(true);
    // After the delay, a TRY claim of a free name is granted at once.
    const u = h.open("u");
    h.acquire(u, "P", 1000, { try: true });
    expect(u.last).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY });
  });

  test("published names: only they wait, each for its own moment; every other name is granted at once", () => {
    const { delay } = asyncDelay({ names: [["held", 3000], ["later", 8000]] }); // the harness starts at 1000
    const h = new Harness({ delay });
    const free = h.client("free", 1000);
    expect(free.last).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY });
    const held = h.client("held", 1000);
    const later = h.client("later", 1000);
    expect(held.last!.type).toBe(FrameType.WAITING);
    expect(delay.nextChange(h.now)).toBe(3000);
    h.now = 3000;
    h.engine.resume(h.now);
    expect(held.last).toMatchObject({ type: FrameType.ACQUIRED, flags: 0 });
    expect(later.last!.type).toBe(FrameType.WAITING);
    expect(delay.view(h.now)).toEqual({ why: "takeover", remainingMs: 5000, names: 1, everyName: false });
    expect(delay.nextChange(h.now)).toBe(8000);
    // The holder that got "held" releases: its waiter-less lock goes; a claim of "later" still waits.
    h.closePeer(held);
    expect(h.engine.locks.has("held")).toBe(false);
    h.now = 8000;
    h.engine.resume(h.now);
    expect(later.last).toMatchObject({ type: FrameType.ACQUIRED, flags: 0 });
    expect(delay.view(h.now)).toBeNull();
  });

  test("an owner that ends during a delay of its name hands over only when the delay allows", () => {
    // A name granted before the delay began cannot exist; but a delay that begins with names held back while
    // another name's owner churns must not promote into a held-back name early.
    const { delay } = asyncDelay({ names: [["x", 2000]] });
    const h = new Harness({ delay });
    const first = h.client("x", 1000, "first");
    const second = h.client("x", 1000, "second");
    expect(first.last!.type).toBe(FrameType.WAITING);
    h.closePeer(first); // the head leaves: nobody is granted early
    expect(second.session!.state).toBe(SessionState.WAITING);
    h.now = 2000;
    h.engine.resume(h.now);
    expect(second.last).toMatchObject({ type: FrameType.ACQUIRED, flags: 0 });
  });

  test("a lease above the durable largest lease waits for the raise, silently; the reply is ACQUIRED with REPLY set", () => {
    const { delay, raises } = asyncDelay({ durableMaxMs: 1000 });
    const h = new Harness({ delay });
    const small = h.client("a", 1000);
    expect(small.last).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY });
    expect(raises).toEqual([]);
    const big = h.client("b", 20_000);
    expect(big.sent).toEqual([]); // no WAITING for a wait of one statement
    expect(raises).toEqual([roundLease(20_000)]);
    const bigger = h.client("c", 50_000);
    expect(raises).toHaveLength(1); // one raise at a time
    // A TRY claim of a name whose head waits for the raise is busy, not delayed.
    const t = h.open("t");
    h.acquire(t, "b", 1000, { try: true });
    expect(t.closeFrame?.code).toBe(ErrorCode.LOCK_BUSY);
    delay.raised(roundLease(20_000));
    expect(raises).toEqual([roundLease(20_000), roundLease(50_000)]); // the larger one is asked for next
    h.engine.resume(h.now);
    expect(big.last).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY });
    expect(bigger.sent).toEqual([]);
    delay.raised(roundLease(50_000));
    h.engine.resume(h.now);
    expect(bigger.last).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY });
    // Covered now: no more raises for leases up to the durable value.
    h.client("d", 40_000);
    expect(raises).toHaveLength(2);
  });

  test("a promotion with a larger lease waits for the raise too", () => {
    const { delay, raises } = asyncDelay({ durableMaxMs: 1000 });
    const h = new Harness({ delay });
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 30_000, "b");
    expect(b.last!.type).toBe(FrameType.WAITING);
    h.closePeer(a);
    expect(b.session!.state).toBe(SessionState.WAITING);
    expect(raises).toEqual([roundLease(30_000)]);
    delay.raised(roundLease(30_000));
    h.engine.resume(h.now);
    expect(b.last).toMatchObject({ type: FrameType.ACQUIRED, flags: 0 });
  });

  test("a raise that failed is asked for again on retry, and the grant waits until it lands", () => {
    const { delay, raises } = asyncDelay({ durableMaxMs: 10 });
    const h = new Harness({ delay });
    const a = h.client("a", 5000);
    delay.raiseFailed();
    h.engine.resume(h.now);
    expect(a.sent).toEqual([]);
    delay.retry();
    expect(raises).toEqual([roundLease(5000), roundLease(5000)]);
    delay.raised(roundLease(5000));
    h.engine.resume(h.now);
    expect(a.last!.type).toBe(FrameType.ACQUIRED);
  });

  test("resume grants at most its budget per call, and says when more remain", () => {
    const { delay } = asyncDelay({ until: 2000 });
    const h = new Harness({ delay });
    const conns = Array.from({ length: 25 }, (_, i) => h.client(`n${i}`, 1000));
    expect(conns.every((c) => c.last!.type === FrameType.WAITING)).toBe(true);
    h.now = 2000;
    expect(h.engine.resume(h.now, 10)).toBe(true);
    expect(conns.filter((c) => c.last!.type === FrameType.ACQUIRED)).toHaveLength(10);
    expect(h.engine.resume(h.now, 10)).toBe(true);
    expect(h.engine.resume(h.now, 10)).toBe(false);
    expect(conns.every((c) => c.last!.type === FrameType.ACQUIRED)).toBe(true);
    expect(h.engine.heldBackLocks).toBe(0);
  });

  test("held(): every held name with its holder's lease, or null past the limit", () => {
    const h = new Harness();
    h.client("a", 1000);
    h.client("b", 7000);
    h.client("b", 9000, "waiter"); // a waiter does not believe it holds
    expect(h.engine.held(10)).toEqual([["a", 1000], ["b", 7000]]);
    expect(h.engine.held(1)).toBeNull();
  });
});

describe("heartbeats and the deadline", () => {
  test("past the deadline a heartbeat is not answered (owner or waiter); inside it, it is", () => {
    const guard = { confirm: true, mayGrant: () => true, mayConfirm(_now: number) { return this.confirm; } };
    const h = new Harness({ grantGuard: guard });
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    h.heartbeat(a);
    expect(a.sent).toHaveLength(2);
    guard.confirm = false;
    expect(h.heartbeat(a)).toBe(true);
    expect(h.heartbeat(b)).toBe(true);
    expect(a.sent).toHaveLength(2);
    expect(b.sent).toHaveLength(1);
    expect(a.closed || b.closed).toBe(false); // the step-down ends them, not the heartbeat
  });
});

describe("--max-lease", () => {
  test("a longer lease is BAD_REQUEST naming the cap; the cap itself is fine", () => {
    const h = new Harness({ maxLeaseMs: 30_000 });
    const ok = h.client("a", 30_000);
    expect(ok.last!.type).toBe(FrameType.ACQUIRED);
    const over = h.client("b", 30_001);
    expect(over.closeFrame?.code).toBe(ErrorCode.BAD_REQUEST);
  });
});

describe("the arithmetic", () => {
  test("delayFor: 0.8 x lease less the gap, plus 2 % of the lease; nothing when the gap covers it", () => {
    expect(delayFor(10_000)).toBe(8200);
    expect(delayFor(10_000, 800)).toBe(7400);
    expect(delayFor(1000, 800)).toBe(0); // a quarter of a 4 s coordinator lease: no delay
    expect(delayFor(0)).toBe(0);
  });

  test("roundLease: never below the lease, at most 12.5 % above, eight steps per power of two", () => {
    for (const lease of [1, 7, 8, 9, 1000, 1023, 1024, 1025, 20_000, 60_000, 0xffff_ffff]) {
      const r = roundLease(lease);
      expect(r).toBeGreaterThanOrEqual(lease);
      expect(r).toBeLessThanOrEqual(Math.ceil(lease * 1.125));
    }
    const steps = new Set<number>();
    for (let lease = 1024; lease < 2048; lease++) steps.add(roundLease(lease));
    expect(steps.size).toBeLessThanOrEqual(9);
  });
});

describe("the end of the token counter", () => {
  test("once the source is exhausted every claim ends with TOKENS_EXHAUSTED, waiters too, and nothing is left in the engine's maps", () => {
    let last = 0;
    const tokens = { next: () => ++last, get last() { return last; }, get exhausted() { return last >= 2; } };
    const h = new Harness({ tokens });
    const a = h.client("L", 1000, "a"); // token 1
    const w = h.client("L", 1000, "w"); // waits
    const b = h.client("M", 1000, "b"); // token 2: the last one
    expect([a.last!.token, b.last!.token]).toEqual([1n, 2n]);
    const c = h.client("N", 1000, "c");
    expect(c.closeFrame).toEqual({ type: FrameType.ERROR, flags: 0, code: ErrorCode.TOKENS_EXHAUSTED });
    h.closePeer(a); // its waiter cannot be granted: it ends too
    expect(w.closeFrame?.code).toBe(ErrorCode.TOKENS_EXHAUSTED);
    expect([...h.engine.locks.keys()]).toEqual(["M"]);
    expect(h.engine.sessions.size).toBe(1);
  });
});
