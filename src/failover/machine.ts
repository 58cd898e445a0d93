/**
 * RoleMachine: the role machine of an instance of a lockd service run as
 * one active and standbys.
 *
 * Rule 1: every decision about the role lives in this file: when to read,
 * take over, renew, reserve, raise, step down, and what a new term must
 * wait before it grants (the lock-delay). The shell decides nothing.
 *
 * Rule 2: the machine does no I/O and reads no clock, like core/engine.ts
 * and client/machine.ts. The shell (shell.ts) calls it with events and the
 * current monotonic time in ms (`start`, `tick`, the statements' answers
 * `readDone` ... `raiseDone`, `stop`, `abandon`), and the machine answers
 * through `RoleEffects`: a statement to send against the coordinator row (a
 * PostgreSQL table, store.ts), become active, step down, release, and
 * `arm(at)`, the one timer, after every event. Tests drive it with a number.
 *
 * The row: (epoch, holder, renewals, token_floor, lease_ms). No timestamp of
 * any machine decides anything; expiry is judged by how long this instance
 * has seen the row unchanged, on its own monotonic clock.
 *
 * - standby: reads the row every lease/4. Once it has seen the same
 *   (epoch, renewals, holder) for a whole lease (the longer of its own and
 *   the row's), counted from the moment the first read that showed them
 *   *answered*, it tries the takeover: one compare-and-set on exactly those
 *   values. A released row (holder empty) is taken at once; a missing row is
 *   created (the first instance of a service is active at once).
 * - active: renews every lease/4 (renewals + 1 where holder = me and epoch =
 *   mine), on schedule even while an earlier renewal is unanswered. Its own lease runs from the moment it *sent* the last renewal that
 *   was confirmed (the takeover counts as one). At 0.8 x lease without a
 *   confirmation, or at once when a statement finds the row taken, it steps
 *   down. `mayGrant(now)` is the check before every grant: it compares `now`
 *   with that deadline, it does not trust a timer to have fired.
 * - tokens: a block of `block` tokens comes with the takeover; the next is
 *   reserved (token_floor + block, only for holder = me and epoch = mine)
 *   when half the current block is used, so no grant waits on the
 *   coordinator. No token above the row's token_floor is ever issued.
 *
 * - lock-delay: a new active grants no name while a holder of an earlier
 *   active may still believe it holds it (core/delay.ts). The row keeps the
 *   largest client lease the active granted (`maxLeaseMs`, raise-only: a
 *   `raise` goes out before a grant with a larger lease), the largest of
 *   earlier epochs still relied on (`carryLeaseMs`: a takeover folds the
 *   old maximum into it, and renewals clear it once this term's wait is
 *   over), and after a clean stop the exact names it held (`held`). At
 *   activation the machine says how long every name, and each published
 *   name, must wait (`activate.delay`).
 *
 * Why a standby and the active never grant at once: the standby counts a
 * lease from a moment after the active sent the renewal it saw; the active
 * stops granting 0.8 x lease after sending it. The 0.2 x lease between them
 * absorbs clock rate differences and scheduling delay; a process paused
 * longer than that is what fencing tokens are for (its tokens are all below
 * the new active's).
 */

import { delayFor, type HeldSet, MAX_PUBLISHED_NAMES } from "../core/delay.ts";
import type { ReclaimEntry } from "../core/engine.ts";
import { isReleased } from "./holder.ts";

/** The coordinator row of one service, as read. */
export interface CoordinatorRow {
  readonly epoch: number;
  /** Instance id of the active (with the map it serves, holder.ts); "" or "(released) ..." when released. */
  readonly holder: string;
  readonly renewals: number;
  /** No token above it has been issued. */
  readonly tokenFloor: number;
  /** The active's coordinator lease in ms. */
  readonly leaseMs: number;
  /**
   * The largest client lease this epoch's active granted or may grant
   * without another raise (ms); null in a row last written by a lockd that
   * kept none (schema version 1).
   */
  readonly maxLeaseMs: number | null;
  /** The largest client lease of earlier epochs whose holders may still believe (ms; 0: none). */
  readonly carryLeaseMs: number;
  /** A released row: the names its clean stop held, with their leases ("*": too many to list); null otherwise. */
  readonly held: HeldSet | null;
  /** The service's reclaim cap M (ms, raise-only; 0: reclaim never on). Absent: 0. */
  readonly reclaimMaxLeaseMs?: number;
  /** A released row: the reclaimable grants its clean stop published (protocol.md section 14); null or absent: none. */
  readonly reclaim?: ReadonlyMap<string, readonly ReclaimEntry[]> | null;
}

/** What a new term must wait before granting, counted from its activation (ms). */
export interface TermDelay {
  /** No name is granted before this many ms. */
  readonly everyNameMs: number;
  /** Published names (a clean stop's set): each waits its own ms. */
  readonly names: ReadonlyArray<readonly [string, number]>;
  /** The row could not tell the earlier active's largest lease (written by an older lockd): nothing waited for it. */
  readonly unknown: boolean;
}

/** The values a takeover's compare-and-set requires to be unchanged. */
export interface Watched {
  readonly epoch: number;
  readonly renewals: number;
  readonly holder: string;
}

/**
 * How the machine acts on the world, as the engine's Transport and the
 * client's ClaimEffects do: one method per thing to do, carried out by the
 * shell (src/failover/shell.ts; the simulation's is a model). After every
 * event the machine asks for its one timer with `arm`.
 */
export interface RoleEffects {
  /** Read the row (answer: `readDone`). */
  read(): void;
  /** Insert the row with epoch 1, holder me, token_floor = `floor` + block (answer: `createDone`). */
  create(floor: number): void;
  /** The compare-and-set on `watched` (answer: `takeoverDone`). */
  takeover(watched: Watched): void;
  /** Renew term `epoch`, writing the carried lease (answer: `renewDone` with `sentAt`). */
  renew(epoch: number, sentAt: number, carryLeaseMs: number): void;
  /** Raise the row's largest lease to at least `leaseMs` (answer: `raiseDone`). */
  raise(epoch: number, leaseMs: number): void;
  /** Reserve the next token block (answer: `reserveDone`). */
  reserve(epoch: number): void;
  /** Become active: listen, and issue tokens from the machine. */
  activate(activation: Extract<RoleAction, { type: "activate" }>): void;
  /** Stop granting: every session gets SHUTTING_DOWN; a standby again. */
  stepDown(epoch: number, reason: string): void;
  /** Release the row, publishing the held names (no answer needed). */
  release(release: Extract<RoleAction, { type: "release" }>): void;
  /** Call `tick` at `at` (monotonic ms), replacing the one armed before; Infinity: none. */
  arm(at: number): void;
}

/** What the machine decides, as data: each is one RoleEffects call (tests and the simulation record them this way). */
export type RoleAction =
  /** Read the row (an answer: `readDone`). */
  | { readonly type: "read" }
  /** Insert the row with epoch 1, holder me, token_floor = `floor` + block (answer: `createDone`). */
  | { readonly type: "create"; readonly floor: number }
  /** Compare-and-set: holder me, epoch + 1, renewals 0, token_floor + block, where the row is still `watched` (answer: `takeoverDone`). */
  | { readonly type: "takeover"; readonly watched: Watched }
  /**
   * renewals + 1 where holder = me and epoch = `epoch`; the row's carried
   * lease set to `carryLeaseMs` (0 once this term's wait is over) (answer:
   * `renewDone` with `sentAt`).
   */
  | { readonly type: "renew"; readonly epoch: number; readonly sentAt: number; readonly carryLeaseMs: number }
  /** The row's largest lease raised to at least `leaseMs` where holder = me and epoch = `epoch` (answer: `raiseDone`). */
  | { readonly type: "raise"; readonly epoch: number; readonly leaseMs: number }
  /** token_floor + block where holder = me and epoch = `epoch` (answer: `reserveDone`). */
  | { readonly type: "reserve"; readonly epoch: number }
  /** Become active: listen, and issue tokens from the machine (`nextToken`). */
  | {
      readonly type: "activate";
      readonly epoch: number;
      readonly firstToken: number;
      readonly why: ActivationReason;
      /** "expired": how long the row had been seen unchanged when the takeover was sent (this instance's clock). */
      readonly unchangedMs: number;
      /** The lock-delay of this term, from now. */
      readonly delay: TermDelay;
      /** The largest lease the row holds durably for this term (ms). */
      readonly maxLeaseMs: number;
      /** The service's reclaim cap M as the row holds it for this term (ms; 0: reclaim off). */
      readonly reclaimMaxLeaseMs: number;
      /** The grants a clean stop published for reclaim (a released row's); null: none. */
      readonly reclaim: ReadonlyMap<string, readonly ReclaimEntry[]> | null;
    }
  /** Stop granting: every session gets SHUTTING_DOWN, the listener closes; the instance is a standby again. */
  | { readonly type: "stepDown"; readonly epoch: number; readonly reason: string }
  /**
   * Clean stop: mark the row released (holder = "") if it is still mine,
   * publishing the names held at the stop (`held`, their largest lease
   * `maxLeaseMs`) and the carried lease (answer: none needed).
   */
  | {
      readonly type: "release";
      readonly epoch: number;
      readonly held: HeldSet;
      readonly maxLeaseMs: number;
      readonly carryLeaseMs: number;
      /** The reclaimable grants published with the release (their holders get SHUTTING_DOWN with RECLAIM); null: none. */
      readonly reclaim?: ReadonlyMap<string, readonly ReclaimEntry[]> | null;
    };

/** How a term began: this instance created the row, took a released row, or one left unchanged for a lease. */
export type ActivationReason = "created" | "released" | "expired";

/** The answer of a statement that requires holder = me and epoch = mine. */
export const enum Outcome {
  /** The statement changed the row. */
  OK,
  /** It changed nothing: the row is no longer ours. */
  TAKEN,
  /** No answer (coordinator unreachable, timed out, an error). */
  FAILED,
}

export type Role = "standby" | "active" | "stopped";

export interface RoleMachineOptions {
  /** The coordinator lease in ms. */
  readonly leaseMs: number;
  /** Tokens per reservation. */
  readonly block: number;
  /** Creating the row: no token at or below this was issued (a data directory's floor, or 0). */
  readonly initialFloor?: number;
  /**
   * Why this instance must not take over a row held (or released) by
   * `holder`; null when it may. Checked at every read; a refused row is
   * neither watched nor taken (holder.ts: the shard map).
   */
  readonly refuse?: (holder: string) => string | null;
}

/** The share of the lease after which an active without a confirmed renewal stops. */
export const STEP_DOWN_SHARE = 0.8;

type Pending = "read" | "create" | "takeover" | null;

export class RoleMachine {
  role: Role = "standby";
  /** The epoch of the current (or last) active term of this instance; 0 before the first. */
  epoch = 0;
  readonly leaseMs: number;
  readonly block: number;

  // --- counters (ops) ----------------------------------------------------------
  renewalsFailed = 0;
  stepDowns = 0;
  takeovers = 0;
  /** The last round trip of a confirmed statement, ms. */
  lastRoundTripMs = 0;

  // --- standby ----------------------------------------------------------------------
  private pending: Pending = null;
  private pendingSentAt = 0;
  private takeoverWhy: ActivationReason = "expired";
  private takeoverUnchangedMs = 0;
  private nextReadAt = 0;
  private watched: Watched | null = null;
  /** When the first read that showed `watched` answered. */
  private watchedSince = 0;
  /** The lease to wait: the longer of ours and the row's. */
  private watchLeaseMs = 0;
  /** The watched row as read (for a released row: its published set and carried lease). */
  private watchedRow: CoordinatorRow | null = null;
  /** The largest client lease any read of the watched epoch showed (a row that went back must not shorten the delay). */
  private watchedLeaseMax = 0;

  // --- active -------------------------------------------------------------------------
  /** When the last confirmed renewal (or the takeover) was sent. */
  private confirmedSentAt = -Infinity;
  private nextRenewAt = Infinity;
  private reserveInFlight = false;
  private nextReserveAt = 0;
  /** Tokens: the last issued, the end of the current block, the next block's end (0: none yet). */
  private tokenLast = 0;
  private blockEnd = 0;
  private nextBlockEnd = 0;
  private readonly initialFloor: number;
  /** The carried lease this term writes with its renewals, until `carryUntil` (then 0). */
  private carryLeaseMs = 0;
  private carryUntil = -Infinity;
  /**
   * A term begun from a clean stop's exact set: the names it still holds
   * back for that stop's holders (name -> [lease, until]), and the every-name
   * carry the stopped term itself still had (until `everyCarryUntil`). Its
   * own clean stop republishes those names one by one instead of carrying
   * their largest lease for every name (renewals still carry it: a crash
   * publishes nothing).
   */
  private inherited: Map<string, readonly [number, number]> | null = null;
  private everyCarryLeaseMs = 0;
  private everyCarryUntil = -Infinity;
  /** The largest client lease this term holds durably in the row. */
  private maxLeaseMs = 0;
  /**
   * The highest token floor this instance has read in the row (and the last
   * token it issued itself): no token above it can have been issued when it
   * was seen. A term never issues a token at or below it, even if the row
   * comes back lower (a coordinator that lost committed transactions).
   */
  private floorSeen = 0;
  private epochSeen = 0;
  /** Reads that showed the row gone back (a lower epoch or floor, or gone): the coordinator lost data. */
  regressions = 0;
  /** Why the last read's row may not be taken over by this instance (options.refuse); null when it may. */
  refusal: string | null = null;
  private readonly refuse: ((holder: string) => string | null) | null;

  constructor(
    options: RoleMachineOptions,
    private readonly fx: RoleEffects,
  ) {
    if (!(options.leaseMs > 0)) throw new RangeError("leaseMs must be positive");
    if (!(options.block >= 2)) throw new RangeError("block must be at least 2");
    this.leaseMs = options.leaseMs;
    this.block = options.block;
    this.initialFloor = options.initialFloor ?? 0;
    this.refuse = options.refuse ?? null;
  }

  private get interval(): number {
    return this.leaseMs / 4;
  }

  /** The moment an active stops granting: 0.8 x lease after sending its last confirmed renewal. */
  get deadline(): number {
    return this.confirmedSentAt + STEP_DOWN_SHARE * this.leaseMs;
  }

  // --- events: each decides, then acts through the effects and arms the timer ----------------

  /** Start as a standby: read the row now. */
  start(now: number): void {
    this.emit(this.decideStart(now));
  }

  /** Time passed (the armed timer fired, or any other event): whatever is due now. */
  tick(now: number): void {
    this.emit(this.decideTick(now));
  }

  /** The row as read; null when the service has no row yet. Null `row` with `failed`: no answer. */
  readDone(now: number, row: CoordinatorRow | null, failed = false): void {
    this.emit(this.decideReadDone(now, row, failed));
  }

  /** The answer to `create`: the row as inserted, or null when another instance created it first (or no answer). */
  createDone(now: number, row: CoordinatorRow | null): void {
    this.emit(this.decideCreateDone(now, row));
  }

  /** The answer to `takeover`: the row as updated, or null when it changed nothing (or no answer). */
  takeoverDone(now: number, row: CoordinatorRow | null): void {
    this.emit(this.decideTakeoverDone(now, row));
  }

  /** The answer to the renewal of term `epoch` sent at `sentAt`. */
  renewDone(now: number, epoch: number, sentAt: number, outcome: Outcome): void {
    this.emit(this.decideRenewDone(now, epoch, sentAt, outcome));
  }

  /** The answer to `reserve` of term `epoch`: the row's new token floor, or the outcome that says why there is none. */
  reserveDone(now: number, epoch: number, outcome: Outcome, floor = 0): void {
    this.emit(this.decideReserveDone(now, epoch, outcome, floor));
  }

  /** A grant waits for a client lease of `leaseMs` to be durable in the row: raise the row's largest lease. */
  raise(leaseMs: number): void {
    this.emit(this.decideRaise(leaseMs));
  }

  /** The answer to `raise` of term `epoch`: OK with the row's largest lease now, TAKEN (steps down), or FAILED. */
  raiseDone(now: number, epoch: number, outcome: Outcome, maxLeaseMs = 0): void {
    this.emit(this.decideRaiseDone(now, epoch, outcome, maxLeaseMs));
  }

  /**
   * A clean stop: release the row if active, publishing `held` (the names
   * held at the stop with their leases) and `reclaim` (the reclaimable
   * grants, whose holders will be told to reclaim; null: none).
   */
  stop(now: number, held: HeldSet = [], reclaim: ReadonlyMap<string, readonly ReclaimEntry[]> | null = null): void {
    this.emit(this.decideStop(now, held, reclaim));
  }

  /** The shell could not serve as active (e.g. the lock port is taken): give the term up at once. */
  abandon(now: number, reason: string): void {
    this.emit(this.decideAbandon(now, reason));
  }

  /** Carry the decisions out, in order, then arm the one timer. */
  private emit(actions: readonly RoleAction[]): void {
    const fx = this.fx;
    for (const a of actions) {
      switch (a.type) {
        case "read":
          fx.read();
          break;
        case "create":
          fx.create(a.floor);
          break;
        case "takeover":
          fx.takeover(a.watched);
          break;
        case "renew":
          fx.renew(a.epoch, a.sentAt, a.carryLeaseMs);
          break;
        case "raise":
          fx.raise(a.epoch, a.leaseMs);
          break;
        case "reserve":
          fx.reserve(a.epoch);
          break;
        case "activate":
          fx.activate(a);
          break;
        case "stepDown":
          fx.stepDown(a.epoch, a.reason);
          break;
        case "release":
          fx.release(a);
          break;
        default: {
          const never: never = a;
          throw new Error(`unknown action ${JSON.stringify(never)}`);
        }
      }
    }
    fx.arm(this.role === "stopped" ? Infinity : this.nextWake());
  }

  // --- decisions (pure: state and `now` in, actions out) -----------------------------------

  /** Start as a standby: read the row now. */
  private decideStart(now: number): RoleAction[] {
    this.role = "standby";
    this.nextReadAt = now;
    return this.decideTick(now);
  }

  /**
   * Time passed (a timer fired, or any other event): whatever is due now.
   * Call again at `nextWake()`.
   */
  private decideTick(now: number): RoleAction[] {
    const out: RoleAction[] = [];
    if (this.role === "active") {
      if (now >= this.deadline) {
        this.stepDown(now, `no renewal confirmed for ${STEP_DOWN_SHARE} x the coordinator lease`, out);
        return out;
      }
      // On schedule, even with an earlier one unanswered: a statement stuck on one
      // connection must not hold back the next (the shell bounds each in time).
      if (now >= this.nextRenewAt) {
        this.nextRenewAt = now + this.interval;
        out.push({ type: "renew", epoch: this.epoch, sentAt: now, carryLeaseMs: this.carriedAt(now) });
      }
      this.maybeReserve(now, out);
    } else if (this.role === "standby" && this.pending === null) {
      const w = this.watched;
      if (w !== null && now >= this.watchedSince + this.watchLeaseMs) {
        this.send("takeover", now);
        this.takeoverWhy = isReleased(w.holder) ? "released" : "expired";
        this.takeoverUnchangedMs = now - this.watchedSince;
        out.push({ type: "takeover", watched: w });
      } else if (now >= this.nextReadAt) {
        this.send("read", now);
        out.push({ type: "read" });
      }
    }
    return out;
  }

  /** When `tick` has something to do next (monotonic ms); Infinity when only an answer can move it. */
  nextWake(): number {
    if (this.role === "active") {
      let at = Math.min(this.deadline, this.nextRenewAt);
      if (this.wantsReserve()) at = Math.min(at, this.nextReserveAt);
      return at;
    }
    if (this.role !== "standby" || this.pending !== null) return Infinity;
    const takeoverAt = this.watched === null ? Infinity : this.watchedSince + this.watchLeaseMs;
    return Math.min(this.nextReadAt, takeoverAt);
  }

  /** The row as read; null when the service has no row yet. Null `row` with `failed`: no answer. */
  private decideReadDone(now: number, row: CoordinatorRow | null, failed = false): RoleAction[] {
    if (this.pending !== "read") return [];
    this.pending = null;
    this.nextReadAt = now + this.interval;
    if (this.role !== "standby") return [];
    if (failed) return this.decideTick(now);
    this.lastRoundTripMs = now - this.pendingSentAt;
    if (row === null ? this.epochSeen > 0 : row.epoch < this.epochSeen || row.tokenFloor < this.floorSeen) this.regressions++;
    this.refusal = row === null || this.refuse === null ? null : this.refuse(row.holder);
    if (row === null) {
      this.watched = null;
      this.send("create", now);
      return [{ type: "create", floor: Math.max(this.initialFloor, this.floorSeen) }];
    }
    this.floorSeen = Math.max(this.floorSeen, row.tokenFloor);
    this.epochSeen = Math.max(this.epochSeen, row.epoch);
    if (this.refusal !== null) {
      // Not ours to take: read again, and take it only once a read shows a row this instance may hold.
      this.watched = null;
      return this.decideTick(now);
    }
    const seen: Watched = { epoch: row.epoch, renewals: row.renewals, holder: row.holder };
    if (this.watchedRow === null || this.watchedRow.epoch !== row.epoch) this.watchedLeaseMax = 0;
    this.watchedLeaseMax = Math.max(this.watchedLeaseMax, row.maxLeaseMs ?? 0, row.carryLeaseMs);
    this.watchedRow = row;
    if (isReleased(row.holder)) {
      // Released by a clean stop: take over at once, by the same compare-and-set.
      this.watched = seen;
      this.send("takeover", now);
      this.takeoverWhy = "released";
      this.takeoverUnchangedMs = 0;
      return [{ type: "takeover", watched: seen }];
    }
    const w = this.watched;
    if (w === null || w.epoch !== seen.epoch || w.renewals !== seen.renewals || w.holder !== seen.holder) {
      this.watched = seen;
      this.watchedSince = now;
      this.watchLeaseMs = Math.max(this.leaseMs, row.leaseMs);
    }
    return this.decideTick(now);
  }

  /** The answer to `create`: the row as inserted, or null when another instance created it first (or no answer). */
  private decideCreateDone(now: number, row: CoordinatorRow | null): RoleAction[] {
    if (this.pending !== "create") return [];
    this.pending = null;
    if (row === null || this.role !== "standby") {
      this.nextReadAt = now;
      return this.decideTick(now);
    }
    return this.becomeActive(now, row, "created");
  }

  /** The answer to `takeover`: the row as updated, or null when it changed nothing (or no answer). */
  private decideTakeoverDone(now: number, row: CoordinatorRow | null): RoleAction[] {
    if (this.pending !== "takeover") return [];
    this.pending = null;
    this.watched = null;
    if (row === null || this.role !== "standby") {
      this.nextReadAt = now;
      return this.decideTick(now);
    }
    return this.becomeActive(now, row, this.takeoverWhy);
  }

  /** The answer to the renewal of term `epoch` sent at `sentAt`. */
  private decideRenewDone(now: number, epoch: number, sentAt: number, outcome: Outcome): RoleAction[] {
    if (this.role !== "active" || epoch !== this.epoch) return []; // an answer from an earlier term
    const out: RoleAction[] = [];
    if (outcome === Outcome.OK) {
      this.lastRoundTripMs = now - sentAt;
      if (sentAt > this.confirmedSentAt) this.confirmedSentAt = sentAt;
    } else if (outcome === Outcome.TAKEN) {
      this.stepDown(now, "a renewal found the coordinator row taken by another instance", out);
      return out;
    } else {
      this.renewalsFailed++;
    }
    out.push(...this.decideTick(now));
    return out;
  }

  /** The answer to `reserve` of term `epoch`: the row's new token floor, or the outcome that says why there is none. */
  private decideReserveDone(now: number, epoch: number, outcome: Outcome, floor = 0): RoleAction[] {
    if (this.role !== "active" || epoch !== this.epoch) return [];
    this.reserveInFlight = false;
    const out: RoleAction[] = [];
    if (outcome === Outcome.TAKEN) {
      this.stepDown(now, "a token reservation found the coordinator row taken by another instance", out);
      return out;
    }
    if (outcome === Outcome.OK && floor - this.block >= this.blockEnd) {
      // A reservation answered late may have skipped ahead; tokens may skip, never repeat.
      if (this.tokenLast >= this.blockEnd) {
        this.tokenLast = Math.max(floor - this.block, this.floorSeen);
        this.blockEnd = floor;
      } else {
        this.nextBlockEnd = floor;
      }
    } else if (outcome === Outcome.FAILED) {
      this.nextReserveAt = now + this.interval;
    }
    out.push(...this.decideTick(now));
    return out;
  }

  /**
   * A grant waits for a client lease of `leaseMs` to be durable in the row:
   * raise the row's largest lease (one statement; the shell holds the grant
   * back until `raiseDone`).
   */
  private decideRaise(leaseMs: number): RoleAction[] {
    if (this.role !== "active") return [];
    return [{ type: "raise", epoch: this.epoch, leaseMs }];
  }

  /** The answer to `raise` of term `epoch`: OK with the row's largest lease now, TAKEN (steps down), or FAILED. */
  private decideRaiseDone(now: number, epoch: number, outcome: Outcome, maxLeaseMs = 0): RoleAction[] {
    if (this.role !== "active" || epoch !== this.epoch) return [];
    const out: RoleAction[] = [];
    if (outcome === Outcome.TAKEN) {
      this.stepDown(now, "raising the largest lease found the coordinator row taken by another instance", out);
      return out;
    }
    if (outcome === Outcome.OK && maxLeaseMs > this.maxLeaseMs) this.maxLeaseMs = maxLeaseMs;
    return out;
  }

  /** The largest client lease this term holds durably in the row (ms). */
  get durableMaxLeaseMs(): number {
    return this.maxLeaseMs;
  }

  /**
   * A clean stop: release the row if active, publishing `held` (the names
   * held at the stop with their leases). The machine does nothing more.
   */
  private decideStop(now: number, held: HeldSet, reclaim: ReadonlyMap<string, readonly ReclaimEntry[]> | null): RoleAction[] {
    const wasActive = this.role === "active";
    this.role = "stopped";
    this.pending = null;
    return wasActive ? [this.release(now, held, reclaim)] : [];
  }

  /** The shell could not serve as active (e.g. the lock port is taken): give the term up at once. */
  private decideAbandon(now: number, reason: string): RoleAction[] {
    const out: RoleAction[] = [];
    if (this.role !== "active") return out;
    out.push(this.release(now, []));
    this.stepDown(now, reason, out);
    // Leave the released row to another standby for a lease, instead of taking it back at once.
    this.nextReadAt = now + this.leaseMs;
    return out;
  }

  // --- the hot path ---------------------------------------------------------------------

  /**
   * The check before every grant: active, inside its deadline, and a token
   * in hand. Reads only `now`.
   */
  mayGrant(now: number): boolean {
    return this.role === "active" && now < this.deadline && (this.tokenLast < this.blockEnd || this.nextBlockEnd > 0);
  }

  /** The next token (call only after `mayGrant` said yes). */
  nextToken(): number {
    if (this.tokenLast >= this.blockEnd) {
      this.tokenLast = this.nextBlockEnd - this.block;
      this.blockEnd = this.nextBlockEnd;
      this.nextBlockEnd = 0;
    }
    return ++this.tokenLast;
  }

  /** The last token issued in this term (0 before the first term). */
  get lastToken(): number {
    return this.tokenLast;
  }

  /** A reservation is due: half the block is used and none is in flight or in hand. */
  wantsReserve(): boolean {
    return this.role === "active" && !this.reserveInFlight && this.nextBlockEnd === 0 && this.blockEnd - this.tokenLast <= this.block / 2;
  }

  // --- helpers ------------------------------------------------------------------------------

  /** The release of this term: the names held, their largest lease, and the carried lease if this term's wait is not over. */
  private release(now: number, own: HeldSet, reclaim: ReadonlyMap<string, readonly ReclaimEntry[]> | null = null): RoleAction {
    const inherited = this.inherited;
    if (inherited !== null) {
      // The names this term still holds back for an earlier clean stop's holders: republished with their leases.
      let held: HeldSet = own;
      if (own !== "*") {
        const merged = new Map<string, number>(own);
        for (const [name, [lease, until]] of inherited) if (until > now && lease > (merged.get(name) ?? -1)) merged.set(name, lease);
        held = merged.size > MAX_PUBLISHED_NAMES ? "*" : [...merged];
      }
      if (held !== "*") {
        let maxLeaseMs = 0;
        for (const [, lease] of held) if (lease > maxLeaseMs) maxLeaseMs = lease;
        const carryLeaseMs = now < this.everyCarryUntil ? this.everyCarryLeaseMs : 0;
        return { type: "release", epoch: this.epoch, held, maxLeaseMs, carryLeaseMs, ...(reclaim === null ? {} : { reclaim }) };
      }
    }
    const held = own;
    let maxLeaseMs = this.maxLeaseMs;
    if (held !== "*") {
      maxLeaseMs = 0;
      for (const [, lease] of held) if (lease > maxLeaseMs) maxLeaseMs = lease;
    }
    return { type: "release", epoch: this.epoch, held, maxLeaseMs, carryLeaseMs: this.carriedAt(now), ...(reclaim === null ? {} : { reclaim }) };
  }

  /** The carried lease to write at `now`: the earlier epochs' until this term's wait is over, then 0. */
  private carriedAt(now: number): number {
    return now < this.carryUntil ? this.carryLeaseMs : 0;
  }

  /**
   * The lock-delay of a term that begins now (`why`), from the row as the
   * takeover left it (`row`) and the row as watched before it.
   */
  private termDelay(why: ActivationReason, row: CoordinatorRow): TermDelay {
    const watched = this.watchedRow;
    if (why === "created" || watched === null) return { everyNameMs: 0, names: [], unknown: false };
    if (why === "released") {
      // A clean stop: only its published names wait, each for its holder; plus what it still carried.
      const held = watched.held ?? "*";
      const carry = watched.carryLeaseMs;
      if (held === "*") {
        const largest = Math.max(watched.maxLeaseMs ?? 0, carry);
        return { everyNameMs: delayFor(largest), names: [], unknown: watched.maxLeaseMs === null && watched.held === null };
      }
      return { everyNameMs: delayFor(carry), names: held.map(([name, lease]) => [name, delayFor(lease)] as const), unknown: false };
    }
    // Expired: the old active's authority ended 0.8 x its lease after its last confirmed renewal, which was
    // sent before the first read that showed the watched values answered; the takeover waited watchLeaseMs after that.
    const largest = Math.max(row.carryLeaseMs, this.watchedLeaseMax);
    const gap = this.watchLeaseMs - STEP_DOWN_SHARE * watched.leaseMs;
    return { everyNameMs: delayFor(largest, gap), names: [], unknown: watched.maxLeaseMs === null };
  }

  private send(kind: Exclude<Pending, null>, now: number): void {
    this.pending = kind;
    this.pendingSentAt = now;
  }

  private maybeReserve(now: number, out: RoleAction[]): void {
    if (this.wantsReserve() && now >= this.nextReserveAt) {
      this.reserveInFlight = true;
      out.push({ type: "reserve", epoch: this.epoch });
    }
  }

  private becomeActive(now: number, row: CoordinatorRow, why: ActivationReason): RoleAction[] {
    this.role = "active";
    this.epoch = row.epoch;
    this.takeovers++;
    this.lastRoundTripMs = now - this.pendingSentAt;
    // The takeover (or creation) was a renewal: the lease runs from when it was sent.
    this.confirmedSentAt = this.pendingSentAt;
    this.nextRenewAt = this.pendingSentAt + this.interval;
    this.reserveInFlight = false;
    this.nextReserveAt = 0;
    // Normally the block starts at the floor last read. Never at or below a floor seen before:
    // if the row went back, this block may be empty and the next reservations walk up past it.
    this.tokenLast = Math.max(row.tokenFloor - this.block, this.floorSeen);
    this.blockEnd = row.tokenFloor;
    this.nextBlockEnd = 0;
    this.epochSeen = Math.max(this.epochSeen, row.epoch);
    const delay = this.termDelay(why, row);
    let longest = delay.everyNameMs;
    for (const [, ms] of delay.names) if (ms > longest) longest = ms;
    // Until this term's wait is over, the row carries what the earlier epochs' holders may rely on.
    this.carryLeaseMs = why === "created" ? 0 : Math.max(row.carryLeaseMs, this.watchedLeaseMax);
    this.carryUntil = longest > 0 ? now + longest : -Infinity;
    // After a clean stop with an exact set: what its own clean stop republishes (see `inherited`).
    this.inherited = null;
    this.everyCarryLeaseMs = 0;
    this.everyCarryUntil = -Infinity;
    const watchedHeld = this.watchedRow?.held ?? null;
    if (why === "released" && watchedHeld !== null && watchedHeld !== "*") {
      this.inherited = new Map(watchedHeld.filter(([, lease]) => delayFor(lease) > 0).map(([name, lease]) => [name, [lease, now + delayFor(lease)] as const]));
      this.everyCarryLeaseMs = this.watchedRow!.carryLeaseMs;
      this.everyCarryUntil = delay.everyNameMs > 0 ? now + delay.everyNameMs : -Infinity;
    }
    this.maxLeaseMs = row.maxLeaseMs ?? 0;
    const watchedReclaim = this.watchedRow?.reclaim;
    this.watchedRow = null;
    this.watchedLeaseMax = 0;
    const out: RoleAction[] = [
      {
        type: "activate",
        epoch: row.epoch,
        firstToken: this.tokenLast + 1,
        why,
        unchangedMs: why === "created" ? 0 : this.takeoverUnchangedMs,
        delay,
        maxLeaseMs: this.maxLeaseMs,
        reclaimMaxLeaseMs: row.reclaimMaxLeaseMs ?? 0,
        // Only a clean stop's set, read before the takeover (the takeover clears the column).
        reclaim: why === "released" ? (watchedReclaim ?? null) : null,
      },
    ];
    out.push(...this.decideTick(now));
    return out;
  }

  private stepDown(now: number, reason: string, out: RoleAction[]): void {
    this.role = "standby";
    this.stepDowns++;
    this.reserveInFlight = false;
    this.nextRenewAt = Infinity;
    this.confirmedSentAt = -Infinity;
    this.nextBlockEnd = 0;
    this.blockEnd = this.tokenLast; // nothing more to issue in this term
    this.floorSeen = Math.max(this.floorSeen, this.tokenLast);
    this.watched = null;
    this.pending = null;
    this.nextReadAt = now;
    out.push({ type: "stepDown", epoch: this.epoch, reason });
  }
}
