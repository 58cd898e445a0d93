/**
 * Claim: one `acquire()` from the first connect to the end of ownership.
 *
 * A claim owns at most one connection at a time and keeps a permanent reader
 * on it, because the grant may come as a push (promotion) at any moment. Its
 * states: "connecting" -> "waiting" -> "held" -> "done", and "done" straight
 * from any of them. Every transition out of "held" goes through `lose()`,
 * which aborts the lock's AbortSignal before anything else, so guarded work
 * hears about it first.
 *
 * The heartbeat schedule and the pessimism rule (protocol.md section 6):
 *
 * - At most one frame awaits an answer: `inFlightSentAt` is the monotonic
 *   time it was sent (ACQUIRE, then each HEARTBEAT), -1 when none is. A reply
 *   is the next server frame with REPLY set; it confirms the claim up to
 *   `inFlightSentAt` (not up to its own arrival), feeds the RTT estimate,
 *   and schedules the next HEARTBEAT `interval` after the reply.
 * - A push (ACQUIRED without REPLY) grants but confirms nothing: the server
 *   heard from us at some unknown point since our last answered send.
 * - `confirmedAt + clientTimeout` is the deadline. One timer watches it,
 *   lazily: it is armed once and, when it fires, re-arms for the newer
 *   deadline if a reply moved it, instead of being reset on every reply.
 *   Passing the deadline while holding loses the lock ("unconfirmed"); the
 *   server ends the session only at a full lease of silence, so the holder
 *   always stops first. While waiting it counts as an unresponsive server,
 *   and so does a grant read after the deadline (a paused process reading
 *   a stale push): it is not reported as held; the claim queues again.
 *
 * Recovery: a claim that does not hold yet reconnects on its own and joins
 * the queue again (at the tail) after an ERROR of class 0x0_, a close, or an
 * unconfirmed deadline, for at most `reconnectMs` of consecutive trouble
 * (and never past `wait`). A held lock never does: it is lost, and the
 * caller decides whether to claim again.
 *
 * Addresses and pacing (failover): every failure moves on to the NEXT
 * address of the list, so a server that is shutting down or refusing is not
 * asked again before the others. Within a round (addresses not yet tried
 * since the last answer) the pause is short: `nextAddressPause()`, 10-50 ms
 * jittered. After a whole round failed, `backoff(round)`: 50 ms doubling to
 * 2 s, half fixed and half random. An answer from any server starts over.
 * Before any server has answered, a claim tries each address once and
 * gives up, unless `retryFirstConnect` is set (then the first connect is
 * retried like any trouble, within `reconnectMs`). TLS set up on one end
 * only, or an untrusted certificate, is not retried on the same address:
 * it fails the claim once every address has been tried.
 */
import {
  ErrorClass,
  ErrorCode,
  FLAG_REPLY,
  FrameLimits,
  FrameReader,
  FrameType,
  HEARTBEAT_FRAME,
  ReadResult,
  SERVER_FRAMES,
  decodeAcquired,
  decodeError,
  errorClassOf,
  type FrameSink,
} from "../protocol/index.ts";
import {
  LockAbortedError,
  LockBusyError,
  LockLostError,
  LockRequestError,
  ServerErrorFrame,
  ServerUnavailableError,
  WaitTimeoutError,
  type LostWhy,
} from "./errors.ts";
import { clientTimeout, heartbeatInterval, smoothRtt } from "./schedule.ts";
import { plaintextToTls, TlsSetupError, tlsClosedProblem, tlsConnectProblem } from "./tls-problem.ts";
import { formatAddress, type Address, type Connector, type TlsSettings, type Transport } from "./transport.ts";

const LIMITS = new FrameLimits(SERVER_FRAMES);

export interface ClaimSettings {
  readonly name: string;
  readonly leaseMs: number;
  /** The encoded ACQUIRE frame (built once, sent on every connection). */
  readonly acquireFrame: Uint8Array;
  readonly waitMs: number | undefined;
  readonly signal: AbortSignal | undefined;
  readonly addresses: readonly Address[];
  readonly tls: TlsSettings | undefined;
  readonly connect: Connector;
  readonly reconnectMs: number;
  /** Retry (within reconnectMs) also before any server has answered this claim. */
  readonly retryFirstConnect: boolean;
  /** Told before each reconnect of a claim not held yet: what failed, and the pause before the next try. */
  readonly onRetry: ((detail: string, delayMs: number) => void) | undefined;
  readonly minHeartbeatIntervalMs: number;
}

export type ClaimState = "connecting" | "waiting" | "held" | "done";

/** What a claim reports to its Lock: the grant, once. */
export interface Granted {
  readonly token: bigint;
  readonly signal: AbortSignal;
}

export class Claim implements FrameSink {
  state: ClaimState = "connecting";
  token = 0n;
  /** Aborted the moment ownership is no longer confirmed; reason: LockLostError. */
  readonly controller = new AbortController();
  /** Observable for tests and docs: the schedule's live inputs. */
  smoothedRttMs: number | undefined = undefined;
  confirmedAt = -1;
  heartbeatsSent = 0;

  private transport: Transport | null = null;
  /** Bumped per connection, so callbacks of an old connection are ignored. */
  private generation = 0;
  private reader = new FrameReader(LIMITS);
  private inFlightSentAt = -1;
  private heartbeatTimer: ReturnType<typeof setTimeout> | null = null;
  private deadlineTimer: ReturnType<typeof setTimeout> | null = null;
  private waitTimer: ReturnType<typeof setTimeout> | null = null;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private connectTimer: ReturnType<typeof setTimeout> | null = null;
  /** Index of the address of the current (or next) connection. */
  private addressIndex = 0;
  /** Connections that failed since a server last answered. */
  private failures = 0;
  /** Since when connections keep failing, or -1 while all is well. */
  private troubleSince = -1;
  /** What the last failure said, for a wait that runs out during trouble. */
  private lastTrouble: { detail: string; cause: unknown } | null = null;
  /** A TLS set-up problem seen since a server last answered: retrying will not fix it. */
  private tlsProblem: TlsSetupError | null = null;
  /** No byte read yet on the current connection (a TLS record there means a TLS server). */
  private firstRead = true;
  /**
   * True once a server answered this claim (a reply, or an ERROR of class
   * 0x0_): from then on trouble is retried. Before that, an address that
   * does not connect is simply not a lock server we can reach.
   */
  private resilient = false;
  private settle: { resolve: (g: Granted) => void; reject: (e: unknown) => void } | null = null;
  private readonly onAbort = (): void => this.aborted();

  constructor(private readonly settings: ClaimSettings) {}

  /** Start; resolves at the grant, rejects with a LockError. */
  start(): Promise<Granted> {
    const promise = new Promise<Granted>((resolve, reject) => (this.settle = { resolve, reject }));
    const { signal, waitMs } = this.settings;
    if (signal?.aborted) {
      this.fail(new LockAbortedError(this.settings.name, signal.reason));
      return promise;
    }
    signal?.addEventListener("abort", this.onAbort, { once: true });
    if (waitMs !== undefined) {
      this.waitTimer = setTimeout(() => {
        this.waitTimer = null;
        if (this.state === "held") return;
        const trouble = this.troubleSince >= 0 ? this.lastTrouble : null;
        this.fail(new WaitTimeoutError(this.settings.name, waitMs, trouble?.detail, trouble?.cause));
      }, waitMs);
    }
    this.connect();
    return promise;
  }

  /** release(): close the connection; the lock's signal aborts with why "released". */
  release(): Promise<void> {
    const transport = this.transport;
    if (this.state === "held") this.lose("released", "released by the holder");
    else if (this.state !== "done") this.fail(new LockAbortedError(this.settings.name, "released before the grant"));
    return transport === null ? Promise.resolve() : transport.close();
  }

  // --- connection -------------------------------------------------------------------

  private connect(): void {
    const generation = ++this.generation;
    const addresses = this.settings.addresses;
    const address = addresses[this.addressIndex % addresses.length]!;
    const where = formatAddress(address);
    this.reader = new FrameReader(LIMITS);
    this.firstRead = true;
    const secure = this.settings.tls !== undefined && this.settings.tls !== false;
    // A connect that hangs (SYN dropped) counts against the same clientTimeout as an unanswered frame.
    const limitMs = clientTimeout(this.settings.leaseMs);
    this.connectTimer = setTimeout(() => {
      this.connectTimer = null;
      if (generation === this.generation && this.state !== "done") this.trouble(`cannot connect to ${where} within ${limitMs} ms`, undefined);
    }, limitMs);
    this.settings
      .connect(address, this.settings.tls, {
        data: (chunk) => {
          if (generation === this.generation) this.read(chunk, where, secure);
        },
        closed: (error) => {
          if (generation === this.generation) this.connectionClosed(error, where, secure);
        },
      })
      .then(
        (transport) => {
          this.clearConnectTimer(generation);
          if (generation !== this.generation || this.state === "done") {
            void transport.close();
            return;
          }
          this.transport = transport;
          this.send(this.settings.acquireFrame);
        },
        (error: unknown) => {
          this.clearConnectTimer(generation);
          if (generation !== this.generation || this.state === "done") return;
          const problem = secure ? tlsConnectProblem(error, where) : null;
          if (problem !== null) this.trouble(problem.message, new TlsSetupError(problem, error));
          else this.trouble(`cannot connect to ${where}: ${(error as Error)?.message ?? error}`, error);
        },
      );
  }

  private clearConnectTimer(generation: number): void {
    if (generation !== this.generation || this.connectTimer === null) return;
    clearTimeout(this.connectTimer);
    this.connectTimer = null;
  }

  private send(frame: Uint8Array): void {
    // The send time is taken before the write: the earlier it is, the safer.
    this.inFlightSentAt = performance.now();
    if (this.confirmedAt < 0) {
      // Nothing confirmed yet: ACQUIRE itself must be answered within clientTimeout.
      this.confirmedAt = this.inFlightSentAt;
    }
    this.armDeadline();
    this.transport!.write(frame);
  }

  /** `where` and `secure` describe the connection, to name what answered when it is not a lock server. */
  private read(chunk: Uint8Array, where: string, secure: boolean): void {
    if (this.state === "done") return;
    if (this.firstRead && chunk.length > 0) {
      this.firstRead = false;
      const problem = secure ? null : plaintextToTls(chunk[0]!, where);
      if (problem !== null && this.state !== "held") {
        this.trouble(problem.message, new TlsSetupError(problem));
        return;
      }
      if (startsWithHttp(chunk)) {
        // Someone pointed the client at an HTTP port, lockd's own ops port (7701) most likely.
        this.violation(`the server at ${where} answered in HTTP: that is an HTTP port (lockd's ops server?), not the lock protocol port (default 7700)`);
        return;
      }
    }
    if (this.reader.push(chunk, this) === ReadResult.ERROR) {
      this.violation(`bad frame from the server: ${this.reader.errorMessage}`);
    }
  }

  onFrame(type: number, flags: number, bytes: Uint8Array, offset: number, length: number): boolean {
    if (this.state === "done") return false;
    const reply = (flags & FLAG_REPLY) !== 0;
    switch (type) {
      case FrameType.ACQUIRED: {
        const token = decodeAcquired(bytes, offset);
        if (reply && !this.answered()) return false;
        if (this.state === "held") {
          if (token !== this.token) return this.violation(`ACQUIRED token changed from ${this.token} to ${token}`);
          return true;
        }
        if (performance.now() >= this.confirmedAt + clientTimeout(this.settings.leaseMs)) {
          // Read after the deadline (the process was paused): it confirms nothing, and the
          // server may have expired this session and promoted the next one already.
          this.trouble(`a grant arrived unconfirmed: ${this.unconfirmedDetail()}`, undefined);
          return false;
        }
        this.granted(token);
        return true;
      }
      case FrameType.WAITING:
        if (!reply) return this.violation("WAITING without REPLY");
        if (this.state === "held") return this.violation("WAITING after ACQUIRED");
        if (!this.answered()) return false;
        this.state = "waiting";
        return true;
      case FrameType.ERROR:
        this.serverError(decodeError(bytes, offset, length));
        return false;
      default:
        return this.violation(`unexpected frame type 0x${type.toString(16)}`);
    }
  }

  /** A reply arrived: confirm up to the send time of the frame it answers. */
  private answered(): boolean {
    const sentAt = this.inFlightSentAt;
    if (sentAt < 0) return this.violation("a reply with nothing in flight");
    const now = performance.now();
    this.inFlightSentAt = -1;
    this.confirmedAt = sentAt;
    this.smoothedRttMs = smoothRtt(this.smoothedRttMs, now - sentAt);
    this.troubleSince = -1;
    this.failures = 0;
    this.lastTrouble = null;
    this.tlsProblem = null;
    this.resilient = true;
    const delay = heartbeatInterval(this.settings.leaseMs, this.smoothedRttMs, this.settings.minHeartbeatIntervalMs);
    this.heartbeatTimer = setTimeout(this.heartbeat, delay);
    return true;
  }

  private readonly heartbeat = (): void => {
    this.heartbeatTimer = null;
    if (this.state === "done" || this.transport === null) return;
    this.heartbeatsSent++;
    this.send(HEARTBEAT_FRAME);
  };

  private armDeadline(): void {
    if (this.deadlineTimer !== null) return;
    const due = this.confirmedAt + clientTimeout(this.settings.leaseMs);
    this.deadlineTimer = setTimeout(this.checkDeadline, Math.max(0, Math.ceil(due - performance.now())));
  }

  private readonly checkDeadline = (): void => {
    this.deadlineTimer = null;
    if (this.state === "done") return;
    const due = this.confirmedAt + clientTimeout(this.settings.leaseMs);
    if (performance.now() < due) {
      this.armDeadline();
      return;
    }
    if (this.state === "held") this.lose("unconfirmed", this.unconfirmedDetail());
    else this.trouble(`server unresponsive: ${this.unconfirmedDetail()}`, undefined);
  };

  /**
   * Held, with the pessimism deadline checked now rather than only when its
   * timer runs: a process resuming from a long pause (GC, SIGSTOP) runs
   * whatever callback it was in, or an earlier-due timer, before that one.
   * Past the deadline the lock is lost here, and the signal aborts now.
   */
  checkHeld(): boolean {
    if (this.state === "held" && performance.now() >= this.confirmedAt + clientTimeout(this.settings.leaseMs)) {
      this.lose("unconfirmed", this.unconfirmedDetail());
    }
    return this.state === "held";
  }

  private unconfirmedDetail(): string {
    return `no answer within ${clientTimeout(this.settings.leaseMs)} ms of the last answered send (0.8 x lease)`;
  }

  private granted(token: bigint): void {
    this.state = "held";
    this.token = token;
    if (this.waitTimer !== null) clearTimeout(this.waitTimer);
    this.waitTimer = null;
    const settle = this.settle!;
    this.settle = null;
    settle.resolve({ token, signal: this.controller.signal });
  }

  private serverError(frame: { code: number; message: string }): void {
    const error = new ServerErrorFrame(frame.code, frame.message);
    const name = this.settings.name;
    if (this.state === "held") {
      this.lose("server-error", error.message, error);
      return;
    }
    // Not held yet: a server condition (0x0_), or a lease that expired while
    // this process was stalled (nothing was held, so claiming again at the
    // tail is what the caller asked for), is retried within `reconnectMs`
    // and `wait`. KICKED is an operator's decision: it is not retried.
    if (errorClassOf(frame.code) === ErrorClass.SERVER || frame.code === ErrorCode.LEASE_EXPIRED) {
      this.trouble(error.message, error);
      return;
    }
    if (frame.code === ErrorCode.LOCK_BUSY) this.fail(new LockBusyError(name, error));
    else this.fail(new LockRequestError(error.codeName, `claim on lock ${JSON.stringify(name)} refused: ${error.message}`, error));
  }

  private connectionClosed(error: Error | undefined, where: string, secure: boolean): void {
    if (this.state === "done") return;
    this.transport = null;
    const detail = error === undefined ? "the server closed the connection" : `connection failed: ${error.message}`;
    if (this.state === "held") {
      this.lose("closed", detail, error);
      return;
    }
    const problem = secure && error !== undefined ? tlsClosedProblem(error, where) : null;
    if (problem !== null) this.trouble(problem.message, new TlsSetupError(problem, error));
    else this.trouble(detail, error);
  }

  /** The server broke protocol v1. Returns false so a reader stops. */
  private violation(detail: string): false {
    if (this.state === "held") this.lose("protocol", detail);
    else this.fail(new LockRequestError("PROTOCOL_VIOLATION", `server broke the protocol: ${detail}`));
    return false;
  }

  // --- recovery (before the grant) --------------------------------------------------

  /** Something went wrong before the grant: the next address after a pause, or give up. */
  private trouble(detail: string, cause: unknown): void {
    this.dropConnection();
    if (cause instanceof ServerErrorFrame) this.resilient = true; // a server answered, with a 0x0_ condition
    if (cause instanceof TlsSetupError) this.tlsProblem = cause;
    const count = this.settings.addresses.length;
    this.failures++;
    this.addressIndex = (this.addressIndex + 1) % count;
    this.lastTrouble = { detail, cause };
    const now = performance.now();
    if (this.troubleSince < 0) this.troubleSince = now;
    const roundDone = this.failures % count === 0;
    if (roundDone && this.tlsProblem !== null) {
      // Every address was tried and one of them has TLS on one end only (or an
      // untrusted certificate): a setting to fix, so say that, not "unavailable".
      const problem = this.tlsProblem;
      this.fail(new ServerUnavailableError(`lock server unavailable: ${problem.message}`, problem));
      return;
    }
    if (!this.resilient && !this.settings.retryFirstConnect) {
      // No server has answered this claim yet: try each address once, then say so.
      if (!roundDone) this.connect();
      else this.fail(new ServerUnavailableError(`lock server unavailable: ${detail}`, cause));
      return;
    }
    if (now - this.troubleSince >= this.settings.reconnectMs) {
      this.fail(new ServerUnavailableError(`lock server unavailable for ${Math.round(now - this.troubleSince)} ms: ${detail}`, cause));
      return;
    }
    const delay = roundDone ? backoff(this.failures / count) : nextAddressPause();
    this.settings.onRetry?.(detail, delay);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.state !== "done") this.connect();
    }, delay);
  }

  // --- endings ------------------------------------------------------------------------

  private aborted(): void {
    const reason = this.settings.signal?.reason;
    if (this.state === "held") this.lose("aborted", "the caller's signal aborted", reason);
    else this.fail(new LockAbortedError(this.settings.name, reason));
  }

  /** End a held lock: abort its signal first, then tidy up. */
  private lose(why: LostWhy, detail: string, cause?: unknown): void {
    if (this.state !== "held") return;
    this.state = "done";
    this.controller.abort(new LockLostError(this.settings.name, why, detail, cause));
    this.cleanUp();
  }

  /** End a claim that never got the lock. */
  private fail(error: unknown): void {
    if (this.state === "done" || this.state === "held") return;
    this.state = "done";
    this.cleanUp();
    const settle = this.settle;
    this.settle = null;
    settle?.reject(error);
  }

  private cleanUp(): void {
    this.settings.signal?.removeEventListener("abort", this.onAbort);
    for (const timer of [this.waitTimer, this.retryTimer]) if (timer !== null) clearTimeout(timer);
    this.waitTimer = this.retryTimer = null;
    this.dropConnection();
    if (this.deadlineTimer !== null) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = null;
  }

  /** Close the current connection (if any) and forget its schedule. */
  private dropConnection(): void {
    this.generation++;
    if (this.connectTimer !== null) clearTimeout(this.connectTimer);
    this.connectTimer = null;
    if (this.heartbeatTimer !== null) clearTimeout(this.heartbeatTimer);
    this.heartbeatTimer = null;
    if (this.deadlineTimer !== null) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = null;
    this.inFlightSentAt = -1;
    this.confirmedAt = -1;
    const transport = this.transport;
    this.transport = null;
    if (transport !== null) void transport.close();
  }
}

/** "HTTP/": the start of an HTTP response. */
function startsWithHttp(chunk: Uint8Array): boolean {
  return chunk.length >= 5 && chunk[0] === 0x48 && chunk[1] === 0x54 && chunk[2] === 0x54 && chunk[3] === 0x50 && chunk[4] === 0x2f;
}

/**
 * Pause after round `round` (1, 2, ...) of failures over every address:
 * half fixed, half random, 50 ms doubling to 2 s (base = min(2000, 50 x 2^round);
 * the pause is base/2 + random() x base/2).
 */
export function backoff(round: number): number {
  const base = Math.min(2000, 50 * 2 ** Math.min(round, 10));
  return base / 2 + Math.random() * (base / 2);
}

/** Pause before the next address of a round: 10-50 ms, jittered so that many clients do not move in step. */
export function nextAddressPause(): number {
  return 10 + Math.random() * 40;
}
