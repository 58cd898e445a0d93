/**
 * What the ops room reads, and the only ways it acts: a lock source (the
 * lock server's table as views, its counters, the two admin actions) and a
 * role source (the failover shell's role, with --coordinator). The ops
 * server, /metrics and the /ui board take these and nothing else: never
 * the engine's nodes (Lock, Session, their queue links) or the server
 * object. src/server implements LockSource (EngineLocks, server/locks.ts),
 * src/failover/shell.ts implements RoleSource, and src/server/daemon.ts is
 * the only place that wires them to the ops server.
 *
 * Times are milliseconds relative to the `now` a call is given (the
 * engine's clock is monotonic, so absolute times would mean nothing outside
 * the process); fencing tokens are decimal strings, since a u64 does not
 * fit a JSON number everywhere.
 */

import type { DelayView } from "../core/delay.ts";

/** A session as the lock views show it. */
export interface SessionView {
  readonly session: number;
  readonly owner: string;
  /** Peer address as HOST:PORT ([HOST]:PORT for IPv6); "" once the socket is gone. */
  readonly remote: string;
  readonly leaseMs: number;
  /** Since the last complete frame from the session. */
  readonly silentForMs: number;
}

/**
 * What a lock is now: "semaphore" when its limit is above 1; with limit 1,
 * "shared" when its holders are shared claims (or, with none, its first
 * waiter is one), else "exclusive".
 */
export type LockMode = "exclusive" | "shared" | "semaphore";

export interface HolderView extends SessionView {
  readonly token: string;
  readonly heldForMs: number;
  /** A semaphore holder's slot (0 .. limit - 1); null for an exclusive or shared holder. */
  readonly slot: number | null;
  /** A shared (read) holder. */
  readonly shared: boolean;
}

export interface WaiterView extends SessionView {
  /** 1 is the head of the queue: the next owner. */
  readonly position: number;
  readonly waitingForMs: number;
  /** Its claim: shared, or not; and its limit (1: exclusive or shared; above 1: a semaphore's, the lock's). */
  readonly shared: boolean;
  readonly limit: number;
}

export interface LockView {
  readonly name: string;
  /** The limit every session of the name claims it with (1: an exclusive or shared lock). */
  readonly limit: number;
  readonly mode: LockMode;
  /** The oldest holder (the owner of an exclusive lock), or null: the first of `holders`. */
  readonly holder: HolderView | null;
  /** All holders of the lock. */
  readonly holding: number;
  /** The first holders, oldest first (at most the view's limit of holders). */
  readonly holders: HolderView[];
  /** All waiters of the lock. */
  readonly waiting: number;
  /** The first waiters in queue order (at most the view's limit). */
  readonly waiters: WaiterView[];
}

/**
 * A walk of one lock's queue from its head, one waiter per `next()`, for a
 * page of its waiters (a lock view: ops/views.ts). It is live and may span
 * turns of the event loop: waiters that join meanwhile are reached at the
 * tail; if the waiter it stands on leaves the queue between two steps, the
 * next step begins again at the head and sets `restarted`. Allocates nothing
 * per step.
 */
export interface QueueWalk {
  /** Step to the next waiter; false at the end of the queue (at once if the lock has gone). */
  next(): boolean;
  /** Whether the last step began again at the head (the waiter stood on had left). */
  readonly restarted: boolean;
  /** The waiter stepped to: its session id. */
  readonly session: number;
  /** When it queued, in ms on the source's clock: never decreasing from head to tail. */
  readonly queuedAt: number;
  /** The waiter stepped to as the lock views show it, at `position`, times relative to `now`. */
  view(position: number, now: number): WaiterView;
}

/**
 * A walk of one lock's holders from the oldest, one per `next()`, for a
 * page of them (a lock view, and finding a holder by its token). Like a
 * QueueWalk it is live and may span turns: holders granted meanwhile are
 * reached at the end (they are appended in grant order, so tokens rise from
 * the oldest holder to the newest); if the holder it stands on has ended
 * between two steps, the next step begins again at the oldest and sets
 * `restarted`. Allocates nothing per step.
 */
export interface HolderWalk {
  /** Step to the next holder; false after the newest (at once if the lock has gone). */
  next(): boolean;
  /** Whether the last step began again at the oldest holder (the one stood on had ended). */
  readonly restarted: boolean;
  /** The holder stepped to: its session id. */
  readonly session: number;
  /** Its fencing token: strictly rising from the oldest holder to the newest. */
  readonly token: number;
  /** The holder stepped to as the lock views show it, times relative to `now`. */
  view(now: number): HolderView;
}

/** What the operator's page (/ui) sorts its table by. */
export interface RowKeys {
  readonly name: string;
  /** -1 when nobody holds it. */
  readonly heldForMs: number;
  readonly waiting: number;
  /** How long the head of the queue has waited (the oldest wait, FIFO); -1 with no waiters. */
  readonly oldestWaitMs: number;
}

/** A holder's labels as the page's table shows them. */
export interface HolderLabels {
  readonly session: number;
  readonly owner: string;
  readonly remote: string;
  readonly token: string;
}

/**
 * One lock at one moment (a row of the /ui snapshot): its sort keys, times
 * relative to that moment, and its holder then, whose labels are read the
 * first time they are asked for (the holder's address is a socket read)
 * and are the same every later time.
 */
export interface TableRow extends RowKeys {
  /** The lock's limit, mode and holder count at that moment. */
  readonly limit: number;
  readonly mode: LockMode;
  readonly holders: number;
  /** The oldest holder's labels. */
  holder(): HolderLabels | null;
}

/** A histogram as its counts stand: fixed upper bounds (seconds), a count per bucket, the last for +Inf. */
export interface HistogramCounts {
  readonly bounds: readonly number[];
  readonly counts: ArrayLike<number>;
  readonly sum: number;
  readonly count: number;
}

/**
 * The lock server's counters (kept on its hot paths as plain numbers:
 * core/stats.ts), read by /metrics and the /ui board.
 */
export interface LockCounters {
  /** Live sessions by SessionState (core/session.ts). */
  readonly states: ArrayLike<number>;
  /** Ended sessions by reason: index 0 closed by the peer, else the ERROR code sent. */
  readonly ends: ArrayLike<number>;
  readonly opened: number;
  readonly grantsImmediate: number;
  readonly grantsPromoted: number;
  readonly queued: number;
  readonly heartbeats: number;
  readonly delayed: number;
  /** Reclaims granted, and refused with RECLAIM_REFUSED (protocol.md section 14). */
  readonly reclaims: number;
  readonly reclaimsRefused: number;
  readonly refusedSessionLimit: number;
  readonly refusedSourceLimit: number;
  readonly pipeliningCuts: number;
  readonly outboxCuts: number;
  /** Locks with at least one holder. */
  readonly heldLocks: number;
  /** Live holders and waiters by claim kind (core/stats.ts ClaimKind: exclusive, shared, semaphore). */
  readonly holdersByKind: ArrayLike<number>;
  readonly waitersByKind: ArrayLike<number>;
  readonly handoverSeconds: HistogramCounts;
  readonly waitSeconds: HistogramCounts;
  readonly holdSeconds: HistogramCounts;
}

/** A kick asked of a lock source: done, or why not. */
export type KickResult =
  | { readonly kicked: WaiterView; readonly lock: string }
  /** No live session has that id. */
  | { readonly refused: "unknown" }
  /** It holds `lock` (force-release is the action for that). */
  | { readonly refused: "owner"; readonly lock: string }
  /** It has not sent ACQUIRE yet. */
  | { readonly refused: "connected" }
  /** It waits for another lock than the one the kick named (nothing was done). */
  | { readonly refused: "elsewhere"; readonly lock: string };

/**
 * A force-release done: the holder ended, and the first waiter it let in
 * (null: none was granted), with the count of waiters granted by it (a
 * shared batch may be several; 0 or 1 otherwise).
 */
export interface ForceReleased {
  readonly released: HolderView;
  readonly promoted: HolderView | null;
  readonly promotedCount: number;
  /** The lock's holders and waiters just after (0 and 0: it is free). */
  readonly holding: number;
  readonly waiting: number;
}

/**
 * A lock table and its counters, read-only, and the two admin actions. With
 * --coordinator each active term has a source of its own, counting from
 * zero: a caller that compares readings over time keeps the source it read
 * (the `counters` object is the same for as long as the source is).
 */
export interface LockSource {
  readonly counters: LockCounters;
  /** Locks with a holder or waiters now. */
  readonly lockCount: number;
  /** Open connections of the lock listener. */
  readonly connectionCount: number;
  /** The last fencing token issued (0 before the first grant). */
  readonly tokensLast: number;
  /** The session limit (Infinity: none). */
  readonly maxSessions: number;
  /** The per-source session limit (Infinity: none). */
  readonly maxSessionsPerSource: number;
  /** Peer addresses with a live session (counted only while a per-source limit is set). */
  readonly sourceCount: number;
  /**
   * The names of the locks, live: a name removed before the walk reaches
   * it is skipped, one added meanwhile may be seen; a name there from
   * start to end is seen once. Allocates nothing per name.
   */
  lockNames(): Iterator<string>;
  /** One lock with its first `maxHolders` holders and first `maxWaiters` waiters; null when nobody holds or waits for it. */
  lock(name: string, now: number, maxWaiters: number, maxHolders: number): LockView | null;
  /** A walk of the queue of `name` (QueueWalk); null when nobody holds or waits for it. O(1): nothing is built. */
  queue(name: string): QueueWalk | null;
  /** A walk of the holders of `name` (HolderWalk); null when nobody holds or waits for it. O(1): nothing is built. */
  holders(name: string): HolderWalk | null;
  /** Session `session` as a holder of `name`, or null when it does not hold `name`. O(1). */
  holderOf(name: string, session: number, now: number): HolderView | null;
  /** The table's rows at `now`, live as lockNames: a row per lock (the /ui snapshot). */
  rows(now: number): Iterator<TableRow>;
  /**
   * End a holder of `name` with FORCE_RELEASED: session `session` when
   * given (null unless it holds `name`), else the oldest holder; the
   * waiters that fit then are granted. Null when nobody (or not that
   * session) holds it.
   */
  forceRelease(name: string, now: number, session?: number): ForceReleased | null;
  /**
   * End waiting session `id` with KICKED; the others keep their order. With
   * `lock`, only if that is the lock it waits for ("elsewhere" otherwise).
   */
  kick(id: number, now: number, lock?: string): KickResult;
}

/**
 * What the ops server shows about roles, with --coordinator. Display
 * only: the role machine decides on its own state (failover/machine.ts),
 * never on this.
 */
export interface RoleView {
  readonly role: "standby" | "active" | "stopped";
  /**
   * The service's epoch: the active's, its term's; a standby's (or a stopped
   * instance's), the row's as this instance last read it (its own last term's
   * before any read; 0 when the service has no row yet).
   */
  readonly epoch: number;
  readonly service: string;
  readonly instance: string;
  /**
   * The instance id of the service's active as this instance last saw it
   * (without the map tag): its own when active; null when the row was
   * released or absent at the last read, or not read yet.
   */
  readonly active: string | null;
  /**
   * The ops address (HOST:PORT) the service's active advertises in the row
   * (`ops=`, failover/holder.ts), where its /readyz and /ui answer: its own
   * advertised address when active; null when unknown (no active, or an
   * active that advertises none: an older lockd, or a wildcard --ops
   * without --advertise-ops).
   */
  readonly activeOps: string | null;
  /** A standby that refuses to take over its service's row: why (the maps differ); absent otherwise. */
  readonly refusal?: string;
  /**
   * The coordinator server in use (or last used) and what it said about its
   * replication when this instance connected to it; null before the first
   * connection; absent on a store without servers (a model in tests).
   */
  readonly coordinator?: CoordinatorServerView | null;
}

/** How a coordinator replicates, as the server reported it (src/failover/replication.ts decides). */
export type ReplicationModeView = "synchronous" | "asynchronous" | "none" | "unknown";

/** The coordinator server an instance uses, as the ops answers show it. */
export interface CoordinatorServerView {
  /** host:port (or the socket directory:port). */
  readonly server: string;
  readonly replication: { readonly mode: ReplicationModeView };
}

/** Coordinator figures for /metrics. */
export interface CoordinatorMetrics extends RoleView {
  readonly roundTripSeconds: number;
  readonly renewalsFailed: number;
  readonly stepDowns: number;
  readonly takeovers: number;
  readonly leaseSeconds: number;
}

/** The instance's role and the coordinator's figures (failover/shell.ts). */
export interface RoleSource {
  view(): RoleView;
  metrics(): CoordinatorMetrics;
}

/**
 * A reclaim grace as it stands (protocol.md section 14): after a clean stop
 * that published its reclaimable grants, until the last published name
 * stops being held back. Part of the lock-delay's view (`reclaim`).
 */
export interface GraceView {
  /** ms until the last published name stops being held back (the grace's end). */
  readonly remainingMs: number;
  /** Grants the last clean stop published. */
  readonly published: number;
  /** Of those, reclaimed so far (each counted once). */
  readonly reclaimed: number;
  /** Names with a published grant not reclaimed yet: the first few, in the record's order. */
  readonly unclaimedNames: readonly string[];
  /** How many names have a published grant not reclaimed yet (`unclaimedNames` shows the first few). */
  readonly unclaimedNameCount: number;
}

/** The lock-delay as /readyz, /metrics, `lockd status` and the page see it: with the reclaim grace while one runs. */
export type LockDelayView = DelayView & { readonly reclaim?: GraceView };
