/**
 * Engine: the lock server's whole state machine, without sockets or clocks.
 *
 * Rule 1: every ownership transition lives in this file. A session becomes
 * an owner only in `grant`, stops being one only in `detach`, and a lock
 * changes hands only in `release`. Everything that ends a session (the
 * peer's close, lease expiry, io-timeout, a bad frame, an operator, shutdown)
 * goes through `detach`, so the rules hold the same way for every exit.
 *
 * Rule 2: the engine does no I/O and reads no clock. The shell calls it
 * with events and the current monotonic time in ms (`open`, `frame`,
 * `readProgress`, `writeBlocked`/`writeDrained`, `closed`, `tick`), and the
 * engine answers through the EngineOutput: `send` a frame, or `close` a
 * connection after an optional last frame. Tests drive it with a number.
 *
 * Handover is a push: when an owner's session ends for any reason, the head
 * of the queue is granted and its ACQUIRED is handed to the transport in the
 * same call, before the ended session's own ERROR (if any) is written.
 *
 * Semaphores and shared claims (protocol.md section 13): a lock admits its
 * queue's head while the head fits beside the holders (`Lock.admits`), so
 * `promote` grants a run: consecutive shared claims together, or semaphore
 * claims up to the limit, each with its own token (and slot). Nobody is
 * granted ahead of an earlier waiter: a claim arriving at a lock with a
 * queue queues, even when it would fit. Promotion runs whenever capacity
 * frees: a holder leaves, or the head waiter leaves (the next may fit).
 *
 * Held back: a grant may have to wait although the lock is free. During a
 * lock-delay (delay.ts: an earlier server's holder may still believe it
 * holds the name) and while the durable largest lease does not cover the
 * claim's lease, the claim queues on an ownerless lock that sits in
 * `heldBack`; the shell calls `resume` when a delay ends or a raise lands.
 * So do a coordinated active's claims while it has no token in hand. A
 * claim that would wait only for the durable lease gets no WAITING: its
 * reply comes late, as the answer to its ACQUIRE.
 *
 * Deadlines: each live session sits in the timer wheel exactly once, filed
 * no later than the earliest of its lease (lastSeen + lease), the first-frame
 * or started-frame deadline, and the write-drain deadline. A frame only
 * stores `lastSeen`; when the wheel hands the session back it either ends or
 * is filed again at its real deadline. Anything that makes a deadline
 * earlier (a new lease, a started frame, a blocked write) files it at once.
 */
import {
  ErrorCode,
  FLAG_REPLY,
  FrameType,
  type Acquire,
  decodeAcquire,
  encodeAcquired,
  encodeAcquiredSlot,
  encodeError,
  FLAG_RECLAIM,
  FLAG_RECLAIMABLE,
  FLAG_SLOT,
  frameTypeName,
  HEADER_LENGTH,
  PIPELINE_LIMIT,
  type Reclaim,
  TOKEN_LENGTH,
  WAITING_REPLY_FRAME,
  writeSlot,
  writeToken,
} from "../protocol/index.ts";
import type { LockDelay } from "./delay.ts";
import { CLOSED_BY_PEER, Lock, NO_SLOT, SHARED_CLAIM, Session, SessionState } from "./session.ts";
import { ClaimKind, EngineStats, GrantPath } from "./stats.ts";
import { MemoryTokens, type TokenSource } from "./tokens.ts";
import { TimerWheel, type WheelDriver, type WheelOwner } from "./wheel.ts";

/** How the engine acts on the world. */
export interface EngineOutput<C> {
  /**
   * Write one frame to the connection. The bytes are valid only during the
   * call (the engine reuses buffers): copy whatever is not written at once.
   */
  send(conn: C, frame: Uint8Array): void;
  /**
   * Write `frame` if given (best effort) and close the connection. The engine
   * has already forgotten the session; a later `closed` for it is a no-op.
   */
  close(conn: C, frame: Uint8Array | null): void;
}

export interface EngineOptions {
  /** io-timeout in ms: first frame, rest of a started frame, drain of unflushed writes. */
  readonly ioTimeoutMs: number;
  /** Live sessions beyond this are refused with OVERLOADED. */
  readonly maxSessions?: number;
  /**
   * Live sessions from one source (the shell's key: the peer's address)
   * beyond this are refused with OVERLOADED. Unset: no per-source limit,
   * and sources are not tracked at all.
   */
  readonly maxSessionsPerSource?: number;
  readonly tokens?: TokenSource;
  /**
   * Asked before every grant (immediate or promotion). When it says no, the
   * grant does not happen: an ACQUIRE that would be granted ends with
   * SHUTTING_DOWN, and a lock whose owner ended is handed to nobody. A
   * server that is active for a coordinated service uses it to check its
   * coordinator deadline on the clock at the moment of the grant.
   */
  readonly grantGuard?: GrantGuard;
  /**
   * The shard guard (src/shard/guard.ts): called with the name of every
   * well-formed ACQUIRE before the lock rules see it; returns the ERROR
   * WRONG_SHARD frame that ends the session when the name belongs to
   * another shard, else null. Must be pure (no I/O, no clock).
   */
  readonly shardGuard?: (name: string) => Uint8Array | null;
  /**
   * The lock-delay and the durable largest lease (delay.ts): asked before
   * every grant. Omitted: no delay, and no lease needs to be durable.
   */
  readonly delay?: LockDelay;
  /** Leases above this are BAD_REQUEST (--max-lease). Omitted: no cap. */
  readonly maxLeaseMs?: number;
  /** How messages name the limits a client met (the CLI's flags); omitted: plain words. */
  readonly words?: EngineWords;
  /**
   * Called when a promotion stopped at PROMOTE_BUDGET grants with more due
   * (a long run of shared waiters): the shell calls `resume` in the next
   * loop turn. Omitted: the rest waits for the next `resume` call.
   */
  readonly onResumeNeeded?: () => void;
  /** Reclaim (protocol.md section 14): on with a cap; omitted: off, and nothing of it on the wire. */
  readonly reclaim?: ReclaimOptions;
}

/** One reclaimable grant a clean stop published: what a reclaim of it must name. */
export interface ReclaimEntry {
  readonly token: number;
  /** The grant's slot (a semaphore's), NO_SLOT (exclusive) or SHARED_CLAIM. */
  readonly slot: number;
  readonly limit: number;
  readonly leaseMs: number;
}

export interface ReclaimOptions {
  /** M: grants whose lease is at most this are reclaimable (--reclaim-max-lease). */
  readonly maxLeaseMs: number;
  /**
   * The reclaimable grants the earlier run published at its clean stop, by
   * name; a reclaim is granted only for one of these, and only while its
   * name is held back by the lock-delay. Omitted: none (a first start, or
   * after a crash).
   */
  readonly published?: ReadonlyMap<string, readonly ReclaimEntry[]>;
  /**
   * Open reclaims (a coordinated service after a takeover: the earlier
   * active published nothing, or its grace was still running): while every
   * name is held back by the lock-delay, a reclaim of any name is granted
   * if its token is at or below the last token issued before this engine
   * (`tokens.last` at construction), published or not. Omitted: only
   * published grants are reclaimed.
   */
  readonly open?: boolean;
}

/** How the engine's messages name its settings. */
export interface EngineWords {
  /** The lease cap, after "is above": `this server's --max-lease`. */
  readonly maxLease: string;
  /** The per-source session limit, in brackets after "too many sessions from this address". */
  readonly maxSessionsPerSource: string;
}

export const PLAIN_ENGINE_WORDS: EngineWords = { maxLease: "this server's largest lease", maxSessionsPerSource: "the per-source session limit" };

export interface GrantGuard {
  /** May a lock be granted now (inside the deadline, a token in hand)? */
  mayGrant(now: number): boolean;
  /**
   * May a heartbeat be confirmed now (inside the deadline)? A confirmation
   * moves the holder's own deadline on, so none may outlive the server's
   * authority: past it, heartbeats go unanswered and the server steps down.
   */
  mayConfirm(now: number): boolean;
}

/** The counters, without the methods that count. */
export type EngineStatsView = Omit<Readonly<EngineStats>, "handedOver" | "granted" | "held">;

/** The timer wheel's figures, without the methods that file and advance. */
export type WheelView = Pick<TimerWheel<Session<unknown>>, "size" | "nextTick" | "refiled" | "cascaded" | "cuts">;

/**
 * What the ops server, metrics, views and the /ui board read of an engine:
 * its state, read-only. Everything that changes it is an Engine method.
 */
export interface EngineView<C = unknown> {
  readonly locks: ReadonlyMap<string, Lock<C>>;
  readonly sessions: ReadonlyMap<number, Session<C>>;
  readonly stats: EngineStatsView;
  /** The last fencing token issued (`last` of the token source). */
  readonly tokens: { readonly last: number };
  readonly maxSessions: number;
  /** Infinity when there is no per-source limit. */
  readonly maxSessionsPerSource: number;
  /** Live sessions per source, kept only while a per-source limit is set. */
  readonly sources: ReadonlyMap<string, number>;
}

/** Ended-by-rule frames are the same bytes every time: built once. */
const LEASE_EXPIRED_FRAME = encodeError(ErrorCode.LEASE_EXPIRED, "lease expired: nothing received for a whole lease");
const IO_TIMEOUT_FRAME = encodeError(ErrorCode.IO_TIMEOUT, "io-timeout: a frame did not arrive, or output did not drain, in time");
const FORCE_RELEASED_FRAME = encodeError(ErrorCode.FORCE_RELEASED, "an operator force-released this lock");
const KICKED_FRAME = encodeError(ErrorCode.KICKED, "an operator removed this session from the queue");
const SHUTTING_DOWN_FRAME = encodeError(ErrorCode.SHUTTING_DOWN, "server is shutting down; reconnect and claim again");
const TOKENS_EXHAUSTED_FRAME = encodeError(
  ErrorCode.TOKENS_EXHAUSTED,
  "this server can issue no more fencing tokens: its counter reached the end of the map's generation; the operator must raise the shards generation and restart",
);
const OVERLOADED_FRAME = encodeError(ErrorCode.OVERLOADED, "server is at its session limit; reconnect with backoff");
const LOCK_BUSY_FRAME = encodeError(ErrorCode.LOCK_BUSY, "lock is held");
/** A clean stop that published this holder's grant: the next run accepts its reclaim (protocol.md section 14). */
const SHUTTING_DOWN_RECLAIM_FRAME = (() => {
  const frame = encodeError(ErrorCode.SHUTTING_DOWN, "server is shutting down cleanly; reclaim this lock from the next run with its token");
  frame[1] = FLAG_RECLAIM;
  return frame;
})();
const RECLAIM_REPLACED_FRAME = encodeError(ErrorCode.RECLAIM_REFUSED, "replaced by a newer connection reclaiming the same grant");
const RECLAIM_SUPERSEDED_FRAME = encodeError(ErrorCode.RECLAIM_REFUSED, "superseded by a reclaim of this lock with a later token: this grant is stale");
/** Grants resumed per `resume` call: the rest goes on in the next loop turn. */
export const RESUME_BUDGET = 1000;
/**
 * Grants of one promotion (a holder left): a run of shared waiters longer
 * than this goes on in the next loop turn (`onResumeNeeded`), so one
 * release costs at most this many writes in one turn.
 */
export const PROMOTE_BUDGET = 1000;
/**
 * Deadlines handled per timer callback of the shell. Ending a session is a
 * write and a close (some microseconds each): 256 of them keep one callback
 * to a few milliseconds, and the rest come in the next loop turns.
 */
export const EXPIRY_BUDGET = 256;
const SECOND_ACQUIRE_FRAME = encodeError(ErrorCode.PROTOCOL_ERROR, "a second ACQUIRE: one connection makes one claim");
const EARLY_HEARTBEAT_FRAME = encodeError(ErrorCode.PROTOCOL_ERROR, "HEARTBEAT before ACQUIRE: the first frame must be ACQUIRE");
const PIPELINING_FRAME = encodeError(
  ErrorCode.PROTOCOL_ERROR,
  `pipelining: more than ${PIPELINE_LIMIT} frames arrived before any of them was answered; send one HEARTBEAT and wait for its answer`,
);
/** The promotion push, rewritten for each grant: the handover path allocates no frame of its own. */
const PUSH_FRAME = encodeAcquired(0, 0);
/** The same for a grant with a slot (a semaphore's). */
const PUSH_SLOT_FRAME = encodeAcquiredSlot(0, 0, 0);

export class Engine<C = unknown> implements WheelOwner<Session<C>>, EngineView<C> {
  private readonly timers: TimerWheel<Session<C>>;
  readonly locks = new Map<string, Lock<C>>();
  readonly sessions = new Map<number, Session<C>>();
  readonly stats = new EngineStats();
  readonly tokens: TokenSource;
  readonly ioTimeoutMs: number;
  readonly maxSessions: number;
  /** Infinity when there is no per-source limit. */
  readonly maxSessionsPerSource: number;
  /** Live sessions per source, kept only while a per-source limit is set. */
  readonly sources = new Map<string, number>();
  private readonly guard: GrantGuard | null;
  private nextId = 1;
  /** Shutting down: owners that end hand nothing over. */
  private draining = false;
  private readonly shardGuard: ((name: string) => Uint8Array | null) | null;
  private readonly delay: LockDelay | null;
  readonly maxLeaseMs: number;
  private readonly words: EngineWords;
  /** Built once per engine: its words are a setting. */
  private readonly sourceOverloadedFrame: Uint8Array;
  /** Locks whose queue's head fits but waits for a grant to be allowed, or for the next loop turn (see the top of this file). */
  private readonly heldBack = new Map<string, Lock<C>>();
  private readonly onResumeNeeded: (() => void) | null;
  /** Inside `resume`, whose answer tells the shell to come back: promotions cut short need not call onResumeNeeded. */
  private resuming = false;
  /** Reclaim's cap (Infinity below 0: off), the grants published for reclaim, and who reclaimed each (by token). */
  private readonly reclaimMaxLeaseMs: number;
  private readonly published: ReadonlyMap<string, readonly ReclaimEntry[]>;
  private readonly reclaimed = new Map<number, Session<C>>();
  /** Tokens of every reclaim granted by this engine (a published grant reclaimed once is not published again). */
  private readonly reclaimedEver = new Set<number>();
  /** Open reclaims: the largest token one may name (the last issued before this engine); -1: none accepted. */
  private readonly reclaimOpenBelow: number;

  constructor(
    private readonly transport: EngineOutput<C>,
    options: EngineOptions,
    now: number,
  ) {
    this.ioTimeoutMs = options.ioTimeoutMs;
    this.maxSessions = options.maxSessions ?? Infinity;
    this.maxSessionsPerSource = options.maxSessionsPerSource ?? Infinity;
    this.tokens = options.tokens ?? new MemoryTokens();
    this.guard = options.grantGuard ?? null;
    this.shardGuard = options.shardGuard ?? null;
    this.delay = options.delay ?? null;
    this.maxLeaseMs = options.maxLeaseMs ?? Infinity;
    this.words = options.words ?? PLAIN_ENGINE_WORDS;
    this.onResumeNeeded = options.onResumeNeeded ?? null;
    this.reclaimMaxLeaseMs = options.reclaim?.maxLeaseMs ?? -1;
    this.published = options.reclaim?.published ?? new Map();
    this.reclaimOpenBelow = options.reclaim?.open === true ? this.tokens.last : -1;
    this.sourceOverloadedFrame = encodeError(ErrorCode.OVERLOADED, `too many sessions from this address (${this.words.maxSessionsPerSource}); reconnect with backoff`);
    this.timers = new TimerWheel(now);
  }

  /** The timer wheel's figures (tests, benchmarks, invariant checks). */
  get wheel(): WheelView {
    return this.timers;
  }

  /**
   * Who runs the one real timer: armed whenever the earliest deadline moves
   * earlier, and calls `tick` at (or soon after) it. Null stops arming.
   */
  setDriver(driver: WheelDriver | null): void {
    this.timers.setDriver(driver);
  }

  // --- events from the shell -----------------------------------------------

  /**
   * A connection was accepted from `source` (the peer's address; only
   * looked at when a per-source limit is set). Null when refused
   * (OVERLOADED at the session or per-source limit, or shutting down).
   */
  open(conn: C, now: number, source: string | null = null): Session<C> | null {
    if (this.draining) {
      this.stats.ends[ErrorCode.SHUTTING_DOWN]!++;
      this.transport.close(conn, SHUTTING_DOWN_FRAME);
      return null;
    }
    if (this.sessions.size >= this.maxSessions) {
      this.stats.ends[ErrorCode.OVERLOADED]!++;
      this.stats.refusedSessionLimit++;
      this.transport.close(conn, OVERLOADED_FRAME);
      return null;
    }
    const tracked = source !== null && this.maxSessionsPerSource !== Infinity;
    const fromSource = tracked ? (this.sources.get(source) ?? 0) : 0;
    if (tracked && fromSource >= this.maxSessionsPerSource) {
      this.stats.ends[ErrorCode.OVERLOADED]!++;
      this.stats.refusedSourceLimit++;
      this.transport.close(conn, this.sourceOverloadedFrame);
      return null;
    }
    const session = new Session<C>(this.nextId++, conn, now, this.ioTimeoutMs);
    if (tracked) {
      this.sources.set(source, fromSource + 1);
      session.source = source;
    }
    this.sessions.set(session.id, session);
    this.stats.states[SessionState.CONNECTED]!++;
    this.stats.opened++;
    this.timers.schedule(session, session.readDeadline);
    return session;
  }

  /**
   * One complete frame from the session (its header already checked). The
   * body is `bytes[offset, offset + length)`, valid only during this call.
   * Returns false when the session is over and its reader should stop.
   */
  frame(session: Session<C>, type: number, bytes: Uint8Array, offset: number, length: number, now: number): boolean {
    if (session.state === SessionState.ENDED) return false;
    session.lastSeen = now;
    session.readDeadline = Infinity; // lazily: the wheel re-checks when the old deadline comes due
    switch (type) {
      case FrameType.HEARTBEAT:
        return this.heartbeat(session, now);
      case FrameType.ACQUIRE:
        return this.acquire(session, bytes, offset, length, now);
      default:
        this.end(session, ErrorCode.PROTOCOL_ERROR, encodeError(ErrorCode.PROTOCOL_ERROR, `unexpected frame type ${frameTypeName(type)}`), now);
        return false;
    }
  }

  /**
   * After each chunk: whether a frame is left incomplete. A frame that starts
   * now must be complete within io-timeout (before ACQUIRE, the first frame's
   * deadline from `open` stands instead).
   */
  readProgress(session: Session<C>, partial: boolean, now: number): void {
    if (partial && session.readDeadline === Infinity && session.state !== SessionState.ENDED) {
      session.readDeadline = now + this.ioTimeoutMs;
      this.fileBy(session, session.readDeadline);
    }
  }

  /** The reader met a bad header: PROTOCOL_ERROR ends the session. */
  protocolError(session: Session<C>, message: string, now: number): void {
    this.end(session, ErrorCode.PROTOCOL_ERROR, encodeError(ErrorCode.PROTOCOL_ERROR, message), now);
  }

  /** Output is waiting for the socket: it must drain within io-timeout. */
  writeBlocked(session: Session<C>, now: number): void {
    if (session.writeDeadline === Infinity && session.state !== SessionState.ENDED) {
      session.writeDeadline = now + this.ioTimeoutMs;
      this.fileBy(session, session.writeDeadline);
    }
  }

  /** End the session with IO_TIMEOUT now (the shell's outbox limit was hit). */
  timeOut(session: Session<C>, now: number): void {
    if (session.state === SessionState.ENDED) return;
    this.stats.outboxCuts++;
    this.end(session, ErrorCode.IO_TIMEOUT, IO_TIMEOUT_FRAME, now);
  }

  /**
   * More than PIPELINE_LIMIT complete frames arrived in one read: the peer
   * sent them all before it could have read the answer to the first, which
   * the protocol forbids. PROTOCOL_ERROR ends the session.
   */
  pipelined(session: Session<C>, now: number): void {
    if (session.state === SessionState.ENDED) return;
    this.stats.pipeliningCuts++;
    this.end(session, ErrorCode.PROTOCOL_ERROR, PIPELINING_FRAME, now);
  }

  /** All output was taken by the socket. */
  writeDrained(session: Session<C>): void {
    session.writeDeadline = Infinity;
  }

  /** The peer closed, reset, or the socket failed. Idempotent. */
  closed(session: Session<C>, now: number): void {
    if (session.state === SessionState.ENDED) return;
    session.endReason = CLOSED_BY_PEER;
    this.stats.ends[CLOSED_BY_PEER]!++;
    this.detach(session, now);
  }

  /**
   * Run the wheel up to `now`: end sessions whose deadline has passed, at
   * most `budget` of them (true: some are left; the wheel's driver is armed
   * to come back for them at once). The shell passes EXPIRY_BUDGET, so a
   * crowd of leases ending in one millisecond is spread over loop turns.
   */
  tick(now: number, budget = Infinity): boolean {
    return this.timers.advance(now, this, budget);
  }

  /** WheelOwner: the session's filed deadline has passed. */
  due(session: Session<C>, now: number): number {
    if (session.state !== SessionState.CONNECTED && now - session.lastSeen >= session.leaseMs) {
      this.end(session, ErrorCode.LEASE_EXPIRED, LEASE_EXPIRED_FRAME, now);
      return -1;
    }
    if (session.readDeadline <= now || session.writeDeadline <= now) {
      this.end(session, ErrorCode.IO_TIMEOUT, IO_TIMEOUT_FRAME, now);
      return -1;
    }
    return session.deadline();
  }

  // --- operator actions ------------------------------------------------------

  /**
   * End a holder of `name` with FORCE_RELEASED: session `sessionId` if
   * given (null unless it holds `name`), else the oldest holder. The next
   * waiters that fit are granted.
   */
  forceRelease(name: string, now: number, sessionId?: number): Session<C> | null {
    const lock = this.locks.get(name);
    if (lock === undefined) return null;
    const holder = sessionId === undefined ? lock.holdHead : (this.sessions.get(sessionId) ?? null);
    if (holder === null || holder.lock !== lock || holder.state !== SessionState.OWNER) return null;
    this.end(holder, ErrorCode.FORCE_RELEASED, FORCE_RELEASED_FRAME, now);
    return holder;
  }

  /** End waiting session `id` with KICKED. Null if there is no such waiter. */
  kick(id: number, now: number): Session<C> | null {
    const session = this.sessions.get(id);
    if (session === undefined || session.state !== SessionState.WAITING) return null;
    this.end(session, ErrorCode.KICKED, KICKED_FRAME, now);
    return session;
  }

  /**
   * Controlled shutdown: every session gets SHUTTING_DOWN; no lock changes
   * hands. `reclaim`: the shell has made `reclaimable()` durable, so holders
   * of reclaimable grants get SHUTTING_DOWN with the RECLAIM flag.
   */
  shutdown(now: number, reclaim = false): void {
    this.draining = true;
    for (const session of this.sessions.values()) {
      const frame = reclaim && session.state === SessionState.OWNER && this.reclaimable(session) ? SHUTTING_DOWN_RECLAIM_FRAME : SHUTTING_DOWN_FRAME;
      this.end(session, ErrorCode.SHUTTING_DOWN, frame, now);
    }
  }

  /** Whether reclaim is on. */
  get reclaimOn(): boolean {
    return this.reclaimMaxLeaseMs >= 0;
  }

  /**
   * Every reclaimable grant now, by name: what a clean stop publishes
   * before `shutdown(now, true)`. With `now`, also the grants the earlier
   * run published that nobody has reclaimed here yet, while their names are
   * still held back: a stop inside the grace carries it on (their holders
   * may still come back, to the next run).
   */
  reclaimableGrants(now?: number): Map<string, ReclaimEntry[]> {
    const out = new Map<string, ReclaimEntry[]>();
    if (!this.reclaimOn) return out;
    const delay = this.delay;
    if (now !== undefined && delay !== null && this.published.size > 0 && !delay.over(now)) {
      for (const [name, entries] of this.published) {
        if (delay.delayOf(name, now) === 0) continue;
        const waiting = entries.filter((e) => !this.reclaimedEver.has(e.token));
        if (waiting.length > 0) out.set(name, waiting);
      }
    }
    for (const lock of this.locks.values()) {
      for (let s = lock.holdHead; s !== null; s = s.queueNext) {
        if (!this.reclaimable(s)) continue;
        let entries = out.get(lock.name);
        if (entries === undefined) out.set(lock.name, (entries = []));
        entries.push({ token: s.token, slot: s.slot, limit: lock.limit, leaseMs: s.leaseMs });
      }
    }
    return out;
  }

  private reclaimable(session: Session<C>): boolean {
    return session.leaseMs <= this.reclaimMaxLeaseMs;
  }

  get shuttingDown(): boolean {
    return this.draining;
  }

  /**
   * Every held name with its holder's lease (ms): what a clean stop
   * publishes, so that the next server holds back exactly these names.
   * At most `limit` entries; null when there are more.
   */
  held(limit: number): Array<[string, number]> | null {
    const out: Array<[string, number]> = [];
    for (const lock of this.locks.values()) {
      if (lock.holders === 0) continue;
      if (out.length >= limit) return null;
      let lease = 0;
      for (let s = lock.holdHead; s !== null; s = s.queueNext) lease = Math.max(lease, s.leaseMs);
      out.push([lock.name, lease]);
    }
    return out;
  }

  /** Claims waiting on ownerless locks until a grant is allowed (held back). */
  get heldBackLocks(): number {
    return this.heldBack.size;
  }

  /**
   * Grant what may now be granted among held-back locks: a delay ended, a
   * raise of the durable lease landed, a token block arrived. At most
   * `budget` grants; true when that cut it short (call again in the next
   * loop turn).
   */
  resume(now: number, budget: number = RESUME_BUDGET): boolean {
    if (this.draining || this.heldBack.size === 0) return false;
    if (this.tokens.exhausted === true) {
      for (const lock of this.heldBack.values()) {
        for (let s = lock.head; s !== null; s = lock.head) this.end(s, ErrorCode.TOKENS_EXHAUSTED, TOKENS_EXHAUSTED_FRAME, now);
      }
      this.heldBack.clear();
      return false;
    }
    if (this.guard !== null && !this.guard.mayGrant(now)) return false;
    this.resuming = true;
    try {
      return this.resumeHeldBack(now, budget);
    } finally {
      this.resuming = false;
    }
  }

  private resumeHeldBack(now: number, budget: number): boolean {
    for (const [name, lock] of this.heldBack) {
      const next = lock.head;
      if (next === null || !lock.admits(next)) {
        this.heldBack.delete(name);
        continue;
      }
      if (!this.mayGrantNow(lock, next, now)) continue;
      this.heldBack.delete(name);
      budget = this.promote(lock, now, budget);
      if (budget === 0) return this.heldBack.size > 0;
      if (this.guard !== null && !this.guard.mayGrant(now)) return false;
    }
    return false;
  }

  // --- transitions -----------------------------------------------------------

  private heartbeat(session: Session<C>, now: number): boolean {
    // Past the deadline nothing is confirmed: the holder's own deadline must not move past the server's authority.
    if (this.guard !== null && session.state !== SessionState.CONNECTED && !this.guard.mayConfirm(now)) return true;
    switch (session.state) {
      case SessionState.OWNER:
        this.stats.heartbeats++;
        this.transport.send(session.conn, session.ackFrame!);
        return true;
      case SessionState.WAITING:
        this.stats.heartbeats++;
        this.transport.send(session.conn, WAITING_REPLY_FRAME);
        return true;
      default:
        this.end(session, ErrorCode.PROTOCOL_ERROR, EARLY_HEARTBEAT_FRAME, now);
        return false;
    }
  }

  private acquire(session: Session<C>, bytes: Uint8Array, offset: number, length: number, now: number): boolean {
    if (session.state !== SessionState.CONNECTED) {
      this.end(session, ErrorCode.PROTOCOL_ERROR, SECOND_ACQUIRE_FRAME, now);
      return false;
    }
    const decoded = decodeAcquire(bytes, offset, length);
    if (!decoded.ok) {
      this.end(session, decoded.code, encodeError(decoded.code, decoded.message), now);
      return false;
    }
    const request = decoded.request;
    if (request.leaseMs > this.maxLeaseMs) {
      this.end(session, ErrorCode.BAD_REQUEST, encodeError(ErrorCode.BAD_REQUEST, `lease_ms ${request.leaseMs} is above ${this.words.maxLease} of ${this.maxLeaseMs}`), now);
      return false;
    }
    if (this.shardGuard !== null) {
      const refusal = this.shardGuard(request.name);
      if (refusal !== null) {
        this.end(session, ErrorCode.WRONG_SHARD, refusal, now);
        return false;
      }
    }
    // Before the lock-delay: a claim no live session of the name could ever sit beside fails the same way at any time.
    let lock = this.locks.get(request.name);
    if (lock !== undefined && lock.limit !== request.limit) {
      this.stats.mismatched++;
      this.end(session, ErrorCode.LIMIT_MISMATCH, encodeError(ErrorCode.LIMIT_MISMATCH, mismatch(lock.limit, request.limit, request.shared)), now);
      return false;
    }
    const delay = this.delay;
    const delayMs = delay === null ? 0 : delay.delayOf(request.name, now);
    // A reclaim is granted at once or refused (never queued, TRY or not): before the lock-delay's TRY refusal.
    if (request.reclaim !== undefined) return this.reclaimClaim(session, request, request.reclaim, delayMs, now);
    if (delayMs > 0 && request.try) {
      this.stats.delayed++;
      const message = `lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another ${Math.ceil(delayMs)} ms`;
      this.end(session, ErrorCode.LOCK_DELAYED, encodeError(ErrorCode.LOCK_DELAYED, message), now);
      return false;
    }
    session.slot = request.shared ? SHARED_CLAIM : NO_SLOT;
    // Granted at once only where it overtakes nobody: a free name, or one whose holders it fits beside with nobody queued.
    const fits = lock === undefined || (lock.head === null && lock.admits(session));
    if (!fits && request.try) {
      this.stats.busy++;
      this.end(session, ErrorCode.LOCK_BUSY, LOCK_BUSY_FRAME, now);
      return false;
    }
    if (fits && this.guard !== null && !this.guard.mayGrant(now)) {
      this.end(session, ErrorCode.SHUTTING_DOWN, SHUTTING_DOWN_FRAME, now);
      return false;
    }
    if (this.tokens.exhausted === true) {
      // Refused before anything is kept: no lock, no queue that nobody could ever be granted.
      this.end(session, ErrorCode.TOKENS_EXHAUSTED, TOKENS_EXHAUSTED_FRAME, now);
      return false;
    }
    session.leaseMs = request.leaseMs;
    session.owner = request.owner;
    session.acquiredAt = now;
    this.fileBy(session, now + request.leaseMs);
    if (lock === undefined) {
      lock = new Lock<C>(request.name, request.limit);
      this.locks.set(request.name, lock);
    }
    session.lock = lock;
    if (fits) {
      if (delay === null || (delayMs === 0 && delay.covers(request.leaseMs))) {
        this.grant(lock, session, GrantPath.IMMEDIATE, now);
        return true;
      }
      // Held back: by the lock-delay (answered WAITING), or only until the durable lease covers it (answered later).
      this.setState(session, SessionState.WAITING);
      lock.enqueue(session);
      this.heldBack.set(lock.name, lock);
      if (delayMs > 0) {
        this.stats.queued++;
        session.answered = true;
        this.transport.send(session.conn, WAITING_REPLY_FRAME);
      }
    } else {
      this.setState(session, SessionState.WAITING);
      lock.enqueue(session);
      this.stats.queued++;
      session.answered = true;
      this.transport.send(session.conn, WAITING_REPLY_FRAME);
    }
    return true;
  }

  /**
   * A RECLAIM (protocol.md section 14): granted at once, with the token it
   * names, while its name is held back by the lock-delay, for a grant the
   * earlier run published, or (open reclaims, while every name is held
   * back) for any token at or below the last issued before this engine;
   * else RECLAIM_REFUSED. A name held back has had no fresh grant in this
   * engine, so every holder it has is a reclaim: among reclaims that
   * conflict (an exclusive one with any other, a shared one with an
   * exclusive one, two of one semaphore slot) the later token wins, and the
   * same token is a newer connection of the same grant, which replaces the
   * older.
   */
  private reclaimClaim(session: Session<C>, request: Acquire, reclaim: Reclaim, delayMs: number, now: number): boolean {
    const refuse = (why: string): false => {
      this.stats.reclaimsRefused++;
      this.end(session, ErrorCode.RECLAIM_REFUSED, encodeError(ErrorCode.RECLAIM_REFUSED, `reclaim refused: ${why}`), now);
      return false;
    };
    if (!this.reclaimOn) return refuse("this server does not accept reclaims (reclaim is off)");
    if (request.leaseMs > this.reclaimMaxLeaseMs) return refuse(`lease_ms ${request.leaseMs} is above the reclaim cap of ${this.reclaimMaxLeaseMs}`);
    if (delayMs === 0) return refuse("this name is not in a grace: its earlier holders' deadlines are over, or it was not held at the last clean stop");
    const token = reclaim.token;
    const slot = request.limit > 1 ? reclaim.slot : request.shared ? SHARED_CLAIM : NO_SLOT;
    const published = this.published.get(request.name)?.find((e) => e.token === token && e.slot === slot && e.limit === request.limit);
    if (published === undefined) {
      if (this.reclaimOpenBelow < 0 || !this.delay!.holdsEveryName(now)) return refuse("no such grant was published for this name (token, slot, mode or limit differ)");
      if (!(token >= 1 && token <= this.reclaimOpenBelow)) return refuse(`token ${token} was not issued before this server's term (the last was ${this.reclaimOpenBelow})`);
      if (request.limit > 1 && slot >= request.limit) return refuse(`slot ${slot} is not a slot of a semaphore of ${request.limit}`);
    }
    if (this.guard !== null && !this.guard.mayGrant(now)) {
      this.end(session, ErrorCode.SHUTTING_DOWN, SHUTTING_DOWN_FRAME, now);
      return false;
    }
    // The reclaimed holders this one conflicts with: refused if any has a later token; else each ends.
    const current = this.locks.get(request.name);
    if (current !== undefined && current.holders > 0) {
      let stale: Session<C>[] | null = null;
      if (request.limit > 1) {
        for (let s = current.holdHead; s !== null; s = s.queueNext) if (s.slot === slot) stale = [s];
      } else if (slot === NO_SLOT || !current.sharedHeld) {
        // An exclusive reclaim conflicts with every holder, a shared one with an exclusive holder: the list is in token order.
        stale = current.holderList();
      } else {
        const same = this.reclaimed.get(token);
        if (same !== undefined && same.lock === current) stale = [same];
      }
      if (stale !== null) {
        for (const s of stale) if (s.token > token) return refuse(`a reclaim of this lock with a later token (${s.token}) holds it`);
        for (const s of stale) this.end(s, ErrorCode.RECLAIM_REFUSED, s.token === token ? RECLAIM_REPLACED_FRAME : RECLAIM_SUPERSEDED_FRAME, now);
      }
    }
    session.leaseMs = request.leaseMs;
    session.owner = request.owner;
    session.acquiredAt = now;
    this.fileBy(session, now + request.leaseMs);
    // Looked up again: ending the stale holders may have dropped the lock they held alone.
    let held = this.locks.get(request.name);
    if (held === undefined) {
      held = new Lock<C>(request.name, request.limit);
      this.locks.set(request.name, held);
    }
    session.lock = held;
    session.slot = slot;
    session.token = token;
    held.holdAt(session);
    if (held.holders === 1) this.stats.heldLocks++;
    session.grantedAt = now;
    this.setState(session, SessionState.OWNER);
    const flags = FLAG_REPLY | FLAG_RECLAIMABLE;
    session.ackFrame = held.slots !== null ? encodeAcquiredSlot(token, slot, flags) : encodeAcquired(token, flags);
    session.answered = true;
    this.reclaimed.set(token, session);
    this.reclaimedEver.add(token);
    this.stats.reclaims++;
    this.transport.send(session.conn, session.ackFrame);
    // The name is held back (its delay runs): `resume` serves its queue once the delay ends, behind this holder.
    if (held.head !== null) this.heldBack.set(held.name, held);
    return true;
  }

  /** Whether `next` may be granted `lock` now: a delay over, its lease durable (the guard is asked by the caller). */
  private mayGrantNow(lock: Lock<C>, next: Session<C>, now: number): boolean {
    const delay = this.delay;
    return delay === null || (delay.delayOf(lock.name, now) === 0 && delay.covers(next.leaseMs));
  }

  private grant(lock: Lock<C>, session: Session<C>, path: GrantPath, now: number): void {
    const token = this.tokens.next();
    lock.hold(session); // a semaphore's holder gets its slot here
    if (lock.holders === 1) this.stats.heldLocks++;
    session.token = token;
    session.grantedAt = now;
    this.setState(session, SessionState.OWNER);
    const slotted = lock.slots !== null;
    const reclaimable = this.reclaimable(session) ? FLAG_RECLAIMABLE : 0;
    session.ackFrame = slotted ? encodeAcquiredSlot(token, session.slot, FLAG_REPLY | reclaimable) : encodeAcquired(token, FLAG_REPLY | reclaimable);
    this.stats.granted(path, session, now);
    // The answer to ACQUIRE is the reply frame itself; a promotion is a push.
    if (!session.answered) {
      session.answered = true;
      this.transport.send(session.conn, session.ackFrame);
    } else if (slotted) {
      PUSH_SLOT_FRAME[1] = FLAG_SLOT | reclaimable;
      writeToken(PUSH_SLOT_FRAME, HEADER_LENGTH, token);
      writeSlot(PUSH_SLOT_FRAME, HEADER_LENGTH + TOKEN_LENGTH, session.slot);
      this.transport.send(session.conn, PUSH_SLOT_FRAME);
    } else {
      PUSH_FRAME[1] = reclaimable;
      writeToken(PUSH_FRAME, HEADER_LENGTH, token);
      this.transport.send(session.conn, PUSH_FRAME);
    }
  }

  /**
   * Grant the queue's head while it fits beside the holders, at most
   * `budget` grants; returns the budget left. A head that fits but may not
   * be granted yet (guard, lock-delay, durable lease) or was cut off by the
   * budget leaves the lock in `heldBack` for `resume`.
   */
  private promote(lock: Lock<C>, now: number, budget: number): number {
    for (let next = lock.head; next !== null && lock.admits(next); next = lock.head) {
      if ((this.guard !== null && !this.guard.mayGrant(now)) || !this.mayGrantNow(lock, next, now)) {
        this.heldBack.set(lock.name, lock); // granted by `resume` once allowed
        return budget;
      }
      if (budget === 0) {
        this.heldBack.set(lock.name, lock);
        if (!this.resuming) this.onResumeNeeded?.();
        return 0;
      }
      lock.unlink(next);
      this.grant(lock, next, next.answered ? GrantPath.PROMOTED : GrantPath.IMMEDIATE, now);
      budget--;
    }
    return budget;
  }

  /** Capacity freed on `lock` (a holder or the head waiter left): grant what fits, or drop an empty lock. */
  private release(lock: Lock<C>, now: number): void {
    if (lock.head === null) {
      if (lock.holders === 0) {
        this.locks.delete(lock.name);
        this.heldBack.delete(lock.name);
      }
      return;
    }
    if (this.draining) return;
    if (this.tokens.exhausted === true) {
      // No token for anyone: every waiter of this lock ends (their ends promote nothing), and the lock with the last session.
      for (let s = lock.head; s !== null; s = lock.head) this.end(s, ErrorCode.TOKENS_EXHAUSTED, TOKENS_EXHAUSTED_FRAME, now);
      return;
    }
    this.promote(lock, now, PROMOTE_BUDGET);
  }

  /** End a live session by rule: forget it, hand over, then write `frame` and close. */
  private end(session: Session<C>, code: ErrorCode, frame: Uint8Array, now: number): void {
    if (session.state === SessionState.ENDED) return;
    session.endReason = code;
    this.stats.ends[code]!++;
    this.detach(session, now);
    this.transport.close(session.conn, frame);
  }

  private detach(session: Session<C>, now: number): void {
    const was = session.state;
    this.setState(session, SessionState.ENDED);
    this.timers.remove(session);
    this.sessions.delete(session.id);
    const source = session.source;
    if (source !== null) {
      const left = this.sources.get(source)! - 1;
      if (left === 0) this.sources.delete(source);
      else this.sources.set(source, left);
    }
    const lock = session.lock;
    if (lock === null) return;
    if (was === SessionState.OWNER) {
      this.stats.held(session, now);
      if (this.reclaimed.size > 0 && this.reclaimed.get(session.token) === session) this.reclaimed.delete(session.token);
      lock.unhold(session);
      if (lock.holders === 0) this.stats.heldLocks--;
      this.release(lock, now);
    } else if (was === SessionState.WAITING) {
      const wasHead = lock.head === session;
      lock.unlink(session);
      if (lock.holders === 0 && lock.head === null) {
        // Draining, or held back: an ownerless lock with nobody left waiting is gone.
        this.locks.delete(lock.name);
        this.heldBack.delete(lock.name);
      } else if (wasHead && lock.head !== null && !this.draining && this.tokens.exhausted !== true) {
        // The next waiter may fit where the one that left did not (a shared claim behind an exclusive one).
        this.promote(lock, now, PROMOTE_BUDGET);
      }
    }
  }

  private setState(session: Session<C>, state: SessionState): void {
    const stats = this.stats;
    const was = session.state;
    stats.states[was]!--;
    stats.states[state]!++;
    session.state = state;
    // Exclusive claims are counted by `states` alone (EngineStats.holdersByKind); this test is all the exclusive path pays.
    let kind: ClaimKind;
    if (session.slot === SHARED_CLAIM) kind = ClaimKind.SHARED;
    else if (session.lock !== null && session.lock.limit > 1) kind = ClaimKind.SEMAPHORE;
    else return;
    if (was === SessionState.WAITING) stats.otherWaiters[kind]!--;
    else if (was === SessionState.OWNER) stats.otherHolders[kind]!--;
    if (state === SessionState.WAITING) stats.otherWaiters[kind]!++;
    else if (state === SessionState.OWNER) stats.otherHolders[kind]!++;
  }

  /** File the session so it comes due no later than `deadline`. */
  private fileBy(session: Session<C>, deadline: number): void {
    if (Math.ceil(deadline) < session.wheelTick || session.wheelSlot < 0) this.timers.schedule(session, deadline);
  }
}

/** LIMIT_MISMATCH's message: both limits, and what a limit of 1 means. */
function mismatch(held: number, asked: number, shared: boolean): string {
  const what = (limit: number): string => (limit === 1 ? "limit 1 (an exclusive or shared lock)" : `limit ${limit} (a semaphore)`);
  return `this name's live sessions claim it with ${what(held)}; this ${shared ? "shared " : ""}claim asked for ${what(asked)}: every session of a name must use the same limit`;
}
