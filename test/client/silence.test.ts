/**
 * Reclaim on silence (protocol.md section 14.3, "On silence"): a holder
 * whose grant had RECLAIMABLE and whose HEARTBEAT has been unanswered for
 * lease/4 keeps its connection and reclaims on a second one. First the rules
 * on a manual clock (the ClaimMachine: when the silence starts, where the
 * second connection goes, what each outcome does, the deadline), then the
 * client over real sockets against a scripted server that goes silent.
 */
import { describe, expect, test } from "bun:test";
import { LockClient, LockLostError, type Lock } from "../../src/client/index.ts";
import { clientTimeout } from "../../src/client/schedule.ts";
import {
  ErrorCode,
  FLAG_RECLAIM,
  FLAG_RECLAIMABLE,
  FLAG_REPLY,
  FrameType,
  WAITING_REPLY_FRAME,
  decodeAcquire,
  encodeAcquire,
  encodeAcquired,
  encodeAcquiredSlot,
  encodeError,
} from "../../src/protocol/index.ts";
import { FakeServer, aborted, type ClientFrame } from "./fake-server.ts";
import { ManualClaim } from "./manual-claim.ts";

const LEASE = 1000;
/** ACQUIRE sent at 0 and answered at 10: confirmed up to 0, the deadline is 800. */
const DEADLINE = clientTimeout(LEASE);
/** The first HEARTBEAT goes out at 10 + (250 - 2 x 10) = 240; unanswered, the silence starts lease/4 later. */
const HEARTBEAT_AT = 240;
const SILENT_AT = HEARTBEAT_AT + LEASE / 4;
const OPTION_RECLAIM = 0x08;
const TWO = [
  { host: "127.0.0.1", port: 7700 },
  { host: "127.0.0.1", port: 7701 },
];
const ECONNREFUSED = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });

function shuttingDown(reclaim: boolean): Uint8Array {
  const frame = encodeError(ErrorCode.SHUTTING_DOWN, "server is shutting down cleanly");
  if (reclaim) frame[1] = FLAG_RECLAIM;
  return frame;
}

const reclaimFrame = (token: bigint, slot: number) =>
  encodeAcquire({ name: "m/lock", leaseMs: LEASE, owner: "test", try: false, reclaim: { token, ...(slot >= 0 ? { slot } : {}) }, limit: slot >= 0 ? 3 : 1 });

/** Held with token 7 (RECLAIMABLE unless `flagged` is false), its first HEARTBEAT sent at 240 and never answered. */
function heldThenSilent(rules: ConstructorParameters<typeof ManualClaim>[0] = {}, flagged = true): ManualClaim {
  const m = new ManualClaim({ reclaimFrame, addresses: TWO, retryFirstConnect: true, ...rules }).open();
  m.advance(10);
  m.read(encodeAcquired(7, FLAG_REPLY | (flagged ? FLAG_RECLAIMABLE : 0)));
  expect(m.machine.state).toBe("held");
  m.advance(HEARTBEAT_AT);
  expect(m.sends()).toEqual([HEARTBEAT_AT]);
  return m;
}

function lostError(m: ManualClaim): LockLostError {
  const ending = m.ending;
  if (ending?.kind !== "lost") throw new Error(`not lost: ${JSON.stringify(ending)}`);
  return ending.error;
}

describe("reclaim on silence: the rules", () => {
  test("a HEARTBEAT unanswered for lease/4: a second connection to the next address, the old one kept; the grant there promotes it, confirmed up to its send, reclaimed", () => {
    const m = heldThenSilent();
    m.advance(SILENT_AT - 0.001);
    expect(m.of("connect-second")).toEqual([]);
    m.advance(SILENT_AT);
    expect(m.machine.silent).toBe(true);
    expect(m.of("connect-second")).toEqual([{ at: SILENT_AT, kind: "connect-second", index: 1 }]);
    expect(m.of("disconnect")).toEqual([]); // the old connection stays open, its HEARTBEAT in flight
    expect(m.sends()).toEqual([HEARTBEAT_AT]); // and no second HEARTBEAT while that one is unanswered
    expect(m.machine.checkHeld(m.now)).toBe(true);
    m.advance(SILENT_AT + 5);
    m.machine.secondConnected(m.now);
    expect(m.of("send-second")).toEqual([{ at: SILENT_AT + 5, kind: "send-second", type: FrameType.ACQUIRE, options: OPTION_RECLAIM }]);
    m.advance(SILENT_AT + 8);
    m.readSecond(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(m.of("promote-second").map((e) => e.at)).toEqual([SILENT_AT + 8]);
    expect(m.of("reclaimed")).toEqual([{ at: SILENT_AT + 8, kind: "reclaimed", token: 7n, slot: -1 }]);
    expect(m.machine.silent).toBe(false);
    expect(m.machine.reclaims).toBe(1);
    expect(m.machine.confirmedAt).toBe(SILENT_AT + 5);
    expect(m.machine.addressIndex).toBe(1);
    // Heartbeats go on (on the promoted connection: the shell's `send`), well past the old deadline.
    for (let t = m.now; t < 3000; t += 20) {
      m.advance(t);
      if (m.sends().at(-1)! >= t - 20 && m.sends().at(-1)! > SILENT_AT) m.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    }
    expect(m.ending).toBeUndefined();
    expect(m.sends().length).toBeGreaterThan(5);
    expect(m.of("connect-second").length).toBe(1);
  });

  test("with one address the second connection goes to that address again", () => {
    const m = heldThenSilent({ addresses: [TWO[0]!] });
    m.advance(SILENT_AT);
    expect(m.of("connect-second")).toEqual([{ at: SILENT_AT, kind: "connect-second", index: 0 }]);
  });

  test("an answer on the old connection ends the silence: the second connection is closed, no reclaim, heartbeats go on there", () => {
    for (const stage of ["connecting", "reclaim in flight", "between attempts"] as const) {
      const m = heldThenSilent();
      m.advance(SILENT_AT);
      if (stage !== "connecting") m.machine.secondConnected(m.now);
      if (stage === "between attempts") m.readSecond(encodeError(ErrorCode.RECLAIM_REFUSED, "not in a grace"));
      const closedBefore = m.of("disconnect-second").length;
      m.advance(SILENT_AT + 3);
      m.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
      expect(m.machine.silent, stage).toBe(false);
      expect(m.machine.confirmedAt, stage).toBe(HEARTBEAT_AT);
      expect(m.of("disconnect-second").length, stage).toBe(stage === "between attempts" ? closedBefore : 1);
      const attempts = m.of("connect-second").length;
      for (let t = m.now; t < 2000; t += 20) {
        m.advance(t);
        if (m.sends().at(-1)! >= t - 20) m.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
      }
      expect(m.of("connect-second").length, stage).toBe(attempts); // no attempt after the answer
      expect(m.of("reclaimed"), stage).toEqual([]);
      expect(m.of("promote-second"), stage).toEqual([]);
      expect(m.ending, stage).toBeUndefined();
    }
  });

  test("every attempt fails: the next address each time (wrapping), paced; lost at the deadline, not before", () => {
    const m = heldThenSilent();
    m.advance(SILENT_AT);
    const outcomes = [
      () => m.machine.secondConnectFailed(m.now, ECONNREFUSED),
      () => {
        m.machine.secondConnected(m.now);
        m.readSecond(encodeError(ErrorCode.RECLAIM_REFUSED, "not in a grace"));
      },
    ];
    for (let i = 0, guard = 0; m.ending === undefined && guard < 50; guard++) {
      if (m.of("connect-second").length > i) outcomes[i++ % 2]!();
      else m.advance(m.armedAt);
    }
    expect(m.ending).toMatchObject({ kind: "lost", at: DEADLINE });
    const error = lostError(m);
    expect(error.why).toBe("unconfirmed");
    expect(error.message).toContain("not reclaimed on silence");
    const attempts = m.of("connect-second");
    expect(attempts.length).toBeGreaterThanOrEqual(3);
    expect(attempts.map((a) => a.index)).toEqual(attempts.map((_, k) => (1 + k) % 2));
    // The reconnect pacing: 10-50 ms within a round, the backoff after it (random 0.5: 30 ms, then 75 ms).
    expect(attempts[1]!.at - attempts[0]!.at).toBe(30);
    expect(attempts[2]!.at - attempts[1]!.at).toBe(75);
    expect(m.of("lost").length).toBe(1);
  });

  test("what fails an attempt (and only the attempt): WAITING, a push, another token, another slot, a malformed grant, a close, a bad frame, no answer within lease/4", () => {
    const cases: [string, (m: ManualClaim) => void][] = [
      ["WAITING", (m) => m.readSecond(WAITING_REPLY_FRAME)],
      ["a push", (m) => m.readSecond(encodeAcquired(7, FLAG_RECLAIMABLE))],
      ["another token", (m) => m.readSecond(encodeAcquired(8, FLAG_REPLY | FLAG_RECLAIMABLE))],
      ["a malformed grant", (m) => m.readSecond(encodeAcquiredSlot(7, 0, FLAG_REPLY | FLAG_RECLAIMABLE))],
      ["another ERROR", (m) => m.readSecond(encodeError(ErrorCode.SHUTTING_DOWN, "stopping"))],
      ["a close", (m) => m.machine.secondClosed(m.now, undefined)],
      ["a bad frame", (m) => m.readSecond(new Uint8Array([0x7f, 0, 0, 0]))],
      ["no answer", (m) => m.advance(m.now + LEASE / 4)],
    ];
    for (const [what, outcome] of cases) {
      const m = heldThenSilent();
      m.advance(SILENT_AT);
      m.machine.secondConnected(m.now);
      outcome(m);
      expect(m.ending, what).toBeUndefined();
      expect(m.machine.silent, what).toBe(true);
      expect(m.machine.checkHeld(m.now), what).toBe(true);
      expect(m.of("reclaimed"), what).toEqual([]);
      if (what !== "a close") expect(m.of("disconnect-second").length, what).toBe(1);
      // Another attempt follows, paced.
      m.advance(m.armedAt);
      expect(m.of("connect-second").length, what).toBe(2);
    }
  });

  test("a semaphore's reclaim carries its slot; an answer with another slot fails the attempt, the same slot reclaims", () => {
    const m = new ManualClaim({ reclaimFrame, limit: 3, addresses: TWO }).open();
    m.advance(10);
    m.read(encodeAcquiredSlot(7, 2, FLAG_REPLY | FLAG_RECLAIMABLE));
    m.advance(SILENT_AT);
    m.machine.secondConnected(m.now);
    m.readSecond(encodeAcquiredSlot(7, 1, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(m.of("reclaimed")).toEqual([]);
    expect(m.ending).toBeUndefined();
    m.advance(m.armedAt);
    m.machine.secondConnected(m.now);
    m.readSecond(encodeAcquiredSlot(7, 2, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(m.of("reclaimed")).toEqual([{ at: m.now, kind: "reclaimed", token: 7n, slot: 2 }]);
  });

  test("the reclaim's grant read after the deadline (a paused process) confirms nothing: lost, not reclaimed", () => {
    const m = heldThenSilent();
    m.advance(SILENT_AT);
    m.machine.secondConnected(m.now);
    m.pause(DEADLINE + 30);
    m.readSecond(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(m.of("reclaimed")).toEqual([]);
    expect(lostError(m).why).toBe("unconfirmed");
  });

  test("any other end of the old connection is a loss, at once, and the second connection is closed; nothing it reads later counts", () => {
    const cases: [string, (m: ManualClaim) => void, string][] = [
      ["an EOF", (m) => m.machine.closed(m.now, undefined), "closed"],
      ["an RST", (m) => m.machine.closed(m.now, Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })), "closed"],
      ["SHUTTING_DOWN without RECLAIM", (m) => m.read(shuttingDown(false)), "server-error"],
      ["another ERROR", (m) => m.error(ErrorCode.LEASE_EXPIRED), "server-error"],
      ["WAITING", (m) => m.read(WAITING_REPLY_FRAME), "protocol"],
    ];
    for (const [what, end, why] of cases) {
      const m = heldThenSilent();
      m.advance(SILENT_AT);
      m.machine.secondConnected(m.now);
      m.advance(SILENT_AT + 20);
      end(m);
      expect(m.ending?.at, what).toBe(SILENT_AT + 20);
      expect(lostError(m).why, what).toBe(why as LockLostError["why"]);
      expect(m.of("disconnect-second").length, what).toBe(1);
      m.readSecond(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
      expect(m.of("reclaimed"), what).toEqual([]);
      expect(m.armedAt, what).toBe(Infinity);
    }
  });

  test("SHUTTING_DOWN with RECLAIM on the old connection: the attempt under way is the reclaim's first (its ACQUIRE in flight, or its connect), else the clean stop's own reconnect", () => {
    // The reclaim in flight on the second connection: promoted, its answer reclaims.
    const inFlight = heldThenSilent();
    inFlight.advance(SILENT_AT);
    inFlight.machine.secondConnected(inFlight.now);
    inFlight.advance(SILENT_AT + 10);
    inFlight.read(shuttingDown(true));
    expect(inFlight.of("promote-second").length).toBe(1);
    expect(inFlight.machine.reclaiming).toBe(true);
    expect(inFlight.machine.silent).toBe(false);
    inFlight.advance(SILENT_AT + 12);
    inFlight.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(inFlight.of("reclaimed").length).toBe(1);
    expect(inFlight.machine.confirmedAt).toBe(SILENT_AT);
    expect(inFlight.of("connect").length).toBe(1); // no new connection was opened for it

    // Still connecting: promoted, and the connect's completion sends the reclaim on it.
    const connecting = heldThenSilent();
    connecting.advance(SILENT_AT);
    connecting.read(shuttingDown(true));
    expect(connecting.of("promote-second").length).toBe(1);
    connecting.advance(SILENT_AT + 4);
    connecting.machine.connected(connecting.now);
    expect(connecting.sends(FrameType.ACQUIRE)).toEqual([0, SILENT_AT + 4]);
    connecting.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    expect(connecting.of("reclaimed").length).toBe(1);

    // Between attempts: the clean stop's reclaim as without the silence (the old connection dropped, a paced connect).
    const pausing = heldThenSilent();
    pausing.advance(SILENT_AT);
    pausing.machine.secondConnectFailed(pausing.now, ECONNREFUSED);
    pausing.read(shuttingDown(true));
    expect(pausing.machine.silent).toBe(false);
    expect(pausing.machine.reclaiming).toBe(true);
    expect(pausing.of("disconnect").length).toBe(1);
    pausing.advance(pausing.armedAt);
    expect(pausing.of("connect").length).toBe(2);
    expect(pausing.of("connect-second").length).toBe(1);
    // A refusal now is the clean stop's rule: lost.
    pausing.machine.connected(pausing.now);
    pausing.error(ErrorCode.RECLAIM_REFUSED, "refused");
    expect(lostError(pausing).serverCode).toBe(ErrorCode.RECLAIM_REFUSED);
  });

  test("no reclaim on silence: a grant without RECLAIMABLE, reclaim off, or the last answer without the flag: lost at the deadline, no second connection", () => {
    const unflagged = heldThenSilent({}, false);
    const off = heldThenSilent({ reclaimFrame: undefined });
    for (const m of [unflagged, off]) {
      m.advance(DEADLINE - 0.001);
      expect(m.ending).toBeUndefined();
      m.advance(DEADLINE);
      expect(lostError(m).why).toBe("unconfirmed");
      expect(m.of("connect-second")).toEqual([]);
    }
    // RECLAIMABLE at the grant, not on the HEARTBEAT's answer: that one decides.
    const dropped = new ManualClaim({ reclaimFrame, addresses: TWO }).open();
    dropped.advance(10);
    dropped.read(encodeAcquired(7, FLAG_REPLY | FLAG_RECLAIMABLE));
    dropped.advance(HEARTBEAT_AT + 5);
    dropped.read(encodeAcquired(7, FLAG_REPLY));
    dropped.advance(5000);
    expect(lostError(dropped).why).toBe("unconfirmed");
    expect(dropped.of("connect-second")).toEqual([]);
  });

  test("a release during the silence ends it as a release and closes the second connection", () => {
    const m = heldThenSilent();
    m.advance(SILENT_AT);
    m.machine.secondConnected(m.now);
    m.machine.release(m.now);
    expect(lostError(m).why).toBe("released");
    expect(m.of("disconnect-second").length).toBe(1);
    expect(m.armedAt).toBe(Infinity);
  });
});

// ------------------------------------------------------------------ over real sockets

const NAME = "silence/job";
const REAL_LEASE = 2000;
const RECLAIMABLE_9 = encodeAcquired(9, FLAG_REPLY | FLAG_RECLAIMABLE);

function isReclaim(frame: ClientFrame): boolean {
  const decoded = decodeAcquire(frame.body, 0, frame.body.length);
  return decoded.ok && decoded.request.reclaim !== undefined;
}

/**
 * Grants token 9 (RECLAIMABLE) and answers heartbeats, except on the
 * connections in `silent` (no answer, kept open); a reclaim gets `reclaim`.
 */
function silenceServer(reclaim: "grant" | "refuse") {
  const silent = new Set<unknown>();
  const server = new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE && isReclaim(frame)) {
      if (reclaim === "grant") conn.socket.write(RECLAIMABLE_9);
      else {
        conn.socket.write(encodeError(ErrorCode.RECLAIM_REFUSED, "not in a grace"));
        conn.socket.end();
      }
    } else if (!silent.has(conn)) conn.socket.write(RECLAIMABLE_9);
  });
  return { server, silent };
}

describe("reclaim on silence over real sockets", () => {
  test("the server goes silent: the lock is reclaimed on a second connection, onReclaim reports it, the old connection is closed, the signal never aborts", async () => {
    const { server, silent } = silenceServer("grant");
    using _ = server;
    const reclaimed: Lock[] = [];
    const lock = await new LockClient({ servers: `127.0.0.1:${server.port}`, owner: "silent" }).acquire(NAME, { lease: REAL_LEASE, onReclaim: (l) => reclaimed.push(l) });
    silent.add(server.conns[0]);
    await server.until(() => server.conns[1]?.frames.some((f) => f.type === FrameType.HEARTBEAT), 5000, "a heartbeat on the reclaim's connection");
    expect(isReclaim(server.conns[1]!.frames[0]!)).toBe(true);
    await server.until(() => server.conns[0]!.closed, 5000, "the old connection closed");
    expect(reclaimed).toEqual([lock]);
    expect(lock.reclaims).toBe(1);
    expect(lock.reclaiming).toBe(false);
    expect(lock.signal.aborted).toBe(false);
    expect(lock.token).toBe(9n);
    // The old connection got one HEARTBEAT it never answered, and nothing after it.
    expect(server.conns[0]!.frames.filter((f) => f.type === FrameType.HEARTBEAT).length).toBeGreaterThanOrEqual(1);
    await lock.release();
    expect((lock.signal.reason as LockLostError).why).toBe("released");
  });

  test("silent and every reclaim refused: `reclaiming` while it tries, lost (unconfirmed) within the lease of the last answered send", async () => {
    const { server, silent } = silenceServer("refuse");
    using _ = server;
    const lock = await new LockClient({ servers: `127.0.0.1:${server.port}`, owner: "silent" }).acquire(NAME, { lease: REAL_LEASE });
    silent.add(server.conns[0]);
    const lastAnswered = server.conns[0]!.frames.at(-1)!.at;
    await server.until(() => server.conns.length >= 2 && server.conns[1]!.closed, 5000, "a refused reclaim");
    expect(lock.held).toBe(true);
    expect(lock.reclaiming).toBe(true);
    const lostAt = await aborted(lock.signal, 5000);
    expect((lock.signal.reason as LockLostError).why).toBe("unconfirmed");
    expect(lostAt - lastAnswered).toBeLessThan(REAL_LEASE);
    expect(lock.reclaims).toBe(0);
  });
});
