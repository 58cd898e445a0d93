// The per-source session limit in the engine: a source at its limit is
// refused with OVERLOADED, other sources are not affected, and every way a
// session ends (close, expiry, io-timeout, a bad frame, pipelining, kick,
// force-release, shutdown) gives its place back.
import { describe, expect, test } from "bun:test";
import { ErrorCode } from "../../src/protocol/index.ts";
import { FakeConn, Harness } from "../helpers/engine.ts";

function openFrom(h: Harness, source: string, name = source): FakeConn {
  const conn = new FakeConn(name);
  conn.session = h.engine.open(conn, h.now, source);
  return conn;
}

describe("per-source limit", () => {
  test("the source past its limit gets OVERLOADED; another source and the session limit are separate", () => {
    const h = new Harness({ maxSessionsPerSource: 2, maxSessions: 4 });
    const a1 = openFrom(h, "10.0.0.1");
    const a2 = openFrom(h, "10.0.0.1");
    const a3 = openFrom(h, "10.0.0.1");
    expect([a1.session, a2.session].every((s) => s !== null)).toBe(true);
    expect(a3.session).toBeNull();
    expect([a3.closed, a3.closeFrame?.code]).toEqual([true, ErrorCode.OVERLOADED]);
    const b1 = openFrom(h, "10.0.0.2");
    const b2 = openFrom(h, "10.0.0.2");
    expect(b1.session).not.toBeNull();
    expect(b2.session).not.toBeNull();
    const c = openFrom(h, "10.0.0.3"); // the session limit (4) comes first
    expect(c.closeFrame?.code).toBe(ErrorCode.OVERLOADED);
    expect(h.engine.stats.refusedSourceLimit).toBe(1);
    expect(h.engine.stats.refusedSessionLimit).toBe(1);
    expect(h.engine.stats.ends[ErrorCode.OVERLOADED]).toBe(2);
    expect(Object.fromEntries(h.engine.sources)).toEqual({ "10.0.0.1": 2, "10.0.0.2": 2 });
  });

  test("every way a session ends gives its place back", () => {
    const h = new Harness({ maxSessionsPerSource: 1, ioTimeoutMs: 100 });
    const src = "192.0.2.7";
    const again = (what: string) => {
      const conn = openFrom(h, src, what);
      expect(conn.session).not.toBeNull();
      return conn;
    };
    // peer close
    let c = again("close");
    h.acquire(c, "L", 1000);
    h.closePeer(c);
    // lease expiry
    c = again("expiry");
    h.acquire(c, "L", 50);
    h.advance(60);
    expect(c.closeFrame?.code).toBe(ErrorCode.LEASE_EXPIRED);
    // io-timeout before ACQUIRE
    c = again("io-timeout");
    h.advance(150);
    expect(c.closeFrame?.code).toBe(ErrorCode.IO_TIMEOUT);
    // a bad frame
    c = again("early heartbeat");
    h.heartbeat(c);
    expect(c.closeFrame?.code).toBe(ErrorCode.PROTOCOL_ERROR);
    // pipelining
    c = again("pipelining");
    h.acquire(c, "L", 1000);
    h.engine.pipelined(c.session!, h.now);
    expect(c.closeFrame?.code).toBe(ErrorCode.PROTOCOL_ERROR);
    // force-release
    c = again("force-release");
    h.acquire(c, "L", 1000);
    h.engine.forceRelease("L", h.now);
    expect(c.closeFrame?.code).toBe(ErrorCode.FORCE_RELEASED);
    // kick (a waiter; the owner comes from another source)
    const owner = openFrom(h, "198.51.100.1");
    h.acquire(owner, "L", 10_000);
    c = again("kick");
    h.acquire(c, "L", 10_000);
    h.engine.kick(c.session!.id, h.now);
    expect(c.closeFrame?.code).toBe(ErrorCode.KICKED);
    // outbox cut
    c = again("outbox");
    h.engine.timeOut(c.session!, h.now);
    expect(h.engine.stats.outboxCuts).toBe(1);
    // shutdown
    c = again("shutdown");
    h.engine.shutdown(h.now);
    expect(h.engine.sources.size).toBe(0);
    expect(h.engine.stats.refusedSourceLimit).toBe(0);
    expect(h.engine.stats.pipeliningCuts).toBe(1);
  });

  test("without a limit nothing is tracked", () => {
    const h = new Harness();
    for (let i = 0; i < 100; i++) expect(openFrom(h, "10.0.0.1", `c${i}`).session).not.toBeNull();
    expect(h.engine.sources.size).toBe(0);
  });
});
