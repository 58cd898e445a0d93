/**
 * Counters the engine keeps on its hot paths: plain numeric fields and
 * preallocated typed arrays, so counting allocates nothing. Formatting them
 * (Prometheus text, JSON) is the shell's business.
 */
import { type Session, SessionState } from "./session.ts";

export const GrantPath = {
  /** The lock was free at ACQUIRE. */
  IMMEDIATE: 0,
  /** The session waited in the queue and was promoted. */
  PROMOTED: 1,
} as const;
export type GrantPath = (typeof GrantPath)[keyof typeof GrantPath];

/** What a claim asks for: the index in `holdersByKind` and `waitersByKind`. */
export const ClaimKind = {
  /** Limit 1, not shared: holds alone. */
  EXCLUSIVE: 0,
  /** Limit 1, SHARED: holds beside other shared claims. */
  SHARED: 1,
  /** Limit above 1: one of a semaphore's permits. */
  SEMAPHORE: 2,
} as const;
export type ClaimKind = (typeof ClaimKind)[keyof typeof ClaimKind];

/** ClaimKind by name, as metrics label them. */
export const CLAIM_KIND_NAMES = ["exclusive", "shared", "semaphore"] as const;

/** A histogram with fixed upper bounds (seconds), cumulative only when rendered. */
export class Histogram {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

/** Seconds: from microsecond waits to day-long holds. */
const DURATION_BUCKETS = [
  0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400,
];

/**
 * Seconds: a handover inside the server (the owner's end seen -> the next
 * waiter's ACQUIRED handed to the socket) takes microseconds; the upper
 * buckets catch GC pauses and a stalled event loop.
 */
const HANDOVER_BUCKETS = [
  0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 1,
];

export class EngineStats {
  /** Live sessions by SessionState (index 3, ENDED, counts nothing useful). */
  readonly states = new Int32Array(4);

  /** Live holders by ClaimKind (exclusive: every holder that is neither shared nor a semaphore's). Read by metrics; not on a hot path. */
  get holdersByKind(): Int32Array {
    const counts = this.otherHolders;
    counts[ClaimKind.EXCLUSIVE] = this.states[SessionState.OWNER]! - counts[ClaimKind.SHARED]! - counts[ClaimKind.SEMAPHORE]!;
    return counts;
  }

  /** Live waiters by ClaimKind, as holdersByKind. */
  get waitersByKind(): Int32Array {
    const counts = this.otherWaiters;
    counts[ClaimKind.EXCLUSIVE] = this.states[SessionState.WAITING]! - counts[ClaimKind.SHARED]! - counts[ClaimKind.SEMAPHORE]!;
    return counts;
  }
  /** Ended sessions by reason: index 0 closed by the peer, else the ERROR code sent. */
  readonly ends = new Float64Array(256);
  opened = 0;
  grantsImmediate = 0;
  grantsPromoted = 0;
  queued = 0;
  busy = 0;
  /** TRY claims refused with LOCK_DELAYED (a lock-delay held the name back). */
  delayed = 0;
  /** Claims refused with LIMIT_MISMATCH (another limit than the name's live sessions). */
  mismatched = 0;
  /** Reclaims granted, and refused with RECLAIM_REFUSED (protocol.md section 14). */
  reclaims = 0;
  reclaimsRefused = 0;
  /** Locks with at least one holder now. */
  heldLocks = 0;
  /**
   * Live shared and semaphore holders and waiters, by ClaimKind. The
   * engine never counts an exclusive claim here, so that its state changes
   * (every claim and handover of the exclusive path) count nothing more
   * than `states`; index EXCLUSIVE is written only by holdersByKind and
   * waitersByKind, which derive it from the state counts on read.
   */
  readonly otherHolders = new Int32Array(3);
  readonly otherWaiters = new Int32Array(3);
  heartbeats = 0;
  /** Connections refused with OVERLOADED: at the session limit, and at the per-source limit. */
  refusedSessionLimit = 0;
  refusedSourceLimit = 0;
  /** Sessions ended for sending more frames than allowed before reading an answer (PROTOCOL_ERROR). */
  pipeliningCuts = 0;
  /** Sessions cut because their unsent output passed the shell's outbox cap (IO_TIMEOUT). */
  outboxCuts = 0;
  /** From ACQUIRE accepted to grant, for promoted sessions. */
  readonly waitSeconds = new Histogram(DURATION_BUCKETS);
  /** From grant to the end of the owner's session. */
  readonly holdSeconds = new Histogram(DURATION_BUCKETS);
  /**
   * The shell's side of a handover: from the event that ended an owner to
   * the promoted waiter's ACQUIRED written (the engine has no clock: the
   * shell measures around the call and reports here).
   */
  readonly handoverSeconds = new Histogram(HANDOVER_BUCKETS);

  /** An engine call that began at `start` (ms) promoted at least one waiter by `end`. */
  handedOver(start: number, end: number): void {
    this.handoverSeconds.observe((end - start) / 1000);
  }

  granted(path: GrantPath, session: Session<unknown>, now: number): void {
    if (path === GrantPath.IMMEDIATE) {
      this.grantsImmediate++;
    } else {
      this.grantsPromoted++;
      this.waitSeconds.observe((now - session.acquiredAt) / 1000);
    }
  }

  held(session: Session<unknown>, now: number): void {
    this.holdSeconds.observe((now - session.grantedAt) / 1000);
  }
}
