/**
 * ClaimMachine: the client's whole claim, from the first connect to the end
 * of ownership, without sockets, timers or clocks. It is to the client what
 * src/core/engine.ts is to the server.
 *
 * Rule 1: every rule of a claim lives in this file. When the claim counts
 * as confirmed, when the next HEARTBEAT goes out, when it is lost, which
 * address is tried next and after what pause, when a waiter gives up: all
 * of it is decided here. A held lock ends only in `lose`, a claim that never
 * got it only in `fail`, so the endings are the same for every cause.
 *
 * Rule 2: the machine does no I/O, reads no clock and draws no random
 * number. The shell (src/client/claim.ts) calls it with events and the
 * current monotonic time in ms (`start`, `connected`, `connectFailed`,
 * `data`, `closed`, `timer`, `abort`, `release`, `checkHeld`), and the
 * machine answers through `ClaimEffects`: connect to address i, send bytes,
 * disconnect, arm the one timer, and settle (granted / failed) or abort
 * (lost), and report a reclaim (reclaimed). Randomness (the jitter of the pacing) is the `random` argument.
 * Tests drive all of it with a number for a clock.
 *
 * Rule 3: one timer. The machine keeps its deadlines (the connect limit, the
 * next HEARTBEAT, the confirmation deadline, the retry pause, `wait`) and
 * asks for the earliest with `arm(at)`, lazily: only when it is earlier than
 * the one already armed. A timer that fires early (a deadline moved later)
 * is harmless: `timer(now)` does what is due and arms the next.
 *
 * The heartbeat schedule and the pessimism rule (protocol.md section 8):
 *
 * - At most one frame awaits an answer: `inFlightSentAt` is the time it was
 *   sent (ACQUIRE, then each HEARTBEAT), -1 when none is. A reply is the
 *   next server frame with REPLY set; it confirms the claim up to
 *   `inFlightSentAt` (not up to its own arrival), feeds the RTT estimate,
 *   and schedules the next HEARTBEAT `heartbeatInterval` after the reply.
 * - A push (ACQUIRED without REPLY) grants but confirms nothing.
 * - `confirmedAt + clientTimeout` (0.8 x lease) is the deadline. Passing it
 *   while holding loses the lock ("unconfirmed"); the server ends the
 *   session only at a full lease of silence, so the holder stops first.
 *   While waiting it counts as an unresponsive server, and so does a grant
 *   read at or after the deadline (a paused process reading a stale push):
 *   it is not reported as held; the claim queues again. A connect that does
 *   not complete within clientTimeout counts the same.
 *
 * Recovery: a claim that does not hold yet reconnects and joins the queue
 * again (at the tail) after an ERROR of class 0x0_ or LEASE_EXPIRED, a
 * close, or an unconfirmed deadline, for at most `reconnectMs` of
 * consecutive trouble (and never past `wait`). A held lock never does: it
 * is lost, and the caller decides whether to claim again (the one exception
 * is a reclaim, below, which keeps the grant rather than claiming again). KICKED and the
 * other refusals (LOCK_BUSY, LOCK_DELAYED to a TRY) end the claim.
 *
 * Reclaim (protocol.md section 14.3): a held lock whose last ACQUIRED had
 * RECLAIMABLE, on SHUTTING_DOWN with the RECLAIM flag, is not lost: when
 * the rules allow it (`reclaimFrame`), the machine keeps it held, drops the
 * connection and connects again (the next address, with the pacing below),
 * and sends ACQUIRE with RECLAIM and its token (and slot). The deadline does
 * not move: `confirmedAt` stays the send time of the last answered frame,
 * and at `confirmedUntil` the lock is lost ("unconfirmed"), whatever the
 * reclaim is doing then. A connect that fails (a server still restarting)
 * is tried again, paced, until then. ACQUIRED with REPLY and the same
 * token (and slot) confirms the lock up to the reclaim's send and the
 * heartbeats go on (`reclaimed`); any other answer (an ERROR such as
 * RECLAIM_REFUSED, another token or slot, a push, WAITING) or a connection
 * that breaks once open loses it. SHUTTING_DOWN without the flag, or for a
 * grant that was not flagged, is a loss as before.
 *
 * Reclaim on silence (protocol.md section 14.3, "On silence"): a held lock
 * whose last ACQUIRED had RECLAIMABLE, with reclaim on, whose HEARTBEAT has
 * been unanswered for lease/4 on an open connection (`silenceAt`), keeps that
 * connection (its HEARTBEAT stays in flight) and opens a SECOND one
 * (`connectSecond`: the next address of the list, wrapping), at once, on
 * which it sends the ACQUIRE with RECLAIM. ACQUIRED with REPLY and the
 * grant's token (and slot) before the deadline: reclaimed, the second
 * connection becomes the claim's (`promoteSecond` closes the old one),
 * confirmed up to the reclaim's send, `reclaimed`. An answer to the
 * HEARTBEAT on the old connection ends the silence: the second connection is
 * closed, nothing else changes. Any other outcome of the second connection
 * (an ERROR such as RECLAIM_REFUSED, WAITING, another token, a connect
 * refused, a close, no answer within lease/4 of the attempt's start) fails
 * that attempt only: the next address, after the reconnect pacing, while the
 * deadline allows. The old connection's end is handled as ever: SHUTTING_DOWN
 * with RECLAIM starts the reclaim above, with an attempt under way (the
 * second connection, promoted) as its first; anything else loses the lock
 * and closes the second connection. The deadline does not move.
 *
 * Addresses and pacing (failover): every failure moves on to the NEXT
 * address of the list. Within a round (addresses not yet tried since a
 * server last answered) the pause is 10-50 ms; after a whole round failed,
 * the backoff (50 ms doubling to 2 s, half fixed, half random): both
 * `reconnectPause` (schedule.ts), the rule all three clients share. An answer from any server starts over. Before any server
 * has answered, the claim retries the same way only if `firstConnectRetried`
 * says so (by default: a claim that may wait, with a `wait` or a list of two
 * or more addresses; never a TRY); otherwise each address is tried once,
 * without pauses, and the claim fails. A TLS set-up problem fails the claim
 * once every address of the round has been tried: it is a setting to fix.
 */
import {
  ErrorClass,
  ErrorCode,
  FLAG_RECLAIM,
  FLAG_RECLAIMABLE,
  FLAG_REPLY,
  FLAG_SLOT,
  FrameLimits,
  FrameReader,
  FrameType,
  HEARTBEAT_FRAME,
  ReadResult,
  SERVER_FRAMES,
  SLOT_LENGTH,
  TOKEN_LENGTH,
  decodeAcquired,
  decodeSlot,
  decodeError,
  errorClassOf,
  type FrameSink,
} from "../protocol/index.ts";
import { DEFAULT_LOCK_PORT, formatAddress, formatAddressList, type Address } from "../net/address.ts";
import {
  LockAbortedError,
  LockBusyError,
  LockDelayedError,
  LimitMismatchError,
  LockLostError,
  LockRequestError,
  ServerErrorFrame,
  ServerUnavailableError,
  WaitTimeoutError,
  type LostWhy,
} from "./errors.ts";
import { baseInterval, clientTimeout, heartbeatInterval, reconnectPause, smoothRtt } from "./schedule.ts";
import { plaintextToTls, TlsSetupError, tlsClosedProblem, tlsConnectProblem } from "./tls-problem.ts";
import { networkErrorText } from "./transport.ts";

const LIMITS = new FrameLimits(SERVER_FRAMES);

/** How the machine acts on the world. The shell carries each out at once. */
export interface ClaimEffects {
  /** Open a connection to `addresses[index]`; report it with `connected` / `connectFailed`, then `data` / `closed`. */
  connect(index: number): void;
  /** Write bytes on the open connection. */
  send(frame: Uint8Array): void;
  /** Close the current connection (or abandon the connect in progress); its later events are not reported. */
  disconnect(): void;
  /** Make the one timer fire at `at` (monotonic ms) and call `timer`; Infinity: cancel it. */
  arm(at: number): void;
  /** The grant (once): its token, and its slot (0 .. limit - 1) for a claim with limit above 1, else -1. */
  granted(token: bigint, slot: number): void;
  /** A claim that never held ends with this error (once; final). */
  failed(error: unknown): void;
  /** A held lock is lost (once; final): abort the lock's signal with this error. */
  lost(error: LockLostError): void;
  /** The held lock was reclaimed (after a clean stop of the server, or on silence): the same token and slot, confirmed again. */
  reclaimed(token: bigint, slot: number): void;
  /**
   * Reclaim on silence: open a second connection to `addresses[index]`, the
   * current one staying open; report it with `secondConnected` /
   * `secondConnectFailed`, then `secondData` / `secondClosed`.
   */
  connectSecond(index: number): void;
  /** Write bytes on the second connection. */
  sendSecond(frame: Uint8Array): void;
  /** Close the second connection (or abandon its connect); its later events are not reported. */
  disconnectSecond(): void;
  /**
   * The second connection becomes the claim's: close the current one (its
   * later events are not reported); from now on `send` and `disconnect` act
   * on the second one, and its events (its connect's outcome included, if it
   * is still connecting) are reported as `connected`, `connectFailed`,
   * `data` and `closed`.
   */
  promoteSecond(): void;
  /**
   * Before each reconnect of a claim not held yet: what failed, the pause
   * before the next try, and whether that pause is a backoff (every address
   * of the list has failed in this round) rather than the move on to the
   * list's next address.
   */
  retry(detail: string, delayMs: number, backoff: boolean): void;
}

export interface ClaimRules {
  readonly name: string;
  readonly leaseMs: number;
  /** The encoded ACQUIRE frame (built once, sent on every connection). */
  readonly acquireFrame: Uint8Array;
  /**
   * The claim's limit, 1 .. 65,535 (1: an exclusive or shared lock; above 1:
   * a semaphore, whose every ACQUIRED carries a slot below it).
   */
  readonly limit: number;
  /** A shared claim (limit 1): for LIMIT_MISMATCH's error. */
  readonly shared: boolean;
  readonly waitMs: number | undefined;
  readonly addresses: readonly Address[];
  /**
   * With a server map: the name of the shard whose servers `addresses` are.
   * SERVER_UNAVAILABLE then names the shard and its addresses, and carries
   * the name (`ServerUnavailableError.shard`). Undefined for a plain list.
   */
  readonly shard: string | undefined;
  /** Whether the connection is TLS (decides how a failure is diagnosed). */
  readonly secure: boolean;
  readonly reconnectMs: number;
  /**
   * Retry (within reconnectMs) also before any server has answered this
   * claim: true always, false never, undefined by the default rule
   * (`firstConnectRetried`).
   */
  readonly retryFirstConnect: boolean | undefined;
  /** The claim is a TRY (it may not wait): by default its first connect is not retried. */
  readonly try: boolean;
  readonly minHeartbeatIntervalMs: number;
  /** A number in [0, 1): the jitter of the pacing. */
  readonly random: () => number;
  /**
   * Reclaim on: the ACQUIRE with RECLAIM for the grant's token and slot (-1
   * without one), the same name, lease, limit, mode and owner as
   * `acquireFrame`. Undefined: reclaim off, SHUTTING_DOWN with RECLAIM is a loss.
   */
  readonly reclaimFrame?: ((token: bigint, slot: number) => Uint8Array) | undefined;
}

export type ClaimState = "connecting" | "waiting" | "held" | "done";

/**
 * Whether a claim retries (within its reconnect budget, never past its
 * wait) before any server has answered it, or tries each address once and
 * fails with SERVER_UNAVAILABLE. The rule all three clients and `lockd run`
 * share (docs/clients.md, "Retrying the first connect"): an explicit
 * setting wins; by default a claim that may wait retries when the caller
 * gave a wait (> 0) or a list of two or more addresses (a failover service,
 * whose active may be between a crash and a take-over), and a TRY claim, or
 * one with one address and no wait, fails at once.
 */
export function firstConnectRetried(setting: boolean | undefined, tryOnly: boolean, waitMs: number | undefined, addresses: number): boolean {
  if (setting !== undefined) return setting;
  if (tryOnly) return false;
  return (waitMs !== undefined && waitMs > 0) || addresses > 1;
}

/** Where the current connection is. */
const Link = {
  /** None (before the start, in a retry pause, after the end). */
  NONE: 0,
  /** `connect` asked, not answered yet. */
  CONNECTING: 1,
  /** Open: ACQUIRE sent. */
  OPEN: 2,
} as const;
type Link = (typeof Link)[keyof typeof Link];

export class ClaimMachine implements FrameSink {
  state: ClaimState = "connecting";
  token = 0n;
  /** The grant's slot (claims with limit above 1), -1 when none. */
  slot = -1;
  /** The schedule's live inputs, observable for tests and the soak's checker. */
  smoothedRttMs: number | undefined = undefined;
  /** Send time of the last answered frame (the claim is confirmed up to here), -1 when none. */
  confirmedAt = -1;
  heartbeatsSent = 0;
  /** Index of the address of the current (or next) connection. */
  addressIndex = 0;
  /** The last ACQUIRED of the grant had RECLAIMABLE. */
  reclaimable = false;
  /** Held, and reclaiming after a clean stop of the server: not confirmed again yet. */
  reclaiming = false;
  /** How many times the held lock was reclaimed (after a clean stop, or on silence). */
  reclaims = 0;
  /**
   * Held, and the server silent: a HEARTBEAT unanswered for lease/4 on the
   * open connection, and a reclaim on a second connection under way (or
   * between its attempts). Ends with an answer on either, or the deadline.
   */
  silent = false;

  private link: Link = Link.NONE;
  private reader = new FrameReader(LIMITS);
  /** No byte read yet on the current connection (a TLS record there means a TLS server). */
  private firstRead = true;
  /** The time of the event being handled, for `onFrame`. */
  private now = 0;
  private inFlightSentAt = -1;
  /** When the connect in progress is given up, -1 when none is. */
  private connectDueAt = -1;
  /** When the next HEARTBEAT goes out, -1 when none is scheduled. */
  private heartbeatAt = -1;
  /** When the retry pause ends, -1 when not pausing. */
  private retryAt = -1;
  /** When `wait` runs out, -1 without one (or once held). */
  private waitUntil = -1;
  /** The earliest time the shell's timer is armed for, Infinity when none. */
  private armedAt = Infinity;
  /** Connections that failed since a server last answered. */
  private failures = 0;
  /** Since when connections keep failing, or -1 while all is well. */
  private troubleSince = -1;
  /** What the last failure said, for a wait that runs out during trouble. */
  private lastTrouble: { detail: string; cause: unknown } | null = null;
  /** A TLS set-up problem seen since a server last answered: retrying will not fix it. */
  private tlsProblem: TlsSetupError | null = null;
  /**
   * True once a server answered this claim (a reply, or an ERROR of class
   * 0x0_): from then on trouble is retried. Before that, an address that
   * does not connect is simply not a lock server we can reach.
   */
  private resilient = false;
  /** Whether trouble before any answer is retried (`firstConnectRetried`, decided once). */
  private readonly retryFirst: boolean;
  /** While reclaiming: the ACQUIRE with RECLAIM sent on each new connection. */
  private reclaimAcquire: Uint8Array | null = null;
  /** While silent: the second connection, its reader, its address, its reclaim's send time, and when its attempt is given up. */
  private secondLink: Link = Link.NONE;
  private secondReader = new FrameReader(LIMITS);
  private secondIndex = 0;
  private secondSentAt = -1;
  private secondDueAt = -1;
  /** While silent: the ACQUIRE with RECLAIM sent on each second connection. */
  private silenceAcquire: Uint8Array | null = null;
  private readonly secondSink: FrameSink = {
    onFrame: (type, flags, bytes, offset, length) => this.secondFrame(type, flags, bytes, offset, length),
  };

  constructor(
    private readonly rules: ClaimRules,
    private readonly effects: ClaimEffects,
  ) {
    this.retryFirst = firstConnectRetried(rules.retryFirstConnect, rules.try, rules.waitMs, rules.addresses.length);
  }

  /** The end of the confirmed period (confirmedAt + 0.8 x lease), -1 when nothing is confirmed. */
  get confirmedUntil(): number {
    return this.confirmedAt < 0 ? -1 : this.confirmedAt + clientTimeout(this.rules.leaseMs);
  }

  // --- events -------------------------------------------------------------------------

  start(now: number): void {
    if (this.rules.waitMs !== undefined) this.waitUntil = now + this.rules.waitMs;
    this.connect(now);
    this.arm();
  }

  /** The connection asked for by `connect` is open. */
  connected(now: number): void {
    if (this.state === "done" || this.link !== Link.CONNECTING) return;
    this.link = Link.OPEN;
    this.connectDueAt = -1;
    this.send(this.reclaimAcquire ?? this.rules.acquireFrame, now);
    this.arm();
  }

  /** The connect failed. */
  connectFailed(now: number, error: unknown): void {
    if (this.state === "done" || this.link !== Link.CONNECTING) return;
    const where = this.where();
    const problem = this.rules.secure ? tlsConnectProblem(error, where) : null;
    if (problem !== null) this.trouble(now, problem.message, new TlsSetupError(problem, error));
    else this.trouble(now, `cannot connect to ${where}: ${networkErrorText(error)}`, error);
    this.arm();
  }

  /** Bytes from the server on the open connection. */
  data(now: number, chunk: Uint8Array): void {
    if (this.state === "done" || this.link !== Link.OPEN) return;
    this.now = now;
    if (this.firstRead && chunk.length > 0) {
      this.firstRead = false;
      const where = this.where();
      const problem = this.rules.secure ? null : plaintextToTls(chunk[0]!, where);
      if (problem !== null && this.state !== "held") {
        this.trouble(now, problem.message, new TlsSetupError(problem));
        this.arm();
        return;
      }
      if (startsWithHttp(chunk)) {
        // Someone pointed the client at an HTTP port, lockd's own ops port (DEFAULT_OPS_PORT) most likely.
        this.violation(`the server at ${where} answered in HTTP: that is an HTTP port (lockd's ops server?), not the lock protocol port (default ${DEFAULT_LOCK_PORT})`);
        return;
      }
    }
    if (this.reader.push(chunk, this) === ReadResult.ERROR) {
      this.violation(`bad frame from the server: ${this.reader.errorMessage}`);
    }
    this.arm();
  }

  /** The connection is gone (also one reported closed before its connect was); `error` when it failed rather than closed. */
  closed(now: number, error: Error | undefined): void {
    if (this.state === "done" || this.link === Link.NONE) return;
    const wasOpen = this.link === Link.OPEN;
    this.link = Link.NONE;
    const detail = error === undefined ? "the server closed the connection" : `connection failed: ${networkErrorText(error)}`;
    if (this.reclaiming && !wasOpen) {
      // A connect of the reclaim that did not get through (the server is still restarting): again, paced.
      this.trouble(now, `cannot connect to ${this.where()}: ${detail}`, error);
      this.arm();
      return;
    }
    if (this.state === "held") {
      this.lose("closed", detail, error);
      return;
    }
    const problem = this.rules.secure && error !== undefined ? tlsClosedProblem(error, this.where()) : null;
    if (problem !== null) this.trouble(now, problem.message, new TlsSetupError(problem, error));
    else this.trouble(now, detail, error);
    this.arm();
  }

  /** The second connection (reclaim on silence) asked for by `connectSecond` is open. */
  secondConnected(now: number): void {
    if (this.state === "done" || !this.silent || this.secondLink !== Link.CONNECTING) return;
    this.secondLink = Link.OPEN;
    this.secondSentAt = now;
    this.effects.sendSecond(this.silenceAcquire!);
    this.arm();
  }

  /** The second connection's connect failed. */
  secondConnectFailed(now: number, error: unknown): void {
    if (this.state === "done" || !this.silent || this.secondLink !== Link.CONNECTING) return;
    this.secondFailed(now, `cannot connect to ${this.whereSecond()}: ${networkErrorText(error)}`, error);
    this.arm();
  }

  /** Bytes from the server on the second connection. */
  secondData(now: number, chunk: Uint8Array): void {
    if (this.state === "done" || !this.silent || this.secondLink !== Link.OPEN) return;
    this.now = now;
    const reader = this.secondReader;
    if (reader.push(chunk, this.secondSink) === ReadResult.ERROR) {
      if (this.reader === reader) this.violation(`bad frame from the server: ${reader.errorMessage}`); // promoted in this read
      else if (this.silent && this.secondLink === Link.OPEN) this.secondFailed(now, `bad frame from ${this.whereSecond()}: ${reader.errorMessage}`, undefined);
    }
    this.arm();
  }

  /** The second connection is gone (also one reported closed before its connect was). */
  secondClosed(now: number, error: Error | undefined): void {
    if (this.state === "done" || !this.silent || this.secondLink === Link.NONE) return;
    const wasOpen = this.secondLink === Link.OPEN;
    this.secondLink = Link.NONE;
    const detail = error === undefined ? "the server closed the connection" : `connection failed: ${networkErrorText(error)}`;
    this.secondFailed(now, wasOpen ? `the reclaim at ${this.whereSecond()}: ${detail}` : `cannot connect to ${this.whereSecond()}: ${detail}`, error);
    this.arm();
  }

  /** The timer armed with `arm` fired (perhaps early, if a deadline moved later). */
  timer(now: number): void {
    this.armedAt = Infinity;
    if (this.state === "done") return;
    if (this.waitUntil >= 0 && now >= this.waitUntil && this.state !== "held") {
      const trouble = this.troubleSince >= 0 ? this.lastTrouble : null;
      this.fail(new WaitTimeoutError(this.rules.name, this.rules.waitMs!, trouble?.detail, trouble?.cause, this.rules.shard));
      return;
    }
    if (this.reclaiming && now >= this.confirmedUntil) {
      const trouble = this.lastTrouble;
      this.lose("unconfirmed", `not reclaimed ${this.unconfirmedDetail().replace(/^no answer /, "")}${trouble === null ? "" : `: ${trouble.detail}`}`, trouble?.cause);
      return;
    }
    if (this.silent) {
      this.silenceTimer(now);
      return;
    }
    if (this.connectDueAt >= 0 && now >= this.connectDueAt) {
      this.trouble(now, `cannot connect to ${this.where()} within ${clientTimeout(this.rules.leaseMs)} ms`, undefined);
    } else if (this.link === Link.OPEN && now >= this.confirmedUntil) {
      if (this.state === "held") {
        this.lose("unconfirmed", this.unconfirmedDetail());
        return;
      }
      this.trouble(now, `server unresponsive: ${this.unconfirmedDetail()}`, undefined);
    } else if (this.silenceAt >= 0 && now >= this.silenceAt) {
      this.startSilence(now);
    } else if (this.retryAt >= 0 && now >= this.retryAt) {
      this.retryAt = -1;
      this.connect(now);
    } else if (this.heartbeatAt >= 0 && now >= this.heartbeatAt) {
      this.heartbeatAt = -1;
      this.heartbeatsSent++;
      this.send(HEARTBEAT_FRAME, now);
    }
    this.arm();
  }

  /** The caller's signal aborted. */
  abort(_now: number, reason: unknown): void {
    if (this.state === "held") this.lose("aborted", "the caller's signal aborted", reason);
    else this.fail(new LockAbortedError(this.rules.name, reason));
  }

  /** release(): the lock's signal aborts with why "released"; a claim not held yet fails. */
  release(_now: number): void {
    if (this.state === "held") this.lose("released", "released by the holder");
    else this.fail(new LockAbortedError(this.rules.name, "released before the grant"));
  }

  /**
   * Held, with the confirmation deadline checked now rather than only when
   * the timer runs: a process resuming from a long pause (GC, SIGSTOP) runs
   * whatever callback it was in, or an earlier-due timer, first. Past the
   * deadline the lock is lost here, and the signal aborts now.
   */
  checkHeld(now: number): boolean {
    if (this.state === "held" && now >= this.confirmedUntil) this.lose("unconfirmed", this.unconfirmedDetail());
    return this.state === "held";
  }

  // --- frames -------------------------------------------------------------------------

  onFrame(type: number, flags: number, bytes: Uint8Array, offset: number, length: number): boolean {
    if (this.state === "done") return false;
    const reply = (flags & FLAG_REPLY) !== 0;
    switch (type) {
      case FrameType.ACQUIRED: {
        const token = decodeAcquired(bytes, offset);
        if (token === 0n) return this.violation("ACQUIRED with token 0 (tokens start at 1)");
        // The slot (protocol.md section 13): FLAG_SLOT and a 10-byte body on every ACQUIRED of a
        // claim with limit above 1, slot below the limit; neither for limit 1. Checked before the reply
        // is counted: a broken grant confirms nothing.
        const slot = decodeSlot(bytes, offset, length);
        const limit = this.rules.limit;
        if ((flags & FLAG_SLOT) !== 0) {
          if (slot < 0) return this.violation(`ACQUIRED with flag SLOT and a ${length}-byte body (the slot needs ${TOKEN_LENGTH + SLOT_LENGTH})`);
          if (limit === 1) return this.violation(`ACQUIRED with slot ${slot} for a claim of limit 1 (only a semaphore's grants have slots)`);
          if (slot >= limit) return this.violation(`ACQUIRED with slot ${slot} for a claim of limit ${limit} (slots are 0..${limit - 1})`);
        } else {
          if (length !== TOKEN_LENGTH) return this.violation(`ACQUIRED with a ${length}-byte body and no flag SLOT`);
          if (limit !== 1) return this.violation(`ACQUIRED without a slot for a claim of limit ${limit}`);
        }
        if (this.reclaiming) return this.reclaimAnswered(token, slot, flags, reply);
        if (reply && !this.answered()) return false;
        if (this.state === "held") {
          if (token !== this.token) return this.violation(`ACQUIRED token changed from ${this.token} to ${token}`);
          if (slot !== this.slot) return this.violation(`ACQUIRED slot changed from ${this.slot} to ${slot}`);
          this.reclaimable = (flags & FLAG_RECLAIMABLE) !== 0;
          return true;
        }
        if (this.now >= this.confirmedUntil) {
          // Read at or after the deadline (the process was paused): it confirms nothing, and the
          // server may have expired this session and promoted the next one already.
          this.trouble(this.now, `a grant arrived unconfirmed: ${this.unconfirmedDetail()}`, undefined);
          return false;
        }
        this.reclaimable = (flags & FLAG_RECLAIMABLE) !== 0;
        this.granted(token, slot);
        return true;
      }
      case FrameType.WAITING:
        if (!reply) return this.violation("WAITING without REPLY");
        if (this.state === "held") return this.violation("WAITING after ACQUIRED");
        if (!this.answered()) return false;
        this.state = "waiting";
        return true;
      case FrameType.ERROR:
        this.serverError(decodeError(bytes, offset, length), flags);
        return false;
      default:
        return this.violation(`unexpected frame type 0x${type.toString(16)}`);
    }
  }

  /** A reply arrived: confirm up to the send time of the frame it answers, and schedule the next HEARTBEAT. */
  private answered(): boolean {
    const sentAt = this.inFlightSentAt;
    if (sentAt < 0) return this.violation("a reply with nothing in flight");
    const now = this.now;
    this.inFlightSentAt = -1;
    this.confirmedAt = sentAt;
    this.smoothedRttMs = smoothRtt(this.smoothedRttMs, now - sentAt);
    this.troubleSince = -1;
    this.failures = 0;
    this.lastTrouble = null;
    this.tlsProblem = null;
    this.resilient = true;
    this.heartbeatAt = now + heartbeatInterval(this.rules.leaseMs, this.smoothedRttMs, this.rules.minHeartbeatIntervalMs);
    // The old connection answered: the silence is over, and a reclaim under way is not needed.
    if (this.silent) this.endSilence();
    return true;
  }

  /**
   * The answer to the reclaim's ACQUIRE: ACQUIRED with REPLY, before the
   * deadline, with the grant's token and slot confirms the lock again (up to
   * the reclaim's send); anything else loses it.
   */
  private reclaimAnswered(token: bigint, slot: number, flags: number, reply: boolean): boolean {
    if (!reply) return this.violation(`ACQUIRED without REPLY to a reclaim (a reclaim is answered at once)`);
    if (this.now >= this.confirmedUntil) {
      this.lose("unconfirmed", `the reclaim was answered too late: ${this.unconfirmedDetail()}`);
      return false;
    }
    if (token !== this.token) return this.violation(`the reclaim of token ${this.token} was answered with token ${token}`);
    if (slot !== this.slot) return this.violation(`the reclaim of slot ${this.slot} was answered with slot ${slot}`);
    if (!this.answered()) return false;
    this.reclaiming = false;
    this.reclaimAcquire = null;
    this.reclaimable = (flags & FLAG_RECLAIMABLE) !== 0;
    this.reclaims++;
    this.effects.reclaimed(token, slot);
    return true;
  }

  private granted(token: bigint, slot: number): void {
    this.state = "held";
    this.token = token;
    this.slot = slot;
    this.waitUntil = -1;
    this.effects.granted(token, slot);
  }

  private serverError(frame: { code: number; message: string }, flags: number): void {
    const error = new ServerErrorFrame(frame.code, frame.message, this.where());
    const name = this.rules.name;
    if (this.state === "held") {
      // A clean stop that published this grant (protocol.md section 14.3): reclaim it from the next run.
      const reclaimFrame = this.rules.reclaimFrame;
      if (!this.reclaiming && frame.code === ErrorCode.SHUTTING_DOWN && (flags & FLAG_RECLAIM) !== 0 && this.reclaimable && reclaimFrame !== undefined) {
        this.reclaimAcquire = reclaimFrame(this.token, this.slot);
        this.reclaiming = true;
        this.failures = 0;
        this.troubleSince = this.now;
        // Silent until now: the reclaim on the second connection, if one is under way, is this reclaim's first attempt.
        if (this.silent && this.secondLink !== Link.NONE) this.secondAsReclaim(error);
        else {
          if (this.silent) this.endSilence();
          this.trouble(this.now, error.message, error);
        }
        return;
      }
      this.lose("server-error", error.message, error);
      return;
    }
    // Not held yet: a server condition (0x0_), or a lease that expired while
    // this process was stalled (nothing was held, so claiming again at the
    // tail is what the caller asked for), is retried within `reconnectMs`
    // and `wait`. KICKED is an operator's decision: it is not retried; nor is
    // LOCK_DELAYED, the answer to a TRY (the caller asked not to wait).
    if (errorClassOf(frame.code) === ErrorClass.SERVER || frame.code === ErrorCode.LEASE_EXPIRED) {
      this.trouble(this.now, error.message, error);
      return;
    }
    if (frame.code === ErrorCode.LOCK_BUSY) this.fail(new LockBusyError(name, error));
    else if (frame.code === ErrorCode.LOCK_DELAYED) this.fail(new LockDelayedError(name, frame.message, error));
    else if (frame.code === ErrorCode.LIMIT_MISMATCH) this.fail(new LimitMismatchError(name, this.rules.limit, this.rules.shared, frame.message, error));
    else this.fail(new LockRequestError(error.codeName, `claim on lock ${JSON.stringify(name)} refused: ${error.message}`, error));
  }

  /** The server broke protocol v1. Returns false so a reader stops. */
  private violation(detail: string): false {
    if (this.state === "held") this.lose("protocol", detail);
    else this.fail(new LockRequestError("PROTOCOL_VIOLATION", `server broke the protocol: ${detail}`));
    return false;
  }

  // --- connection and schedule --------------------------------------------------------

  private connect(now: number): void {
    this.link = Link.CONNECTING;
    this.reader = new FrameReader(LIMITS);
    this.firstRead = true;
    // A connect that hangs (SYN dropped) counts against the same clientTimeout as an unanswered frame.
    this.connectDueAt = now + clientTimeout(this.rules.leaseMs);
    this.effects.connect(this.addressIndex);
  }

  private send(frame: Uint8Array, now: number): void {
    this.inFlightSentAt = now;
    // Nothing confirmed yet: ACQUIRE itself must be answered within clientTimeout.
    if (this.confirmedAt < 0) this.confirmedAt = now;
    this.effects.send(frame);
  }

  /** Ask for the timer at the earliest deadline, if that is earlier than the one armed. */
  private arm(): void {
    if (this.state === "done") return;
    let next = Infinity;
    if (this.waitUntil >= 0 && this.state !== "held") next = this.waitUntil;
    if (this.connectDueAt >= 0 && this.connectDueAt < next) next = this.connectDueAt;
    if ((this.link === Link.OPEN || this.reclaiming) && this.confirmedAt >= 0 && this.confirmedUntil < next) next = this.confirmedUntil;
    if (this.retryAt >= 0 && this.retryAt < next) next = this.retryAt;
    if (this.heartbeatAt >= 0 && this.heartbeatAt < next) next = this.heartbeatAt;
    const silenceAt = this.silenceAt;
    if (silenceAt >= 0 && silenceAt < next) next = silenceAt;
    if (this.secondDueAt >= 0 && this.secondDueAt < next) next = this.secondDueAt;
    if (next < this.armedAt) {
      this.armedAt = next;
      this.effects.arm(next);
    }
  }

  private where(): string {
    const addresses = this.rules.addresses;
    return formatAddress(addresses[this.addressIndex % addresses.length]!);
  }

  private whereSecond(): string {
    const addresses = this.rules.addresses;
    return formatAddress(addresses[this.secondIndex % addresses.length]!);
  }

  private unconfirmedDetail(): string {
    return `no answer within ${clientTimeout(this.rules.leaseMs)} ms of the last answered send (0.8 x lease)`;
  }

  // --- recovery (before the grant) --------------------------------------------------

  /** Something went wrong before the grant: the next address after a pause, or give up. */
  private trouble(now: number, detail: string, cause: unknown): void {
    if (this.reclaiming) {
      this.reclaimTrouble(now, detail, cause);
      return;
    }
    this.dropConnection();
    if (this.state === "waiting") this.state = "connecting";
    if (cause instanceof ServerErrorFrame) this.resilient = true; // a server answered, with a 0x0_ condition
    if (cause instanceof TlsSetupError) this.tlsProblem = cause;
    const count = this.rules.addresses.length;
    this.failures++;
    this.addressIndex = (this.addressIndex + 1) % count;
    this.lastTrouble = { detail, cause };
    if (this.troubleSince < 0) this.troubleSince = now;
    const roundDone = this.failures % count === 0;
    if (roundDone && this.tlsProblem !== null) {
      // Every address was tried and one of them has TLS on one end only (or an
      // untrusted certificate): a setting to fix, so say that, not "unavailable".
      const problem = this.tlsProblem;
      this.fail(this.unavailable(problem.message, problem));
      return;
    }
    if (!this.resilient && !this.retryFirst) {
      // No server has answered this claim yet: try each address once, at once, then say so.
      if (!roundDone) {
        this.effects.retry(detail, 0, false);
        this.connect(now);
      } else this.fail(this.unavailable(detail, cause));
      return;
    }
    if (now - this.troubleSince >= this.rules.reconnectMs) {
      this.fail(this.unavailable(detail, cause, now - this.troubleSince));
      return;
    }
    const delay = reconnectPause(this.failures, count, this.rules.random());
    this.effects.retry(detail, delay, roundDone);
    this.retryAt = now + delay;
  }

  /**
   * The reclaim's connection failed (or the stop's SHUTTING_DOWN ended the
   * old one): the next address after the usual pause. The deadline, not a
   * reconnect budget, ends it (see `timer`); the confirmed period is kept.
   */
  private reclaimTrouble(now: number, detail: string, cause: unknown): void {
    this.dropLink();
    const count = this.rules.addresses.length;
    this.failures++;
    this.addressIndex = (this.addressIndex + 1) % count;
    this.lastTrouble = { detail, cause };
    this.retryAt = now + reconnectPause(this.failures, count, this.rules.random());
  }

  /**
   * SERVER_UNAVAILABLE: "lock server unavailable[ for N ms]: DETAIL", or with
   * a shard "lock server of shard NAME at ADDRESSES unavailable...".
   */
  private unavailable(detail: string, cause: unknown, forMs?: number): ServerUnavailableError {
    const { shard, addresses } = this.rules;
    const what = shard === undefined ? "lock server" : `lock server of shard ${shard} at ${formatAddressList(addresses)}`;
    const how = forMs === undefined ? "" : ` for ${Math.round(forMs)} ms`;
    return new ServerUnavailableError(`${what} unavailable${how}: ${detail}`, cause, shard);
  }

  /** Close the current connection (if any) and forget its schedule. */
  private dropConnection(): void {
    this.dropLink();
    this.confirmedAt = -1;
  }

  /** Close the current connection (if any) and forget its schedule, keeping what is confirmed (a reclaim's). */
  private dropLink(): void {
    if (this.link !== Link.NONE) this.effects.disconnect();
    this.link = Link.NONE;
    this.connectDueAt = -1;
    this.heartbeatAt = -1;
    this.inFlightSentAt = -1;
  }

  // --- reclaim on silence ------------------------------------------------------------

  /**
   * When the held lock's server counts as silent: its HEARTBEAT in flight
   * unanswered for lease/4 (the next one would be due), on an open
   * connection, for a grant whose last ACQUIRED had RECLAIMABLE, with reclaim
   * on; -1 when that does not apply (nothing in flight, a reclaim after a
   * clean stop under way, silent already).
   */
  private get silenceAt(): number {
    if (this.state !== "held" || this.link !== Link.OPEN || this.inFlightSentAt < 0 || this.silent || this.reclaiming) return -1;
    if (!this.reclaimable || this.rules.reclaimFrame === undefined) return -1;
    return this.inFlightSentAt + baseInterval(this.rules.leaseMs);
  }

  /** Silent: keep the connection, and reclaim on a second one to the next address, at once. */
  private startSilence(now: number): void {
    this.silent = true;
    this.failures = 0;
    this.lastTrouble = { detail: `no answer to the HEARTBEAT sent at ${Math.round(this.inFlightSentAt)} ms on ${this.where()} within lease/4 (${baseInterval(this.rules.leaseMs)} ms)`, cause: undefined };
    this.silenceAcquire = this.rules.reclaimFrame!(this.token, this.slot);
    this.secondIndex = (this.addressIndex + 1) % this.rules.addresses.length;
    this.connectSecond(now);
  }

  private connectSecond(now: number): void {
    this.secondLink = Link.CONNECTING;
    this.secondReader = new FrameReader(LIMITS);
    this.secondSentAt = -1;
    // One attempt (the connect and the reclaim's answer) gets lease/4: a server that does not answer is not waited for to the deadline.
    this.secondDueAt = now + baseInterval(this.rules.leaseMs);
    this.effects.connectSecond(this.secondIndex);
  }

  /** While silent, the timer: the deadline, an attempt that ran out, the next attempt. */
  private silenceTimer(now: number): void {
    if (now >= this.confirmedUntil) {
      const trouble = this.lastTrouble;
      this.lose("unconfirmed", `${this.unconfirmedDetail()}, and not reclaimed on silence${trouble === null ? "" : `: ${trouble.detail}`}`, trouble?.cause);
      return;
    }
    if (this.secondDueAt >= 0 && now >= this.secondDueAt) {
      this.secondFailed(now, `the reclaim at ${this.whereSecond()} was not answered within lease/4 (${baseInterval(this.rules.leaseMs)} ms)`, undefined);
    } else if (this.retryAt >= 0 && now >= this.retryAt) {
      this.retryAt = -1;
      this.connectSecond(now);
    }
    this.arm();
  }

  /** A frame on the second connection: the reclaim's answer. */
  private secondFrame(type: number, flags: number, bytes: Uint8Array, offset: number, length: number): boolean {
    if (this.state === "done") return false;
    // Promoted earlier in this read: the frame is the claim connection's.
    if (!this.silent) return this.onFrame(type, flags, bytes, offset, length);
    const now = this.now;
    if (type === FrameType.ACQUIRED && (flags & FLAG_REPLY) !== 0) {
      const token = decodeAcquired(bytes, offset);
      const slot = decodeSlot(bytes, offset, length);
      const limit = this.rules.limit;
      const wellFormed = (flags & FLAG_SLOT) !== 0 ? slot >= 0 && limit > 1 && slot < limit : length === TOKEN_LENGTH && limit === 1;
      if (wellFormed && token === this.token && slot === this.slot) {
        if (now >= this.confirmedUntil) {
          this.lose("unconfirmed", `the reclaim on silence was answered too late: ${this.unconfirmedDetail()}`);
          return false;
        }
        this.silenceReclaimed(flags);
        return true;
      }
      const what = wellFormed ? `token ${token}${slot >= 0 ? ` slot ${slot}` : ""}` : `a malformed ACQUIRED (${length}-byte body, flags 0x${flags.toString(16)})`;
      this.secondFailed(now, `the reclaim of token ${this.token} at ${this.whereSecond()} was answered with ${what}`, undefined);
      return false;
    }
    if (type === FrameType.ERROR) {
      const frame = decodeError(bytes, offset, length);
      const error = new ServerErrorFrame(frame.code, frame.message, this.whereSecond());
      this.secondFailed(now, `the reclaim at ${this.whereSecond()}: ${error.message}`, error);
      return false;
    }
    const what = type === FrameType.WAITING ? "WAITING" : type === FrameType.ACQUIRED ? "a pushed ACQUIRED" : `a frame of type 0x${type.toString(16)}`;
    this.secondFailed(now, `the reclaim at ${this.whereSecond()} was answered with ${what}`, undefined);
    return false;
  }

  /** The reclaim on silence was granted: the second connection is the claim's, confirmed up to the reclaim's send. */
  private silenceReclaimed(flags: number): void {
    const sentAt = this.secondSentAt;
    this.takeSecond();
    this.inFlightSentAt = sentAt;
    this.answered();
    this.reclaimable = (flags & FLAG_RECLAIMABLE) !== 0;
    this.reclaims++;
    this.effects.reclaimed(this.token, this.slot);
  }

  /**
   * SHUTTING_DOWN with RECLAIM on the old connection while a reclaim on
   * silence is under way: that attempt goes on as the reclaim's first (its
   * connect, or its ACQUIRE in flight), on the connection it is on.
   */
  private secondAsReclaim(error: ServerErrorFrame): void {
    const open = this.secondLink === Link.OPEN;
    const sentAt = this.secondSentAt;
    const dueAt = this.secondDueAt;
    this.takeSecond();
    this.lastTrouble = { detail: error.message, cause: error };
    if (open) this.inFlightSentAt = sentAt;
    else {
      this.link = Link.CONNECTING;
      this.connectDueAt = dueAt;
    }
  }

  /** The second connection becomes the claim's (the old one is closed), and the silence is over. */
  private takeSecond(): void {
    this.effects.promoteSecond();
    this.link = Link.OPEN;
    this.reader = this.secondReader;
    this.firstRead = false;
    this.addressIndex = this.secondIndex;
    this.connectDueAt = -1;
    this.heartbeatAt = -1;
    this.inFlightSentAt = -1;
    this.secondLink = Link.NONE;
    this.endSilence();
  }

  /** An attempt of the reclaim on silence failed: the next address, after the reconnect pacing (the deadline ends it all). */
  private secondFailed(now: number, detail: string, cause: unknown): void {
    if (this.secondLink !== Link.NONE) this.effects.disconnectSecond();
    this.secondLink = Link.NONE;
    this.secondSentAt = -1;
    this.secondDueAt = -1;
    const count = this.rules.addresses.length;
    this.failures++;
    this.secondIndex = (this.secondIndex + 1) % count;
    this.lastTrouble = { detail, cause };
    this.retryAt = now + reconnectPause(this.failures, count, this.rules.random());
  }

  /** The silence is over (an answer, a reclaim, the end): close the second connection if one is open. */
  private endSilence(): void {
    if (!this.silent) return;
    this.silent = false;
    if (this.secondLink !== Link.NONE) this.effects.disconnectSecond();
    this.secondLink = Link.NONE;
    this.secondSentAt = -1;
    this.secondDueAt = -1;
    this.silenceAcquire = null;
    this.retryAt = -1;
  }

  // --- endings ------------------------------------------------------------------------

  /** End a held lock: abort its signal first, then tidy up. */
  private lose(why: LostWhy, detail: string, cause?: unknown): void {
    if (this.state !== "held") return;
    this.state = "done";
    this.effects.lost(new LockLostError(this.rules.name, why, detail, cause));
    this.cleanUp();
  }

  /** End a claim that never got the lock. */
  private fail(error: unknown): void {
    if (this.state === "done" || this.state === "held") return;
    this.state = "done";
    this.cleanUp();
    this.effects.failed(error);
  }

  private cleanUp(): void {
    this.endSilence();
    this.reclaiming = false;
    this.reclaimAcquire = null;
    this.dropConnection();
    this.retryAt = -1;
    this.waitUntil = -1;
    if (this.armedAt !== Infinity) {
      this.armedAt = Infinity;
      this.effects.arm(Infinity);
    }
  }
}

/** "HTTP/": the start of an HTTP response. */
function startsWithHttp(chunk: Uint8Array): boolean {
  return chunk.length >= 5 && chunk[0] === 0x48 && chunk[1] === 0x54 && chunk[2] === 0x54 && chunk[3] === 0x50 && chunk[4] === 0x2f;
}
