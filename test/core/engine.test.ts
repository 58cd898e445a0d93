// The engine under a virtual clock: every arrow of the session state
// diagram, FIFO, tokens, the exact lease boundary, io-timeouts, operators.
import { describe, expect, test } from "bun:test";
import { SessionState } from "../../src/core/index.ts";
import { ErrorCode, FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { Harness } from "../helpers/engine.ts";

const ACQUIRED = FrameType.ACQUIRED;
const WAITING = FrameType.WAITING;

describe("state diagram", () => {
  test("CONNECTED -> OWNER: ACQUIRED as the REPLY to ACQUIRE, token > 0", () => {
    const h = new Harness();
    const a = h.client("L", 1000);
    expect(a.sent).toEqual([{ type: ACQUIRED, flags: FLAG_REPLY, token: 1n }]);
    expect(a.session!.state).toBe(SessionState.OWNER);
  });

  test("CONNECTED -> WAITING: WAITING as the REPLY when the lock is held", () => {
    const h = new Harness();
    h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    expect(b.sent).toEqual([{ type: WAITING, flags: FLAG_REPLY }]);
    expect(b.session!.state).toBe(SessionState.WAITING);
  });

  test("WAITING -> OWNER when the owner closes: ACQUIRED pushed (REPLY clear) with a larger token", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    h.closePeer(a);
    expect(b.sent[1]).toEqual({ type: ACQUIRED, flags: 0, token: 2n });
    expect(b.session!.state).toBe(SessionState.OWNER);
    expect(a.closed).toBe(false); // the peer closed; the engine writes nothing more to it
  });

  test("WAITING -> ENDED on close: the waiter leaves, the owner keeps the lock", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    h.closePeer(b);
    expect(h.engine.locks.get("L")!.waiting).toBe(0);
    h.closePeer(a);
    expect(h.engine.locks.size).toBe(0);
    expect(b.sent.length).toBe(1);
  });

  test("ACQUIRED -> ENDED on close: the lock is dropped when nobody waits", () => {
    const h = new Harness();
    const a = h.client("L", 1000);
    h.closePeer(a);
    expect(h.engine.locks.size).toBe(0);
    expect(h.engine.sessions.size).toBe(0);
    expect(h.engine.wheel.size).toBe(0);
  });

  test("OWNER -> ENDED on lease expiry hands over; WAITING -> ENDED on lease expiry leaves the queue", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a"); // t=1000
    h.advance(500);
    const b = h.client("L", 10_000, "b"); // waits, heartbeats
    const c = h.client("L", 200, "c"); // waits, silent
    h.advance(300); // t=1800: c's lease (200 from 1500) is over
    expect(c.closeFrame).toEqual({ type: FrameType.ERROR, flags: 0, code: ErrorCode.LEASE_EXPIRED });
    h.heartbeat(b);
    h.at(2000); // a's lease is over
    expect(a.closeFrame?.code).toBe(ErrorCode.LEASE_EXPIRED);
    expect(b.last).toEqual({ type: ACQUIRED, flags: 0, token: 2n });
    expect(h.engine.stats.ends[ErrorCode.LEASE_EXPIRED]).toBe(2);
  });

  test("calls after the end are no-ops: a second close, a late frame", () => {
    const h = new Harness();
    const a = h.client("L", 1000);
    h.closePeer(a);
    h.closePeer(a);
    expect(h.heartbeat(a)).toBe(false);
    expect(a.sent.length).toBe(1);
  });
});

describe("lease boundary (virtual clock)", () => {
  test("silence ends a session exactly at lastSeen + lease, not a moment before", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a"); // lastSeen 1000
    h.at(1500);
    h.heartbeat(a); // lastSeen 1500
    h.at(2499.999);
    expect(a.closed).toBe(false);
    h.at(2500);
    expect(a.closeFrame?.code).toBe(ErrorCode.LEASE_EXPIRED);
  });

  test("a fractional deadline ends at the first tick after it", () => {
    const h = new Harness();
    h.now = 1000.25;
    const a = h.client("L", 10);
    h.at(1010.2);
    expect(a.closed).toBe(false);
    h.at(1011); // 1010.25 rounded up
    expect(a.closed).toBe(true);
  });

  test("1 ms lease", () => {
    const h = new Harness();
    const a = h.client("L", 1);
    h.at(1000.9);
    expect(a.closed).toBe(false);
    h.at(1001);
    expect(a.closed).toBe(true);
  });

  test("heartbeats keep an owner for a hundred leases, with few wheel operations", () => {
    const h = new Harness();
    const a = h.client("L", 1000);
    const b = h.client("L", 100_000, "b");
    for (let i = 0; i < 400; i++) {
      h.advance(250);
      expect(h.heartbeat(a)).toBe(true);
      expect(a.last).toEqual({ type: ACQUIRED, flags: FLAG_REPLY, token: 1n });
    }
    expect(a.closed).toBe(false);
    expect(b.sent).toEqual([{ type: WAITING, flags: FLAG_REPLY }]);
    // One re-file per (lease - heartbeat interval) = 750 ms, about 134 in 100 s, not one per heartbeat (400).
    expect(h.engine.wheel.refiled).toBeLessThanOrEqual(140);
  });

  test("the longest lease: held for 49 days of silence, ended at 2^32 - 1 ms", () => {
    const h = new Harness();
    const a = h.client("L", 0xffff_ffff);
    h.at(1000 + 0xffff_ffff - 1);
    expect(a.closed).toBe(false);
    h.at(1000 + 0xffff_ffff);
    expect(a.closeFrame?.code).toBe(ErrorCode.LEASE_EXPIRED);
  });

  test("a short lease after the first-frame deadline was filed is not expired late", () => {
    const h = new Harness({ ioTimeoutMs: 60_000 });
    const a = h.client("L", 5);
    h.at(1005);
    expect(a.closeFrame?.code).toBe(ErrorCode.LEASE_EXPIRED);
  });
});

describe("FIFO and tokens", () => {
  test("100 waiters are granted in ACQUIRE order with strictly increasing tokens; a waiter leaving the middle is skipped", () => {
    const h = new Harness();
    const owner = h.client("L", 60_000, "owner");
    const waiters = Array.from({ length: 100 }, (_, i) => h.client("L", 60_000, `w${i}`));
    h.closePeer(waiters[50]!);
    h.closePeer(owner);
    const order: string[] = [];
    let lastToken = 1n;
    for (let round = 0; round < 99; round++) {
      const current = waiters.find((w) => w.session!.state === SessionState.OWNER)!;
      order.push(current.name);
      const token = current.last!.token!;
      expect(token).toBeGreaterThan(lastToken);
      lastToken = token;
      h.closePeer(current);
    }
    expect(order).toEqual(waiters.map((w) => w.name).filter((n) => n !== "w50"));
    expect(h.engine.locks.size).toBe(0);
  });

  test("tokens increase across locks", () => {
    const h = new Harness();
    const tokens = ["a", "b", "c", "a"].map((name, i) => {
      const c = h.client(name + (i === 3 ? "2" : ""), 1000);
      return c.sent[0]!.token!;
    });
    expect(tokens).toEqual([1n, 2n, 3n, 4n]);
  });

  test("TRY on a held lock ends with LOCK_BUSY and leaves the queue alone; TRY on a free lock is granted", () => {
    const h = new Harness();
    const a = h.open("a");
    h.acquire(a, "L", 1000, { try: true });
    expect(a.sent[0]?.type).toBe(ACQUIRED);
    const b = h.open("b");
    expect(h.acquire(b, "L", 1000, { try: true })).toBe(false);
    expect(b.closeFrame?.code).toBe(ErrorCode.LOCK_BUSY);
    expect(h.engine.locks.get("L")!.waiting).toBe(0);
  });
});

describe("protocol errors end only the offender", () => {
  test("a second ACQUIRE: PROTOCOL_ERROR, and the owner's lock goes to the next waiter", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    expect(h.acquire(a, "M", 1000)).toBe(false);
    expect(a.closeFrame?.code).toBe(ErrorCode.PROTOCOL_ERROR);
    expect(b.last).toEqual({ type: ACQUIRED, flags: 0, token: 2n });
    expect(h.engine.locks.has("M")).toBe(false);
  });

  test("HEARTBEAT before ACQUIRE: PROTOCOL_ERROR", () => {
    const h = new Harness();
    const a = h.open();
    expect(h.heartbeat(a)).toBe(false);
    expect(a.closeFrame?.code).toBe(ErrorCode.PROTOCOL_ERROR);
  });

  test("bad ACQUIRE: its code, no lock created", () => {
    const h = new Harness();
    const a = h.open();
    const bad = new Uint8Array([1, 0, 0, 9, 2, 0, 0, 0, 0, 0, 0, 1, 0x61]); // version 2
    expect(h.frame(a, bad)).toBe(false);
    expect(a.closeFrame?.code).toBe(ErrorCode.UNSUPPORTED_VERSION);
    expect(h.engine.locks.size).toBe(0);
    expect(h.engine.sessions.size).toBe(0);
  });
});

describe("io-timeout", () => {
  test("no ACQUIRE within io-timeout of the accept: IO_TIMEOUT", () => {
    const h = new Harness({ ioTimeoutMs: 100 });
    const a = h.open();
    h.at(1099);
    expect(a.closed).toBe(false);
    h.at(1100);
    expect(a.closeFrame?.code).toBe(ErrorCode.IO_TIMEOUT);
  });

  test("the first-frame deadline is not reset by a partial first frame", () => {
    const h = new Harness({ ioTimeoutMs: 100 });
    const a = h.open();
    h.now = 1090;
    h.engine.readProgress(a.session!, true, h.now);
    h.at(1100);
    expect(a.closeFrame?.code).toBe(ErrorCode.IO_TIMEOUT);
  });

  test("a started frame must complete within io-timeout, even with a long lease", () => {
    const h = new Harness({ ioTimeoutMs: 100 });
    const a = h.client("L", 60_000);
    h.now = 2000;
    h.engine.readProgress(a.session!, true, h.now);
    h.at(2099);
    expect(a.closed).toBe(false);
    h.at(2100);
    expect(a.closeFrame?.code).toBe(ErrorCode.IO_TIMEOUT);
  });

  test("a completed frame clears the started-frame deadline", () => {
    const h = new Harness({ ioTimeoutMs: 100 });
    const a = h.client("L", 60_000);
    h.now = 2000;
    h.engine.readProgress(a.session!, true, h.now);
    h.now = 2050;
    h.heartbeat(a);
    h.engine.readProgress(a.session!, false, h.now);
    h.at(10_000);
    expect(a.closed).toBe(false);
  });

  test("output that does not drain within io-timeout: IO_TIMEOUT; drained output clears it", () => {
    const h = new Harness({ ioTimeoutMs: 100 });
    const a = h.client("L", 60_000, "a");
    const b = h.client("M", 60_000, "b");
    h.now = 2000;
    h.engine.writeBlocked(a.session!, h.now);
    h.engine.writeBlocked(b.session!, h.now);
    h.now = 2050;
    h.engine.writeDrained(b.session!);
    h.at(2100);
    expect(a.closeFrame?.code).toBe(ErrorCode.IO_TIMEOUT);
    expect(b.closed).toBe(false);
  });
});

describe("operators, limits, shutdown", () => {
  test("forceRelease ends the owner with FORCE_RELEASED and grants the next waiter", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    expect(h.engine.forceRelease("L", h.now)).toBe(a.session);
    expect(a.closeFrame?.code).toBe(ErrorCode.FORCE_RELEASED);
    expect(b.last).toEqual({ type: ACQUIRED, flags: 0, token: 2n });
    expect(h.engine.forceRelease("nope", h.now)).toBeNull();
  });

  test("kick ends a waiter with KICKED; others keep their order; owners cannot be kicked", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a");
    const [b, c, d] = ["b", "c", "d"].map((n) => h.client("L", 1000, n));
    expect(h.engine.kick(c!.session!.id, h.now)).toBe(c!.session);
    expect(c!.closeFrame?.code).toBe(ErrorCode.KICKED);
    expect(h.engine.kick(a.session!.id, h.now)).toBeNull();
    expect(h.engine.locks.get("L")!.waiters().map((s) => s.id)).toEqual([b!.session!.id, d!.session!.id]);
  });

  test("beyond maxSessions: OVERLOADED at accept", () => {
    const h = new Harness({ maxSessions: 2 });
    h.open("a");
    h.open("b");
    const c = h.open("c");
    expect(c.session).toBeNull();
    expect(c.closeFrame?.code).toBe(ErrorCode.OVERLOADED);
  });

  test("shutdown: every session gets SHUTTING_DOWN and no lock changes hands", () => {
    const h = new Harness();
    const a = h.client("L", 1000, "a");
    const b = h.client("L", 1000, "b");
    const c = h.open("c");
    h.engine.shutdown(h.now);
    for (const conn of [a, b, c]) expect(conn.closeFrame?.code).toBe(ErrorCode.SHUTTING_DOWN);
    expect(b.sent).toEqual([{ type: WAITING, flags: FLAG_REPLY }]);
    expect(h.engine.sessions.size).toBe(0);
    expect(h.engine.wheel.size).toBe(0);
    expect(h.open("late").closeFrame?.code).toBe(ErrorCode.SHUTTING_DOWN);
  });

  test("state counts follow sessions", () => {
    const h = new Harness();
    const a = h.client("L", 1000);
    h.client("L", 1000);
    h.open();
    expect(Array.from(h.engine.stats.states.subarray(0, 3))).toEqual([1, 1, 1]);
    h.closePeer(a);
    expect(Array.from(h.engine.stats.states.subarray(0, 3))).toEqual([1, 0, 1]);
  });
});
