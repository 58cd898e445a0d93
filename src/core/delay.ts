/**
 * LockDelay: no grant while a holder of an earlier incarnation may still
 * believe it holds the lock. Pure: no I/O, no clock (time is an argument).
 *
 * A client believes it holds a lock until 0.8 x its lease after it sent the
 * last heartbeat that was confirmed (protocol.md section 8.3). A server that
 * dies, freezes or is cut off tells its holders nothing, so whoever serves
 * next (a standby taking over, the same server restarted on its data
 * directory) must not grant a name before every such holder's own deadline
 * has passed. What the next server knows is durable state its predecessor
 * left: the largest lease it granted (kept raise-only, made durable before
 * a grant that raises it), and, after a clean stop, the exact set of names
 * it held with each holder's lease. From that the shell computes one moment
 * for every name (`until`) and one per published name (`names`); this class
 * answers, at every grant, how long a name must still wait.
 *
 * The durable largest lease is the other half: `covers(lease)` says whether
 * a grant of that lease is already covered by what the store holds. When it
 * is not, the class asks the store (`raise`) to make a rounded-up value
 * durable: a store that writes synchronously (the data directory) answers
 * true at once; one that cannot (the coordinator row) answers false, and
 * the engine holds the grant back until the shell reports `raised` and
 * calls Engine.resume. Rounding up (at most 12.5 %: eight steps per power of
 * two) bounds the raises a lifetime can see at about 256, whatever leases
 * clients choose, for a delay at most 12.5 % longer than the exact one.
 */

/** The share of a holder's lease after which its client gives up (protocol.md section 8.3). */
export const CLIENT_GIVE_UP_SHARE = 0.8;

/** Added to every delay, as a share of the lease it waits for: clock rates differ between machines. */
export const DELAY_MARGIN_SHARE = 0.02;

/** Clean stops publish at most this many held names; a larger set is published as "every name". */
export const MAX_PUBLISHED_NAMES = 10_000;

/**
 * How long after `gapMs` has already passed since an earlier server's
 * authority ended a name held with lease `leaseMs` must still wait: the
 * holder's deadline (0.8 x lease) less the gap, plus the margin; 0 when the
 * gap covers it.
 */
export function delayFor(leaseMs: number, gapMs = 0): number {
  const wait = CLIENT_GIVE_UP_SHARE * leaseMs - gapMs;
  return wait <= 0 ? 0 : Math.ceil(wait + DELAY_MARGIN_SHARE * leaseMs);
}

/** `leaseMs` rounded up to one of eight steps per power of two (at most 12.5 % more). */
export function roundLease(leaseMs: number): number {
  if (leaseMs <= 8) return Math.ceil(leaseMs);
  const step = 2 ** (Math.floor(Math.log2(leaseMs)) - 3);
  return Math.ceil(leaseMs / step) * step;
}

/** Why a delay runs: after a takeover of an expired or a released row, or a restart (not clean, or clean). */
export type DelayReason = "takeover" | "released" | "restart" | "clean-restart";

/** What the lock-delay is at the moment, for /readyz, /metrics, lockd status and the page. */
export interface DelayView {
  readonly why: DelayReason;
  /** The longest wait left, ms (0: over). */
  readonly remainingMs: number;
  /** Names still held back one by one (a published set); 0 when every name waits or none does. */
  readonly names: number;
  /** Whether every name is held back (not only published ones). */
  readonly everyName: boolean;
}

/** The published set of a clean stop: each held name with its holder's lease (ms); "*": too many to list. */
export type HeldSet = ReadonlyArray<readonly [string, number]> | "*";

export interface LockDelayOptions {
  readonly why: DelayReason;
  /** Monotonic ms before which no name is granted (0 or less: none). */
  readonly until: number;
  /** Names held back until their own moment (monotonic ms). */
  readonly names?: ReadonlyMap<string, number>;
  /** The largest lease the store already holds durably (ms). */
  readonly durableMaxMs: number;
  /**
   * Make `leaseMs` durable as the largest lease. True: done (a synchronous
   * store). False: under way; the shell calls `raised` when it is, or
   * `raiseFailed` when it was not.
   */
  readonly raise: (leaseMs: number) => boolean;
}

export class LockDelay {
  readonly why: DelayReason;
  private readonly until: number;
  private readonly names: Map<string, number>;
  /** The latest moment any name waits for. */
  private readonly end: number;
  private durableMax: number;
  /** The value of the raise under way (0: none). */
  private raising = 0;
  /** The largest lease asked for while a raise was under way (0: none). */
  private wanted = 0;
  private readonly raise: (leaseMs: number) => boolean;

  constructor(options: LockDelayOptions) {
    this.why = options.why;
    this.until = options.until;
    this.names = new Map(options.names ?? []);
    let end = options.until;
    for (const at of this.names.values()) if (at > end) end = at;
    this.end = end;
    this.durableMax = options.durableMaxMs;
    this.raise = options.raise;
  }

  /** ms before `name` may be granted; 0: now. The hot path: two comparisons, and a Map lookup only while published names wait. */
  delayOf(name: string, now: number): number {
    if (now >= this.end) return 0;
    let at = this.until;
    if (this.names.size > 0) {
      const own = this.names.get(name);
      if (own !== undefined && own > at) at = own;
    }
    return at > now ? at - now : 0;
  }

  /** Whether every name is held back at `now` (not only published ones). */
  holdsEveryName(now: number): boolean {
    return now < this.until;
  }

  /** Whether every delay is over at `now`. */
  over(now: number): boolean {
    return now >= this.end;
  }

  /** The moment the last delay ends (monotonic ms). */
  get endsAt(): number {
    return this.end;
  }

  /**
   * The next moment at which a held-back name may become grantable (a delay
   * ends), after `now`; Infinity when none will.
   */
  nextChange(now: number): number {
    if (now >= this.end) return Infinity;
    let next = this.until > now ? this.until : Infinity;
    // Published names: the earliest of theirs still ahead, but never before the common wait ends.
    if (this.names.size > 0 && this.until <= now) {
      for (const at of this.names.values()) if (at > now && at < next) next = at;
    }
    return next;
  }

  /** The largest lease durable now. */
  get durableMaxMs(): number {
    return this.durableMax;
  }

  /**
   * Whether a grant of `leaseMs` is covered by the durable largest lease.
   * When not, a raise is started (or joined); the grant waits for `raised`.
   */
  covers(leaseMs: number): boolean {
    if (leaseMs <= this.durableMax) return true;
    const target = roundLease(leaseMs);
    if (this.raising !== 0) {
      // One raise at a time: a larger lease waits for the next, asked for when this one lands.
      if (target > this.raising && target > this.wanted) this.wanted = target;
      return false;
    }
    this.raising = target;
    if (this.raise(target)) {
      this.raising = 0;
      if (target > this.durableMax) this.durableMax = target;
      return true;
    }
    return false;
  }

  /** The raise under way landed: `leaseMs` (or more) is durable. Starts the next one if a larger lease waits. */
  raised(leaseMs: number): void {
    if (leaseMs > this.durableMax) this.durableMax = leaseMs;
    this.raising = 0;
    this.next();
  }

  /** The raise under way did not land (no answer): the next `covers` or `retry` asks again. */
  raiseFailed(): void {
    const was = this.raising;
    this.raising = 0;
    if (was > this.wanted) this.wanted = was;
  }

  /** Ask again for a raise that failed or waits (the shell calls this on its next tick). */
  retry(): void {
    if (this.raising === 0) this.next();
  }

  /** Whether a grant waits on a raise (under way or wanted). */
  get pendingRaise(): boolean {
    return this.raising !== 0 || this.wanted > this.durableMax;
  }

  view(now: number): DelayView | null {
    if (now >= this.end) return null;
    let names = 0;
    if (this.until <= now) for (const at of this.names.values()) if (at > now) names++;
    return { why: this.why, remainingMs: Math.ceil(this.end - now), names, everyName: this.until > now };
  }

  private next(): void {
    const want = this.wanted;
    this.wanted = 0;
    if (want > this.durableMax) this.covers(want);
  }
}

/** No delay, and every lease covered: a server without durable state. */
export const NO_DELAY = new LockDelay({ why: "restart", until: 0, durableMaxMs: Infinity, raise: () => true });
