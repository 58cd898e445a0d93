/**
 * The client's rules, on a manual clock: the ClaimMachine (src/client/machine.ts)
 * driven with numbers for time, server bytes for the network and a fixed
 * number for randomness. Every loss path and the whole heartbeat schedule
 * run in milliseconds of test time. (The real-socket tests in
 * client.test.ts, pessimism.test.ts, failover.test.ts and test/faults test
 * the shell and the kernel around it.)
 */
import { describe, expect, test } from "bun:test";
import { LockAbortedError, LockBusyError, LockDelayedError, LockError, LockLostError, LockRequestError, ServerUnavailableError, WaitTimeoutError } from "../../src/client/errors.ts";
import { heartbeatInterval, reconnectPause, smoothRtt } from "../../src/client/schedule.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { firstConnectRetried } from "../../src/client/machine.ts";
import { ManualClaim } from "./manual-claim.ts";

const LEASE = 1000;
const A = { host: "10.0.0.1", port: 7700 };
const B = { host: "10.0.0.2", port: 7700 };
const C = { host: "10.0.0.3", port: 7700 };

/** A claim that was answered once (so it retries trouble), waiting in the queue. */
function waiting(rules: ConstructorParameters<typeof ManualClaim>[0] = {}): ManualClaim {
  const m = new ManualClaim(rules).open();
  m.advance(5);
  m.replyWaiting();
  expect(m.machine.state).toBe("waiting");
  return m;
}

/** A claim granted by the reply to ACQUIRE (RTT 10 ms at t = 0). */
function held(rules: ConstructorParameters<typeof ManualClaim>[0] = {}): ManualClaim {
  const m = new ManualClaim(rules).open();
  m.advance(10);
  m.replyGranted(7);
  expect(m.machine.state).toBe("held");
  return m;
}

describe("the heartbeat schedule", () => {
  test("each HEARTBEAT goes lease/4 - 2 x smoothed RTT after the previous reply, the RTT an EWMA seeded by ACQUIRE", () => {
    const m = held(); // ACQUIRE sent at 0, answered at 10: smoothed RTT 10, interval 250 - 20 = 230
    expect(m.machine.smoothedRttMs).toBe(10);
    m.advance(239.9);
    expect(m.sends()).toEqual([]);
    m.advance(240);
    expect(m.sends()).toEqual([240]);
    // Answered after 20 ms: smoothed 10 + 0.2 x (20 - 10) = 12, interval 250 - 24 = 226, from the reply at 260.
    m.advance(260);
    m.replyGranted(7);
    expect(m.machine.smoothedRttMs).toBeCloseTo(12, 9);
    m.advance(485.9);
    expect(m.sends()).toEqual([240]);
    m.advance(486);
    expect(m.sends()).toEqual([240, 486]);
    // Now a run of replies with assorted round trips; every send is where the formula says.
    let srtt = 12;
    let lastSend = 486;
    for (const rtt of [0, 2, 50, 7, 120, 1, 1, 30]) {
      m.advance(lastSend + rtt);
      m.replyGranted(7);
      srtt = smoothRtt(srtt, rtt);
      expect(m.machine.smoothedRttMs).toBeCloseTo(srtt, 9);
      const next = lastSend + rtt + heartbeatInterval(LEASE, srtt);
      m.advance(next + 1000 * Number.EPSILON + 1e-9);
      const sends = m.sends();
      expect(sends.at(-1)).toBeCloseTo(next, 6);
      lastSend = sends.at(-1)!;
    }
    expect(m.machine.heartbeatsSent).toBe(10);
    expect(m.machine.state).toBe("held");
    // Confirmed up to the send of the last answered heartbeat, not up to the reply.
    expect(m.machine.confirmedAt).toBeLessThan(lastSend);
  });

  test("a slow server: the interval shrinks to the floor and never below; a fast one: never above lease/4", () => {
    const m = new ManualClaim({ minHeartbeatIntervalMs: 20 }).open();
    m.advance(200); // an RTT of 200 ms: 250 - 400 < 20, the floor
    m.replyGranted();
    m.advance(219.9);
    expect(m.sends()).toEqual([]);
    m.advance(220);
    expect(m.sends()).toEqual([220]);

    const fast = held({ leaseMs: 4000 });
    fast.now = 10;
    for (let i = 0; i < 20; i++) {
      const sent = fast.sends().length;
      fast.advance(fast.now + 1000); // lease/4 = 1000 at the most
      expect(fast.sends().length).toBe(sent + 1);
      fast.replyGranted(); // a zero round trip
    }
  });

  test("one heartbeat in flight: without its reply no other is sent, however long the wait", () => {
    const m = held();
    m.advance(240);
    expect(m.sends()).toEqual([240]);
    m.advance(809); // confirmed until 0 + 800: still held at 799, lost at 800
    expect(m.sends()).toEqual([240]);
  });

  test("a push grants a waiter but confirms nothing and does not move the schedule", () => {
    const m = waiting(); // WAITING reply at 5 for ACQUIRE at 0: next heartbeat at 5 + 250 - 10 = 245
    m.advance(100);
    m.pushGranted(9);
    expect(m.of("granted")).toEqual([{ at: 100, kind: "granted", token: 9n, slot: -1 }]);
    expect(m.machine.confirmedAt).toBe(0);
    m.advance(245);
    expect(m.sends()).toEqual([245]);
  });

  test("promotion with a heartbeat in flight, in either order the server may send it (protocol.md 8.1)", () => {
    // WAITING reply, then the ACQUIRED push.
    const a = waiting();
    a.advance(245);
    a.advance(250);
    a.replyWaiting();
    a.pushGranted(9);
    expect(a.machine.confirmedAt).toBe(245);
    expect(a.of("granted")).toHaveLength(1);
    // ACQUIRED push, then the ACQUIRED reply: the reply confirms and the lock stays held.
    const b = waiting();
    b.advance(245);
    b.advance(250);
    b.pushGranted(9);
    b.replyGranted(9);
    expect(b.machine.confirmedAt).toBe(245);
    expect(b.of("granted")).toHaveLength(1);
    expect(b.machine.state).toBe("held");
    b.advance(1000);
    expect(b.sends().length).toBeGreaterThan(1);
    expect(b.ending).toBeUndefined();
  });
});

describe("losing a held lock", () => {
  test("silence: lost at exactly 0.8 x lease after the send of the last answered frame, not a moment before", () => {
    const m = held();
    m.advance(240); // heartbeat sent, never answered
    m.advance(799.99);
    expect(m.ending).toBeUndefined();
    m.advance(800);
    const lost = m.of("lost");
    expect(lost).toHaveLength(1);
    expect(lost[0]!.at).toBe(800);
    expect(lost[0]!.error).toBeInstanceOf(LockLostError);
    expect(lost[0]!.error.why).toBe("unconfirmed");
    // The signal first, then the connection is closed; nothing after.
    expect(m.effects.slice(-2).map((e) => e.kind)).toEqual(["lost", "disconnect"]);
    expect(m.armedAt).toBe(Infinity);
    expect(m.machine.state).toBe("done");
  });

  test("a reply read after a pause confirms only up to its send: the lock is lost at once", () => {
    const m = held();
    m.advance(240); // heartbeat sent at 240
    m.pause(1100); // the process stalls past 240 + 800
    m.replyGranted(7); // the reply was waiting in the socket
    expect(m.machine.confirmedAt).toBe(240);
    expect(m.machine.checkHeld(m.now)).toBe(false);
    expect(m.of("lost")[0]!.error.why).toBe("unconfirmed");
  });

  test("a pause past the deadline: `held` says false and aborts before the late timer runs", () => {
    const m = held();
    m.pause(790);
    expect(m.machine.checkHeld(m.now)).toBe(true);
    m.pause(5000);
    expect(m.machine.checkHeld(m.now)).toBe(false);
    expect(m.of("lost")).toHaveLength(1);
    m.advance(6000); // the late timer: nothing more
    expect(m.of("lost")).toHaveLength(1);
    expect(m.sends()).toEqual([]);
  });

  test("SHUTTING_DOWN while holding: lost with the server's code, never re-claimed on the next address", () => {
    const m = held({ addresses: [A, B] });
    m.advance(100);
    m.error(ErrorCode.SHUTTING_DOWN);
    const lost = m.of("lost")[0]!.error;
    expect(lost.why).toBe("server-error");
    expect(lost.serverCode).toBe(ErrorCode.SHUTTING_DOWN);
    m.advance(60_000);
    expect(m.of("connect")).toHaveLength(1);
    expect(m.of("retry")).toEqual([]);
  });

  test("a closed connection while holding: lost, why closed", () => {
    const m = held();
    m.machine.closed(50, undefined);
    expect(m.of("lost")[0]!.error.why).toBe("closed");
    m.advance(60_000);
    expect(m.of("connect")).toHaveLength(1);
  });

  test("a changed token or WAITING after the grant: the server broke the protocol, the lock is lost", () => {
    const m = held();
    m.replyGranted(8);
    expect(m.of("lost")[0]!.error.why).toBe("protocol");
    const w = held();
    w.replyWaiting();
    expect(w.of("lost")[0]!.error.why).toBe("protocol");
  });
});

describe("before the grant", () => {
  test("a grant read at or after the deadline is not reported: the claim queues again on the next address", () => {
    const m = new ManualClaim({ addresses: [A, B] }).open();
    m.advance(5);
    m.replyWaiting(); // confirmed up to 0
    m.advance(245); // heartbeat at 245, unanswered
    m.pause(800); // the push is read exactly at 0 + 800
    m.pushGranted(9);
    expect(m.of("granted")).toEqual([]);
    expect(m.machine.state).toBe("connecting");
    const retry = m.of("retry");
    expect(retry).toHaveLength(1);
    expect(retry[0]!.detail).toContain("a grant arrived unconfirmed");
    m.advance(800 + retry[0]!.delay);
    expect(m.of("connect").map((c) => c.index)).toEqual([0, 1]);
  });

  test("the reply to ACQUIRE read after 0.8 x lease grants nothing either", () => {
    const m = new ManualClaim({ retryFirstConnect: true }).open();
    m.pause(800);
    m.replyGranted(3);
    expect(m.of("granted")).toEqual([]);
    expect(m.of("retry")).toHaveLength(1);
  });

  test("silence while waiting: the server is unresponsive, the claim reconnects", () => {
    const m = waiting({ addresses: [A, B] });
    m.advance(800);
    expect(m.of("retry")[0]!.detail).toContain("server unresponsive");
    expect(m.of("disconnect")).toHaveLength(1);
  });

  test("a connection reported closed before its connect completed: trouble at once, not at the deadline", () => {
    const m = new ManualClaim({ addresses: [A, B] });
    m.machine.start(0);
    m.machine.closed(3, new Error("reset"));
    expect(m.of("connect").map((c) => c.index)).toEqual([0, 1]);
    m.machine.connected(4); // the new connection's
    expect(m.sends(FrameType.ACQUIRE)).toHaveLength(1);
  });

  test("a connect that never completes counts against 0.8 x lease", () => {
    const m = new ManualClaim({ addresses: [A, B] });
    m.machine.start(0);
    m.advance(799);
    expect(m.of("connect")).toHaveLength(1);
    m.advance(800);
    // Nobody has answered yet: the next address at once, without a pause.
    expect(m.of("connect").map((c) => [c.at, c.index])).toEqual([[0, 0], [800, 1]]);
    m.machine.connectFailed(850, new Error("refused"));
    const failed = m.ending;
    expect(failed?.kind).toBe("failed");
    expect((failed as { error: unknown }).error).toBeInstanceOf(ServerUnavailableError);
  });

  test("SHUTTING_DOWN of a waiter: the NEXT address after a 10-50 ms pause, and the queue again from its tail", () => {
    const m = waiting({ addresses: [A, B, C] });
    m.randomValue = 0.25;
    m.advance(100);
    m.error(ErrorCode.SHUTTING_DOWN);
    expect(m.of("retry")[0]!.delay).toBe(20); // 10 + 0.25 x 40
    m.advance(119);
    expect(m.of("connect")).toHaveLength(1);
    m.advance(120);
    expect(m.of("connect").at(-1)).toEqual({ at: 120, kind: "connect", index: 1 });
    m.advance(125);
    m.machine.connected(m.now);
    expect(m.sends(FrameType.ACQUIRE)).toEqual([0, 125]);
  });

  test("LEASE_EXPIRED of a stalled waiter: nothing was held, so it claims again", () => {
    const m = waiting();
    m.advance(100);
    m.error(ErrorCode.LEASE_EXPIRED);
    expect(m.ending).toBeUndefined();
    m.advance(200);
    expect(m.of("connect")).toHaveLength(2);
    m.machine.connected(m.now);
    m.replyGranted(11);
    expect(m.of("granted")[0]!.token).toBe(11n);
  });

  test("KICKED is an operator's decision: the claim fails, no reconnect", () => {
    const m = waiting();
    m.error(ErrorCode.KICKED);
    const error = (m.ending as { error: unknown }).error as LockRequestError;
    expect(error).toBeInstanceOf(LockRequestError);
    expect(error.code).toBe("KICKED");
    m.advance(60_000);
    expect(m.of("connect")).toHaveLength(1);
  });

  test("OVERLOADED is a server condition like SHUTTING_DOWN: retried; IO_TIMEOUT is the request's fault: not", () => {
    const m = waiting();
    m.error(ErrorCode.OVERLOADED);
    expect(m.ending).toBeUndefined();
    expect(m.of("retry")).toHaveLength(1);
    const io = waiting();
    io.error(ErrorCode.IO_TIMEOUT);
    expect(((io.ending as { error: unknown }).error as LockRequestError).code).toBe("IO_TIMEOUT");
  });

  test("a server that breaks the protocol before the grant: PROTOCOL_VIOLATION, not retried", () => {
    const cases: [string, (m: ManualClaim) => void][] = [
      ["WAITING without REPLY", (m) => m.read(new Uint8Array([FrameType.WAITING, 0, 0, 0]))],
      ["a reply with nothing in flight", (m) => {
        m.replyWaiting();
        m.replyWaiting();
      }],
      ["unknown frame type", (m) => m.read(new Uint8Array([0x42, 1, 0, 0]))],
    ];
    for (const [what, act] of cases) {
      const m = new ManualClaim().open();
      act(m);
      const error = (m.ending as { error: unknown } | undefined)?.error as LockRequestError;
      expect(error?.code, what).toBe("PROTOCOL_VIOLATION");
      expect(error.message, what).toContain(what);
      expect(m.of("retry"), what).toEqual([]);
    }
  });

  test("LOCK_BUSY for a try: LockBusyError", () => {
    const m = new ManualClaim().open();
    m.error(ErrorCode.LOCK_BUSY);
    expect((m.ending as { error: unknown }).error).toBeInstanceOf(LockBusyError);
  });

  test("LOCK_DELAYED for a try: LockDelayedError with the server's message, lock class, not retried on the next address", () => {
    const message = "lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another 1200 ms";
    const m = new ManualClaim({ addresses: [A, B], retryFirstConnect: true }).open();
    m.error(ErrorCode.LOCK_DELAYED, message);
    const error = (m.ending as { error: unknown }).error as LockDelayedError;
    expect(error).toBeInstanceOf(LockDelayedError);
    expect(error).toBeInstanceOf(LockError);
    expect(error).not.toBeInstanceOf(LockBusyError);
    expect([error.code, error.class, error.serverCode, error.lock, error.serverMessage]).toEqual(["LOCK_DELAYED", "lock", 0x14, "m/lock", message]);
    // The server's message opens with "lock-delay:": said once, not twice.
    expect(error.message).toBe(`lock "m/lock" is held back by a lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another 1200 ms`);
    expect(m.of("retry")).toEqual([]);
    expect(m.of("connect")).toHaveLength(1);
    // A server that says nothing more: the message still names the lock-delay.
    const bare = new ManualClaim().open();
    bare.error(ErrorCode.LOCK_DELAYED, "");
    expect(((bare.ending as { error: unknown }).error as LockDelayedError).message).toBe(`lock "m/lock" is held back by a lock-delay`);
  });

  test("LOCK_DELAYED to a held lock (no server sends it there): lost, server-error, lock class", () => {
    const m = held();
    m.error(ErrorCode.LOCK_DELAYED, "lock-delay");
    const lost = m.of("lost")[0]!.error;
    expect([lost.why, lost.serverCode, lost.class]).toEqual(["server-error", 0x14, "lock"]);
  });

  test("before any server answered: each address once, no pauses, then unavailable; retryFirstConnect retries", () => {
    const m = new ManualClaim({ addresses: [A, B] });
    m.machine.start(0);
    m.machine.connectFailed(1, new Error("ECONNREFUSED"));
    m.machine.connectFailed(2, new Error("ECONNREFUSED"));
    expect(m.of("connect").map((c) => c.index)).toEqual([0, 1]);
    // onRetry hears of the move to the next address too, with no pause; not of the last failure.
    expect(m.of("retry").map((r) => [r.detail, r.delay, r.backoff])).toEqual([["cannot connect to 10.0.0.1:7700: ECONNREFUSED", 0, false]]);
    expect((m.ending as { error: unknown }).error).toBeInstanceOf(ServerUnavailableError);

    const r = new ManualClaim({ addresses: [A, B], retryFirstConnect: true });
    r.machine.start(0);
    r.machine.connectFailed(0, new Error("ECONNREFUSED"));
    expect(r.of("retry")).toHaveLength(1);
    expect(r.ending).toBeUndefined();
    // The first address failing is a move on to the next (no backoff); the whole list failing is a backoff.
    r.advance(r.now + r.of("retry").at(-1)!.delay);
    expect(r.of("connect").map((c) => c.index)).toEqual([0, 1]);
    r.machine.connectFailed(r.now, new Error("ECONNREFUSED"));
    expect(r.of("retry").map((x) => x.backoff)).toEqual([false, true]);
    expect(r.ending).toBeUndefined();
  });

  test("the default first-connect rule: a claim that may wait retries (a wait, or two or more addresses); a TRY, or one address without a wait, fails at once; a setting wins", () => {
    // setting, try, wait, addresses -> retried (docs/clients.md, "Retrying the first connect").
    const table: [boolean | undefined, boolean, number | undefined, number, boolean][] = [
      [undefined, false, 20_000, 1, true],
      [undefined, false, undefined, 2, true],
      [undefined, false, 20_000, 2, true],
      [undefined, false, undefined, 1, false],
      [undefined, false, 0, 1, false],
      [undefined, true, undefined, 2, false],
      [undefined, true, 20_000, 1, false],
      [true, true, undefined, 1, true],
      [true, false, undefined, 1, true],
      [false, false, 20_000, 2, false],
    ];
    for (const [setting, tryOnly, wait, addresses, retried] of table) {
      expect({ setting, tryOnly, wait, addresses, retried: firstConnectRetried(setting, tryOnly, wait, addresses) }).toEqual({ setting, tryOnly, wait, addresses, retried });
    }
    // The machine follows it: a claim with a wait backs off and keeps trying one refusing address...
    const w = new ManualClaim({ retryFirstConnect: undefined, waitMs: 20_000 });
    w.machine.start(w.now);
    w.machine.connectFailed(w.now, new Error("ECONNREFUSED"));
    expect(w.of("retry").map((r) => r.backoff)).toEqual([true]);
    w.advance(w.now + w.of("retry")[0]!.delay);
    expect(w.of("connect")).toHaveLength(2);
    expect(w.ending).toBeUndefined();
    // ...and a TRY claim, or one without a wait, gives up after it.
    for (const rules of [{ waitMs: 20_000, try: true }, { waitMs: undefined, try: false }]) {
      const m = new ManualClaim({ retryFirstConnect: undefined, ...rules });
      m.machine.start(m.now);
      m.machine.connectFailed(m.now, new Error("ECONNREFUSED"));
      expect(m.of("connect")).toHaveLength(1);
      expect((m.ending as { error: unknown }).error).toBeInstanceOf(ServerUnavailableError);
    }
  });

  test("backoff: 50 ms doubling per failed round to 2 s, half fixed and half random, over the whole list", () => {
    for (const [random, expected] of [
      [0, [50, 100, 200, 400, 800, 1000, 1000]],
      [0.999999, [100, 200, 400, 800, 1600, 2000, 2000]],
    ] as const) {
      const m = waiting({ addresses: [A, B], reconnectMs: 1e9 });
      m.randomValue = random;
      const pauses: number[] = [];
      for (let round = 0; round < expected.length; round++) {
        for (const _ of [A, B]) {
          const before = m.of("retry").length;
          m.machine.connected(m.now); // reconnects are not answered: each attempt's connection closes
          m.machine.closed(m.now, new Error("reset"));
          const retry = m.of("retry");
          expect(retry).toHaveLength(before + 1);
          pauses.push(retry.at(-1)!.delay);
          m.advance(m.now + retry.at(-1)!.delay);
        }
      }
      // Within a round: the short pause; at the end of each round: the backoff.
      const roundEnds = pauses.filter((_, i) => i % 2 === 1);
      const within = pauses.filter((_, i) => i % 2 === 0);
      for (const [i, p] of roundEnds.entries()) expect(p).toBeCloseTo(expected[i]!, 2);
      for (const p of within) expect(p).toBeCloseTo(10 + random * 40, 3);
      // onRetry is told which pauses are a backoff (the claim waits): only those at the end of a round.
      expect(m.of("retry").map((r) => r.backoff)).toEqual(pauses.map((_, i) => i % 2 === 1));
      // The addresses alternate: never straight back to the one that failed.
      const indices = m.of("connect").map((c) => c.index);
      for (let i = 1; i < indices.length; i++) expect(indices[i]).not.toBe(indices[i - 1]);
    }
    // The pure function, at its bounds (test/client/schedule.test.ts checks it on the shared vectors).
    for (let round = 1; round <= 12; round++) {
      const base = Math.min(2000, 50 * 2 ** round);
      expect(reconnectPause(round, 1, 0)).toBe(base / 2);
      expect(reconnectPause(round, 1, 0.999999)).toBeLessThan(base);
    }
    expect(reconnectPause(1, 2, 0)).toBe(10);
    expect(reconnectPause(1, 2, 0.999999)).toBeLessThan(50);
  });

  test("an answer from any server starts the count over", () => {
    const m = waiting({ addresses: [A], reconnectMs: 1e9 });
    m.randomValue = 0;
    for (let i = 0; i < 3; i++) {
      m.machine.closed(m.now, undefined);
      m.advance(m.now + m.of("retry").at(-1)!.delay);
      m.machine.connected(m.now);
    }
    expect(m.of("retry").map((r) => r.delay)).toEqual([50, 100, 200]);
    m.replyWaiting();
    m.machine.closed(m.now, undefined);
    expect(m.of("retry").at(-1)!.delay).toBe(50);
  });

  test("reconnectMs of consecutive trouble: unavailable, naming how long and what failed", () => {
    const m = waiting({ reconnectMs: 1000 });
    m.randomValue = 0;
    m.machine.closed(m.now, undefined);
    for (let i = 0; i < 20 && m.ending === undefined; i++) {
      m.advance(m.now + m.of("retry").at(-1)!.delay);
      m.machine.connectFailed(m.now, new Error("ECONNREFUSED"));
    }
    const error = (m.ending as { error: unknown }).error as ServerUnavailableError;
    expect(error).toBeInstanceOf(ServerUnavailableError);
    expect(error.message).toMatch(/unavailable for \d+ ms: cannot connect to 127\.0\.0\.1:7700: ECONNREFUSED/);
    expect(m.ending!.at - 5).toBeGreaterThanOrEqual(1000);
    expect(m.armedAt).toBe(Infinity);
  });

  test("an untrusted certificate is not retried: the claim fails once every address was tried", () => {
    const untrusted = Object.assign(new Error("self signed certificate"), { code: "DEPTH_ZERO_SELF_SIGNED_CERT" });
    const m = waiting({ addresses: [A, B], secure: true, reconnectMs: 1e9 });
    m.machine.connectFailed(m.now, untrusted); // ignored: the connection is open, not connecting
    m.machine.closed(m.now, undefined);
    m.advance(m.now + m.of("retry").at(-1)!.delay);
    m.machine.connectFailed(m.now, untrusted); // B
    m.advance(m.now + 100);
    m.machine.connectFailed(m.now, untrusted); // A: round done with a TLS problem
    const error = (m.ending as { error: unknown }).error as ServerUnavailableError;
    expect(error).toBeInstanceOf(ServerUnavailableError);
    expect(error.tls?.kind).toBe("untrusted");
  });

  test("SERVER_UNAVAILABLE names the claim's shard and its addresses, in the message and in `shard`; without one, neither", () => {
    const ended = (m: ManualClaim): ServerUnavailableError => {
      const error = (m.ending as { error: unknown }).error;
      expect(error).toBeInstanceOf(ServerUnavailableError);
      return error as ServerUnavailableError;
    };
    const refused = new Error("ECONNREFUSED");
    const untrusted = Object.assign(new Error("self signed certificate"), { code: "DEPTH_ZERO_SELF_SIGNED_CERT" });
    for (const shard of ["gamma", undefined]) {
      const what = shard === undefined ? "lock server" : "lock server of shard gamma at 10.0.0.1:7700,[::1]:7701";
      const addresses = [A, { host: "::1", port: 7701 }];
      // Each address once, before any server answered.
      const once = new ManualClaim({ addresses, shard });
      once.machine.start(0);
      once.machine.connectFailed(1, refused);
      once.machine.connectFailed(2, refused);
      expect(ended(once).message).toBe(`${what} unavailable: cannot connect to [::1]:7701: ECONNREFUSED`);
      expect(ended(once).shard).toBe(shard);
      // reconnectMs of trouble.
      const long = waiting({ addresses, shard, reconnectMs: 1000 });
      long.machine.closed(long.now, undefined);
      for (let i = 0; i < 40 && long.ending === undefined; i++) {
        long.advance(long.now + long.of("retry").at(-1)!.delay);
        long.machine.connectFailed(long.now, refused);
      }
      expect(ended(long).message).toStartWith(`${what} unavailable for `);
      expect(ended(long).message).toMatch(/ unavailable for \d+ ms: cannot connect to /);
      expect(ended(long).shard).toBe(shard);
      // A TLS set-up problem.
      const tls = new ManualClaim({ addresses: [A], shard, secure: true });
      tls.machine.start(0);
      tls.machine.connectFailed(1, untrusted);
      const tlsWhat = shard === undefined ? "lock server" : "lock server of shard gamma at 10.0.0.1:7700";
      expect(ended(tls).message).toStartWith(`${tlsWhat} unavailable: the server at 10.0.0.1:7700 presented a certificate this client does not trust`);
      expect(ended(tls).shard).toBe(shard);
      expect(ended(tls).tls?.kind).toBe("untrusted");
    }
  });

  test("a plaintext client reading a TLS record, or HTTP, names what it reached", () => {
    const tls = new ManualClaim().open();
    tls.read(new Uint8Array([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]));
    expect(((tls.ending as { error: unknown }).error as ServerUnavailableError).tls?.kind).toBe("server-speaks-tls");
    const http = new ManualClaim().open();
    http.read(new TextEncoder().encode("HTTP/1.1 400 Bad Request\r\n\r\n"));
    expect(((http.ending as { error: unknown }).error as Error).message).toContain("HTTP port");
  });

  test("wait runs out: WaitTimeoutError, carrying what the last attempt met during trouble", () => {
    const m = waiting({ waitMs: 500, addresses: [A, B] });
    m.advance(499);
    expect(m.ending).toBeUndefined();
    m.advance(500);
    expect((m.ending as { error: unknown }).error).toBeInstanceOf(WaitTimeoutError);

    const t = waiting({ waitMs: 500, reconnectMs: 1e9 });
    t.machine.closed(100, undefined);
    for (let i = 0; i < 30 && t.ending === undefined; i++) {
      t.advance(Math.min(500, t.armedAt));
      if (t.of("connect").length > i + 1) t.machine.connectFailed(t.now, new Error("ECONNREFUSED"));
    }
    const error = (t.ending as { error: unknown }).error as WaitTimeoutError;
    expect(error).toBeInstanceOf(WaitTimeoutError);
    expect(t.ending!.at).toBe(500);
    expect(error.message).toContain("ECONNREFUSED");
  });

  test("wait runs out while the shard's servers are down: WaitTimeoutError names the shard, in the message and in `shard`; without one, neither", () => {
    for (const shard of ["gamma", undefined]) {
      const m = new ManualClaim({ addresses: [A, B], shard, waitMs: 500, retryFirstConnect: true, reconnectMs: 1e9 });
      m.machine.start(0);
      for (let i = 0; i < 40 && m.ending === undefined; i++) {
        if (m.of("connect").length > i) m.machine.connectFailed(m.now, new Error("ECONNREFUSED"));
        if (m.ending === undefined) m.advance(Math.min(500, m.armedAt));
      }
      const error = (m.ending as { error: unknown }).error as WaitTimeoutError;
      expect(error).toBeInstanceOf(WaitTimeoutError);
      expect(m.ending!.at).toBe(500);
      expect(error.shard).toBe(shard);
      expect(error.unavailable).toMatch(/^cannot connect to 10\.0\.0\.[12]:7700: ECONNREFUSED$/);
      const server = shard === undefined ? "lock server" : "lock server of shard gamma";
      expect(error.message).toBe(`lock "m/lock" was not granted within 500 ms (${server} unavailable: ${error.unavailable})`);
    }
    // Waiting on a busy lock with the servers up: no shard talk, nothing unavailable.
    const busy = waiting({ waitMs: 500, shard: "gamma" });
    busy.advance(500);
    const error = (busy.ending as { error: unknown }).error as WaitTimeoutError;
    expect(error.unavailable).toBeUndefined();
    expect(error.message).toBe(`lock "m/lock" was not granted within 500 ms`);
  });
});

describe("abort and release", () => {
  test("an abort racing a grant: whichever the machine hears first wins, and only one ending is reported", () => {
    // The abort first: the grant read in the same turn is ignored.
    const m = waiting();
    m.machine.abort(100, "stop");
    m.pushGranted(9);
    expect(m.of("granted")).toEqual([]);
    expect(m.effects.filter((e) => e.kind === "failed" || e.kind === "lost")).toHaveLength(1);
    expect((m.ending as { error: unknown }).error).toBeInstanceOf(LockAbortedError);
    expect(m.of("disconnect")).toHaveLength(1);
    // The grant first: the abort then ends the held lock (why "aborted").
    const g = waiting();
    g.pushGranted(9);
    g.machine.abort(100, "stop");
    expect(g.of("granted")).toHaveLength(1);
    expect(g.of("lost")[0]!.error.why).toBe("aborted");
    expect(g.of("lost")[0]!.error.class).toBe("client");
    g.machine.abort(101, "again");
    g.machine.release(102);
    expect(g.effects.filter((e) => e.kind === "failed" || e.kind === "lost")).toHaveLength(1);
  });

  test("an abort during a connect: the connect's late outcome is ignored", () => {
    const m = new ManualClaim();
    m.machine.start(0);
    m.machine.abort(1, "stop");
    m.machine.connected(2);
    expect(m.sends(FrameType.ACQUIRE)).toEqual([]);
    expect(m.of("disconnect")).toHaveLength(1);
  });

  test("release: a held lock is lost with why released, then the connection closes; twice is harmless", () => {
    const m = held();
    m.advance(300);
    m.machine.release(m.now);
    expect(m.effects.slice(-2).map((e) => e.kind)).toEqual(["lost", "disconnect"]);
    expect(m.of("lost")[0]!.error.why).toBe("released");
    m.machine.release(m.now);
    m.advance(10_000);
    expect(m.effects.slice(-2).map((e) => e.kind)).toEqual(["lost", "disconnect"]);
    expect(m.armedAt).toBe(Infinity);

    const w = waiting();
    w.machine.release(50);
    expect((w.ending as { error: unknown }).error).toBeInstanceOf(LockAbortedError);
  });
});
