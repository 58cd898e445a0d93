/**
 * Reclaim (protocol.md section 14.3): a holder whose grant had RECLAIMABLE
 * keeps its lock across a clean stop of the server (SHUTTING_DOWN with
 * RECLAIM) by claiming the grant back, with its token, from the server's
 * next run before its deadline. First the rules on a manual clock (the
 * ClaimMachine), then the client over real sockets against scripted
 * servers: granted, refused, answered with another token, a bare EOF, the
 * deadline passing, a server that restarts on its port, and the option off.
 */
import { describe, expect, test } from "bun:test";
import { LockClient, LockLostError, type Connector, type Lock } from "../../src/client/index.ts";
import { connectBun } from "../../src/client/bun-transport.ts";
import { clientTimeout } from "../../src/client/schedule.ts";
import {
  ErrorCode,
  FLAG_RECLAIM,
  FLAG_RECLAIMABLE,
  FLAG_REPLY,
  FrameType,
  decodeAcquire,
  encodeAcquire,
  encodeAcquired,
  encodeAcquiredSlot,
  encodeError,
  type Acquire,
} from "../../src/protocol/index.ts";
import { Wakeup } from "../helpers/events.ts";
import { FakeServer, aborted, type ClientFrame, type FakeConn } from "./fake-server.ts";
import { ManualClaim } from "./manual-claim.ts";

const LEASE = 1000;
const DEADLINE = clientTimeout(LEASE); // 800 ms after the last answered send

/** SHUTTING_DOWN, with the RECLAIM flag (a clean stop that published its holders) or without. */
function shuttingDown(reclaim: boolean): Uint8Array {
  const frame = encodeError(ErrorCode.SHUTTING_DOWN, "server is shutting down cleanly");
  if (reclaim) frame[1] = FLAG_RECLAIM;
  return frame;
}

// ------------------------------------------------------------------ the rules, on a manual clock

/** The reclaim frames the machine asked for: (token, slot) each. */
function reclaimRecorder(): { calls: [bigint, number][]; frame: (token: bigint, slot: number) => Uint8Array } {
  const calls: [bigint, number][] = [];
  return {
    calls,
    frame: (token, slot) => {
      calls.push([token, slot]);
      return encodeAcquire({ name: "m/lock", leaseMs: LEASE, owner: "test", try: false, reclaim: { token, ...(slot >= 0 ? { slot } : {}) }, limit: slot >= 0 ? 3 : 1 });
    },
  };
}

/** Held with token 7 (RECLAIMABLE unless `flagged` is false), ACQUIRE sent at 0 and answered at 10: the deadline is 800. */
function heldReclaimable(flagged = true, rules: ConstructorParameters<typeof ManualClaim>[0] = {}) {
  const recorder = reclaimRecorder();
  const m = new ManualClaim({ reclaimFrame: recorder.frame, ...rules }).open();
  m.advance(10);
  m.read(encodeAcquired(7, FLAG_REPLY | (flagged ? FLAG_RECLAIMABLE : 0)));
  expect(m.machine.state).toBe("held");
  expect(m.machine.reclaimable).toBe(flagged);
  return { m, recorder };
}

/** After the SHUTTING_DOWN at `at`: let the pause run out, connect, and return the time the reclaim was sent. */
function reconnect(m: ManualClaim): number {
  const connects = m.of("connect").length;
  // The timer may fire first for what was armed before the stop (a heartbeat's time): on to the pause's end.
  for (let guard = 0; m.of("connect").length === connects && guard < 10; guard++) m.advance(m.armedAt);
  expect(m.of("connect").length).toBe(connects + 1);
  m.machine.connected(m.now);
  return m.now;
}

describe("reclaim: the rules", () => {
  test("SHUTTING_DOWN with RECLAIM: still held, a paced reconnect sends ACQUIRE with RECLAIM and the token; the same token confirms it again and heartbeats go on", () => {
    const { m, recorder } = heldReclaimable();
    m.advance(100);
    m.read(shuttingDown(true));
    expect(m.machine.state).toBe("held");
    expect(m.machine.reclaiming).toBe(true);
    expect(m.ending).toBeUndefined();
    expect(m.of("disconnect").length).toBe(1);
    expect(m.machine.checkHeld(m.now)).toBe(true); // the lock is held through the reclaim, to its deadline
    expect(m.armedAt).toBeGreaterThan(100);
    expect(m.armedAt).toBeLessThanOrEqual(100 + 100); // the usual pacing: a first backoff of 50-100 ms
    const sentAt = reconnect(m);
    expect(recorder.calls).toEqual([[7n, -1]]);
    expect(m.sends(FrameType.ACQUIRE)).toEqual([0, sentAt]);
    m.advance(sentAt + 5);
    m.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(m.of("reclaimed")).toEqual([{ at: sentAt + 5, kind: "reclaimed", token: 7n, slot: -1 }]);
    expect(m.machine.reclaiming).toBe(false);
    expect(m.machine.reclaims).toBe(1);
    // The reclaim's send is the last answered send: the lock lives past the old deadline, on heartbeats.
    expect(m.machine.confirmedAt).toBe(sentAt);
    for (let t = sentAt + 5; t < 3000; t += 50) {
      m.advance(t);
      if (m.machine.heartbeatsSent > 0 && m.sends().at(-1)! >= t - 50) m.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    }
    expect(m.ending).toBeUndefined();
    expect(m.sends().length).toBeGreaterThan(5);
    expect(m.machine.checkHeld(m.now)).toBe(true);
  });

  test("the deadline does not move: a server that does not come back loses the lock 0.8 x lease after the last answered send, after paced retries", () => {
    const { m } = heldReclaimable();
    m.advance(300);
    m.read(shuttingDown(true));
    for (let guard = 0; m.ending === undefined && guard < 100; guard++) {
      m.advance(m.armedAt);
      if (m.ending === undefined) m.machine.connectFailed(m.now, Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }));
    }
    const lost = m.ending!;
    expect(lost).toMatchObject({ kind: "lost", at: DEADLINE });
    const error = (lost as { error: LockLostError }).error;
    expect(error.why).toBe("unconfirmed");
    expect(error.message).toContain("not reclaimed within 800 ms");
    expect(error.message).toContain("ECONNREFUSED");
    const connects = m.of("connect").slice(1);
    // Paced, one address: the backoff, 50-100 ms after the stop, then 100-200 ms, 200-400 ms: two reconnects before 800.
    expect(connects.map((c) => c.at)).toEqual([300 + 75, 300 + 75 + 150]);
    expect(m.machine.checkHeld(m.now)).toBe(false);
  });

  test("the deadline passes while the reclaim is unanswered: lost at the deadline", () => {
    const { m } = heldReclaimable();
    m.advance(200);
    m.read(shuttingDown(true));
    reconnect(m);
    m.advance(DEADLINE - 0.001);
    expect(m.ending).toBeUndefined();
    m.advance(DEADLINE);
    expect(m.ending).toMatchObject({ kind: "lost", at: DEADLINE });
    expect((m.ending as { error: LockLostError }).error.why).toBe("unconfirmed");
  });

  test("an answer read after the deadline (a paused process) confirms nothing: lost", () => {
    const { m } = heldReclaimable();
    m.advance(200);
    m.read(shuttingDown(true));
    reconnect(m);
    m.pause(DEADLINE + 50);
    m.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(m.of("reclaimed")).toEqual([]);
    expect((m.ending as { error: LockLostError }).error.why).toBe("unconfirmed");
  });

  test("every other answer to the reclaim loses the lock: another token, RECLAIM_REFUSED, a push, WAITING, a close", () => {
    const cases: [string, (m: ManualClaim) => void, string, number | undefined][] = [
      ["another token", (m) => m.read(encodeAcquired(8, FLAG_REPLY | FLAG_RECLAIMABLE)), "protocol", undefined],
      ["RECLAIM_REFUSED", (m) => m.error(ErrorCode.RECLAIM_REFUSED, "no published grant"), "server-error", ErrorCode.RECLAIM_REFUSED],
      ["SHUTTING_DOWN again", (m) => m.read(shuttingDown(true)), "server-error", ErrorCode.SHUTTING_DOWN],
      ["a push", (m) => m.read(encodeAcquired(7, FLAG_RECLAIMABLE)), "protocol", undefined],
      ["WAITING", (m) => m.replyWaiting(), "protocol", undefined],
      ["a close", (m) => m.machine.closed(m.now, undefined), "closed", undefined],
    ];
    for (const [what, answer, why, serverCode] of cases) {
      const { m } = heldReclaimable();
      m.advance(100);
      m.read(shuttingDown(true));
      reconnect(m);
      m.advance(m.now + 5);
      answer(m);
      expect(m.of("reclaimed"), what).toEqual([]);
      const error = (m.ending as { error: LockLostError } | undefined)?.error;
      expect(error?.why, what).toBe(why as LockLostError["why"]);
      expect(error?.serverCode, what).toBe(serverCode);
    }
  });

  test("a loss as before: SHUTTING_DOWN without RECLAIM, a grant not flagged RECLAIMABLE, reclaim off, or the last answer without the flag", () => {
    const plain = heldReclaimable().m;
    plain.read(shuttingDown(false));
    const unflagged = heldReclaimable(false).m;
    unflagged.read(shuttingDown(true));
    const off = heldReclaimable(true, { reclaimFrame: undefined }).m;
    off.read(shuttingDown(true));
    // Granted reclaimable, but the heartbeat's answer no longer says so: the latest ACQUIRED decides.
    const dropped = heldReclaimable().m;
    dropped.advance(dropped.armedAt);
    dropped.read(encodeAcquired(7, FLAG_REPLY));
    expect(dropped.machine.reclaimable).toBe(false);
    dropped.read(shuttingDown(true));
    for (const m of [plain, unflagged, off, dropped]) {
      const error = (m.ending as { error: LockLostError }).error;
      expect(error.why).toBe("server-error");
      expect(error.serverCode).toBe(ErrorCode.SHUTTING_DOWN);
      expect(m.of("connect").length).toBe(1); // no reconnect
    }
  });

  test("a semaphore's grant is reclaimed with its slot, and an answer with another slot loses it", () => {
    for (const answerSlot of [2, 1]) {
      const recorder = reclaimRecorder();
      const m = new ManualClaim({ reclaimFrame: recorder.frame, limit: 3 }).open();
      m.advance(10);
      m.read(encodeAcquiredSlot(7, 2, FLAG_REPLY | FLAG_RECLAIMABLE));
      m.read(shuttingDown(true));
      reconnect(m);
      expect(recorder.calls).toEqual([[7n, 2]]);
      m.read(encodeAcquiredSlot(7, answerSlot, FLAG_REPLY | FLAG_RECLAIMABLE));
      if (answerSlot === 2) expect(m.of("reclaimed")).toEqual([{ at: m.now, kind: "reclaimed", token: 7n, slot: 2 }]);
      else expect((m.ending as { error: LockLostError }).error.why).toBe("protocol");
    }
  });

  test("reclaimed twice (a second restart), and a release during a reclaim ends it as a release", () => {
    const { m, recorder } = heldReclaimable();
    for (let round = 1; round <= 2; round++) {
      m.read(shuttingDown(true));
      reconnect(m);
      m.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
      expect(m.machine.reclaims).toBe(round);
    }
    expect(recorder.calls).toEqual([[7n, -1], [7n, -1]]);
    m.read(shuttingDown(true));
    m.machine.release(m.now);
    expect((m.ending as { error: LockLostError }).error.why).toBe("released");
    expect(m.armedAt).toBe(Infinity);
  });
});

// ------------------------------------------------------------------ over real sockets

const NAME = "reclaim/job";
const REAL_LEASE = 2000;

/** ACQUIRED with REPLY and RECLAIMABLE, token 9. */
const RECLAIMABLE_9 = encodeAcquired(9, FLAG_REPLY | FLAG_RECLAIMABLE);

function acquireOf(frame: ClientFrame): Acquire {
  const decoded = decodeAcquire(frame.body, 0, frame.body.length);
  if (!decoded.ok) throw new Error(`bad ACQUIRE: ${decoded.message}`);
  return decoded.request;
}

/**
 * A server with reclaim on: grants token 9 (RECLAIMABLE) to a fresh ACQUIRE
 * and answers heartbeats; a reclaim gets `onReclaim`'s answer (default: the
 * grant, token 9).
 */
function reclaimServer(onReclaim: (conn: FakeConn, request: Acquire) => void = (conn) => conn.socket.write(RECLAIMABLE_9)): FakeServer {
  return new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE) {
      const request = acquireOf(frame);
      if (request.reclaim !== undefined) onReclaim(conn, request);
      else conn.socket.write(RECLAIMABLE_9);
    } else if (frame.type === FrameType.HEARTBEAT) conn.socket.write(RECLAIMABLE_9);
  });
}

/** The clean stop: SHUTTING_DOWN with RECLAIM to the first connection, and the close. */
function cleanStop(server: FakeServer, flag = true): void {
  server.conns[0]!.socket.write(shuttingDown(flag));
  server.conns[0]!.socket.end();
}

function clientFor(port: number, connect?: Connector): LockClient {
  return new LockClient({ servers: `127.0.0.1:${port}`, owner: "reclaimer", ...(connect ? { connect } : {}) });
}

describe("reclaim over real sockets", () => {
  test("a clean stop is ridden out: the reclaim carries the claim and its token, onReclaim reports it, the signal never aborts, heartbeats go on", async () => {
    using server = reclaimServer();
    const reclaimed: Lock[] = [];
    const lock = await clientFor(server.port).acquire(NAME, { lease: REAL_LEASE, onReclaim: (l) => reclaimed.push(l) });
    expect(lock.token).toBe(9n);
    cleanStop(server);
    const second = await server.until(() => server.conns[1]?.frames[0], 5000, "the reclaim");
    expect(acquireOf(second)).toEqual({ name: NAME, leaseMs: REAL_LEASE, owner: "reclaimer", try: false, limit: 1, shared: false, reclaim: { token: 9, slot: -1 } });
    // Heartbeats on the new connection, for longer than the old deadline (0.8 x lease after the last answered send).
    await server.until(() => server.conns[1]!.frames.filter((f) => f.type === FrameType.HEARTBEAT).length >= 5, 8000, "heartbeats after the reclaim");
    expect(server.conns[1]!.frames.at(-1)!.at - server.conns[0]!.frames.at(-1)!.at).toBeGreaterThan(clientTimeout(REAL_LEASE));
    expect(reclaimed).toEqual([lock]);
    expect(lock.reclaims).toBe(1);
    expect(lock.reclaiming).toBe(false);
    expect(lock.signal.aborted).toBe(false);
    expect(lock.held).toBe(true);
    expect(lock.token).toBe(9n);
    await lock.release();
    expect((lock.signal.reason as LockLostError).why).toBe("released");
  });

  test("withLock: the work runs through a reclaim without its signal aborting", async () => {
    using server = reclaimServer();
    const result = await clientFor(server.port).withLock(
      NAME,
      async ({ signal, token }) => {
        cleanStop(server);
        await server.until(() => server.conns[1]?.frames.some((f) => f.type === FrameType.HEARTBEAT), 5000, "a heartbeat after the reclaim");
        expect(signal.aborted).toBe(false);
        return token;
      },
      { lease: REAL_LEASE },
    );
    expect(result).toBe(9n);
  });

  test("a reclaim answered with another token: lost (protocol)", async () => {
    using server = reclaimServer((conn) => conn.socket.write(encodeAcquired(10, FLAG_REPLY | FLAG_RECLAIMABLE)));
    const lock = await clientFor(server.port).acquire(NAME, { lease: REAL_LEASE });
    cleanStop(server);
    await aborted(lock.signal, 5000);
    expect((lock.signal.reason as LockLostError).why).toBe("protocol");
    expect((lock.signal.reason as LockLostError).message).toContain("answered with token 10");
    expect(lock.reclaims).toBe(0);
  });

  test("a refused reclaim: lost (server-error RECLAIM_REFUSED)", async () => {
    using server = reclaimServer((conn) => {
      conn.socket.write(encodeError(ErrorCode.RECLAIM_REFUSED, "no published grant of this name with that token"));
      conn.socket.end();
    });
    const lock = await clientFor(server.port).acquire(NAME, { lease: REAL_LEASE });
    cleanStop(server);
    await aborted(lock.signal, 5000);
    const reason = lock.signal.reason as LockLostError;
    expect(reason.why).toBe("server-error");
    expect(reason.serverCode).toBe(ErrorCode.RECLAIM_REFUSED);
    expect(lock.held).toBe(false);
  });

  test("a bare EOF is a loss, as before: no reclaim is tried", async () => {
    using server = reclaimServer();
    const lock = await clientFor(server.port).acquire(NAME, { lease: REAL_LEASE });
    server.conns[0]!.socket.end();
    await aborted(lock.signal, 5000);
    expect((lock.signal.reason as LockLostError).why).toBe("closed");
    expect(server.conns.length).toBe(1);
  });

  test("the deadline passes during the reclaim (the new run never answers): lost, unconfirmed, within the lease", async () => {
    using server = reclaimServer(() => {});
    const lock = await clientFor(server.port).acquire(NAME, { lease: REAL_LEASE });
    const lastAnswered = server.conns[0]!.frames.at(-1)!.at;
    cleanStop(server);
    await server.until(() => server.conns[1]?.frames[0], 5000, "the reclaim");
    expect(lock.held).toBe(true);
    const lostAt = await aborted(lock.signal, 5000);
    expect((lock.signal.reason as LockLostError).why).toBe("unconfirmed");
    // Counted from the send of the last answered frame, not from the stop or the reclaim: before a whole lease.
    expect(lostAt - lastAnswered).toBeLessThan(REAL_LEASE);
  });

  test("reclaim: false turns it off: SHUTTING_DOWN with RECLAIM is a loss", async () => {
    using server = reclaimServer();
    const lock = await clientFor(server.port).acquire(NAME, { lease: REAL_LEASE, reclaim: false });
    cleanStop(server);
    await aborted(lock.signal, 5000);
    const reason = lock.signal.reason as LockLostError;
    expect(reason.why).toBe("server-error");
    expect(reason.serverCode).toBe(ErrorCode.SHUTTING_DOWN);
    expect(server.conns.length).toBe(1);
  });

  test("a server that restarts on its port: refused connects are retried, and the reclaim is granted by the new run", async () => {
    const refused = new Wakeup();
    let refusals = 0;
    const connect: Connector = (address, tls, events) =>
      connectBun(address, tls, events).catch((error: unknown) => {
        refusals++;
        refused.wake();
        throw error;
      });
    const first = reclaimServer();
    const port = first.port;
    let second: FakeServer | null = null;
    try {
      const lock = await clientFor(port, connect).acquire(NAME, { lease: REAL_LEASE });
      cleanStop(first);
      await first.until(() => first.conns[0]!.closed, 5000, "the stop's close");
      first[Symbol.dispose]();
      await refused.until(() => refusals >= 1, 5000, () => "a refused connect while the server is down");
      expect(lock.reclaiming).toBe(true);
      expect(lock.held).toBe(true);
      second = reclaimServerOn(port);
      const s = second;
      await s.until(() => s.conns[0]?.frames.some((f) => f.type === FrameType.HEARTBEAT), 5000, "a heartbeat to the new run");
      expect(acquireOf(s.conns[0]!.frames[0]!).reclaim).toEqual({ token: 9, slot: -1 });
      expect(lock.reclaims).toBe(1);
      expect(lock.signal.aborted).toBe(false);
      await lock.release();
    } finally {
      first[Symbol.dispose]();
      second?.[Symbol.dispose]();
    }
  });
});

/** The new run of `reclaimServer` on the port the old one had. */
function reclaimServerOn(port: number): FakeServer {
  return new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE || frame.type === FrameType.HEARTBEAT) conn.socket.write(RECLAIMABLE_9);
  }, port);
}
