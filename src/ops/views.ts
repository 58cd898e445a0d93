/**
 * The ops room's side of the lock views: a page of /v1/locks picked from a
 * lock source's names (a cursor, a bounded top-k), the /ui table's orders,
 * and the shard a server says it is. The views of one lock (holder,
 * waiters) are the lock source's (sources.ts), built where the engine's
 * nodes are (server/locks.ts).
 */
import type { ShardIdentity } from "../shard/identity.ts";
import { SessionState } from "../core/session.ts";
import type { HolderLabels, HolderView, HolderWalk, LockMode, LockSource, LockView, QueueWalk, RowKeys, WaiterView } from "./sources.ts";
import type { SliceQueue } from "./slices.ts";

export type { HolderView, LockMode, LockView, SessionView, WaiterView } from "./sources.ts";

/** Live sessions by state. */
export interface SessionCounts {
  readonly connected: number;
  readonly waiting: number;
  readonly owner: number;
}

/** Live sessions by state, from the engine's counters (EngineStats.states). */
export function sessionCounts(states: ArrayLike<number>): SessionCounts {
  return { connected: states[SessionState.CONNECTED]!, waiting: states[SessionState.WAITING]!, owner: states[SessionState.OWNER]! };
}

/**
 * Which shard of which map a server is, as its ops answers say it (/readyz
 * and every /v1/locks answer): `name` is null for a server that is not one
 * shard of several (started without --shard; `shards` is then empty).
 * Clients of the ops API (lockd status) check it against the map they were
 * given before trusting an answer.
 */
/** The `shard` field of /readyz, /v1/locks and the board: a ShardIdentity as JSON names it. */
export function shardViewOf(identity: ShardIdentity): ShardView {
  return { name: identity.shard, shards: identity.shard === null ? [] : [...identity.shards], generation: identity.generation };
}

export interface ShardView {
  readonly name: string | null;
  /** Every shard's name, in the order the server was given them. */
  readonly shards: readonly string[];
  /** The map's generation (the high bits of every token). */
  readonly generation: number;
}

export interface LocksView {
  /**
   * One page of the locks that have a holder or waiters, in name order:
   * the first `limit` names after the cursor. Each lock shows its first
   * LOCK_HOLDERS holders and LOCK_WAITERS waiters, fewer once the page has
   * shown PAGE_HOLDERS or PAGE_WAITERS of them (`holding` and `waiting`
   * always count all).
   */
  readonly locks: LockView[];
  /** All such locks now, over every page. */
  readonly total: number;
  /** The cursor of the next page (opaque), or null when this page is the last. */
  readonly next: string | null;
  /** More locks after this page (next is not null). */
  readonly truncated: boolean;
  readonly sessions: SessionCounts;
  /** The server's place in the shard map (absent from servers before it was added). */
  readonly shard?: ShardView;
}

/** Waiters and holders shown per lock in a page of the list, and over the whole page. */
export const LOCK_WAITERS = 100;
export const PAGE_WAITERS = 1000;
export const LOCK_HOLDERS = 100;
export const PAGE_HOLDERS = 1000;

/** The opaque cursor that resumes a listing after `name`: its UTF-8 bytes, base64url. */
function encodeCursor(name: string): string {
  return Buffer.from(name, "utf8").toString("base64url");
}

/** The name a cursor resumes after, or null if it is not a cursor this server gives. */
export function decodeCursor(cursor: string): string | null {
  if (!/^[A-Za-z0-9_-]{1,1024}$/.test(cursor)) return null;
  const name = Buffer.from(cursor, "base64url").toString("utf8");
  return name.length > 0 && encodeCursor(name) === cursor ? name : null;
}

/**
 * The first `limit` items in an order (a total one: ties broken, as by
 * name), picked from items offered one at a time in any order (a walk that
 * may span several turns of the event loop), with a count of the offers.
 * Memory is bounded by the limit: a buffer of at most 2 * limit, sorted and
 * cut back to `limit` when full; once it has been cut to `limit`, an item
 * that sorts after the last one kept is not even stored. Picking from n
 * items is O(n log limit).
 */
export class TopK<T> {
  private picked: T[] = [];
  /** The last item kept once the buffer holds `limit` (an item after it cannot make the cut). */
  private ceiling: T | null = null;
  /** Items offered so far: more than the items kept means some did not fit. */
  offered = 0;

  constructor(
    readonly limit: number,
    private readonly compare: (a: T, b: T) => number,
  ) {}

  offer(item: T): void {
    this.offered++;
    if (this.ceiling !== null && this.compare(item, this.ceiling) >= 0) return;
    this.picked.push(item);
    if (this.picked.length >= 2 * this.limit) this.cut();
  }

  private cut(): void {
    this.picked.sort(this.compare);
    if (this.picked.length > this.limit) this.picked.length = this.limit;
    if (this.picked.length === this.limit) this.ceiling = this.picked[this.limit - 1]!;
  }

  /** The chosen items, in order. */
  finish(): T[] {
    this.cut();
    return this.picked;
  }
}

/** Ascending by name (UTF-16 code units, as the cursor compares). */
export const byName = (a: { readonly name: string }, b: { readonly name: string }): number => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** Ascending (UTF-16 code units, as the cursor compares). */
export const ascending = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The answer for the names picked for a page, in name order (`more`: names
 * after them were seen). A lock that has gone since it was picked is left
 * out, but the cursor still moves past it: every lock that exists from the
 * first page to the last is shown exactly once.
 */
export function locksPage(source: LockSource, picked: readonly string[], more: boolean, now: number): LocksView {
  const locks: LockView[] = [];
  let budget = PAGE_WAITERS;
  let holders = PAGE_HOLDERS;
  for (const name of picked) {
    const view = source.lock(name, now, Math.min(LOCK_WAITERS, budget), Math.min(LOCK_HOLDERS, holders));
    if (view === null) continue;
    budget -= view.waiters.length;
    holders -= view.holders.length;
    locks.push(view);
  }
  const next = more && picked.length > 0 ? encodeCursor(picked[picked.length - 1]!) : null;
  return {
    locks,
    total: source.lockCount,
    next,
    truncated: next !== null,
    sessions: sessionCounts(source.counters.states),
  };
}

/** Where a page of a lock's waiters resumes: after this waiter (its session, and when it queued). */
export interface WaiterCursor {
  readonly session: number;
  readonly queuedAt: number;
}

/** The opaque cursor of a lock view's next page of waiters: `SESSION:QUEUEDAT`, base64url. */
export function encodeWaiterCursor(cursor: WaiterCursor): string {
  return Buffer.from(`${cursor.session}:${cursor.queuedAt}`, "latin1").toString("base64url");
}

/** The waiter a cursor resumes after, or null if it is not a cursor this server gives. */
export function decodeWaiterCursor(cursor: string): WaiterCursor | null {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(cursor)) return null;
  const match = /^([1-9]\d{0,15}):(\d{1,16}(?:\.\d{1,20})?)$/.exec(Buffer.from(cursor, "base64url").toString("latin1"));
  if (match === null) return null;
  const decoded = { session: Number(match[1]), queuedAt: Number(match[2]) };
  return encodeWaiterCursor(decoded) === cursor ? decoded : null;
}

/** A page of a lock's waiters, as a walk of its queue picked it. */
export interface WaitersPage {
  /** In queue order, `position` counted from the head as the walk went. */
  readonly waiters: WaiterView[];
  /** The cursor of the next page, or null when the walk reached the tail. */
  readonly next: string | null;
}

/** Times the walk of one page may begin again at the head (its waiter left) before it answers with what it has. */
const MAX_RESTARTS = 8;

/**
 * The waiters after `after` (null: from the head), at most `limit`, picked
 * by a walk of the queue through `slices` (a slice per turn, taking turns
 * with the other walks; never in the caller's turn). Each waiter picked is
 * viewed when the walk reaches it. A waiter that stays queued from the
 * first page to the last is shown once: waiters only join at the tail, and
 * the walk resumes right after the cursor's waiter while it is queued, or
 * (once it has left) at the first waiter that queued after it. Positions
 * are counted from the head as the walk goes: exact when the queue does not
 * change under a walk of several turns.
 */
export function waitersPage(slices: SliceQueue, walk: QueueWalk, after: WaiterCursor | null, limit: number, gone?: () => boolean): Promise<WaitersPage> {
  const waiters: WaiterView[] = [];
  // The waiter the walk must get past before it picks (seeking), and the last one picked (or the cursor's).
  let seeking = after !== null;
  let resumeSession = after?.session ?? 0;
  let resumeAt = after?.queuedAt ?? 0;
  let lastSession = resumeSession;
  let lastAt = resumeAt;
  let position = 0;
  let restarts = 0;
  let more = false;
  const steps: Iterator<null> = {
    next(): IteratorResult<null> {
      if (!walk.next()) return DONE;
      if (walk.restarted) {
        // The waiter stood on left: count again from the head, resuming after the last one seen.
        if (++restarts > MAX_RESTARTS) {
          more = true;
          return DONE;
        }
        position = 0;
        seeking = lastSession !== 0;
        resumeSession = lastSession;
        resumeAt = lastAt;
      }
      position++;
      if (seeking) {
        const at = walk.queuedAt;
        // Before the resume point, or at it (`queuedAt` never decreases from head to tail).
        if (at < resumeAt) return STEP;
        if (at === resumeAt) {
          if (walk.session === resumeSession) seeking = false;
          return STEP;
        }
        seeking = false;
      }
      if (waiters.length === limit) {
        more = true;
        return DONE;
      }
      waiters.push(walk.view(position, performance.now()));
      lastSession = walk.session;
      lastAt = walk.queuedAt;
      return STEP;
    },
  };
  return slices.walk(steps, () => {}, gone).then(() => ({
    waiters,
    next: more && lastSession !== 0 ? encodeWaiterCursor({ session: lastSession, queuedAt: lastAt }) : null,
  }));
}

/** Where a page of a lock's holders resumes: after this holder (its session, and its token). */
export interface HolderCursor {
  readonly session: number;
  readonly token: number;
}

/** The opaque cursor of a lock view's next page of holders: `hSESSION:TOKEN`, base64url. */
export function encodeHolderCursor(cursor: HolderCursor): string {
  return Buffer.from(`h${cursor.session}:${cursor.token}`, "latin1").toString("base64url");
}

/** The holder a cursor resumes after, or null if it is not a holder cursor this server gives. */
export function decodeHolderCursor(cursor: string): HolderCursor | null {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(cursor)) return null;
  const match = /^h([1-9]\d{0,15}):([1-9]\d{0,15})$/.exec(Buffer.from(cursor, "base64url").toString("latin1"));
  if (match === null) return null;
  const decoded = { session: Number(match[1]), token: Number(match[2]) };
  if (!Number.isSafeInteger(decoded.session) || !Number.isSafeInteger(decoded.token)) return null;
  return encodeHolderCursor(decoded) === cursor ? decoded : null;
}

/** A page of a lock's holders, as a walk of them picked it. */
export interface HoldersPage {
  /** Oldest first. */
  readonly holders: HolderView[];
  /** The cursor of the next page, or null when the walk reached the newest holder. */
  readonly next: string | null;
}

/**
 * The holders after `after` (null: from the oldest), at most `limit`,
 * picked by a walk of them through `slices` (a slice per turn, taking
 * turns with the other walks; never in the caller's turn). Holders are
 * kept in grant order and every grant's token is above every earlier one,
 * so tokens rise along the walk: the page resumes at the first holder whose
 * token is above the cursor's, and a walk that must begin again at the
 * oldest (the holder it stood on ended) skips what it has shown by token.
 * A holder that holds from the first page to the last is shown once.
 */
export function holdersPage(slices: SliceQueue, walk: HolderWalk, after: HolderCursor | null, limit: number, gone?: () => boolean): Promise<HoldersPage> {
  const holders: HolderView[] = [];
  let lastSession = after?.session ?? 0;
  let lastToken = after?.token ?? 0;
  let restarts = 0;
  let more = false;
  const steps: Iterator<null> = {
    next(): IteratorResult<null> {
      if (!walk.next()) return DONE;
      if (walk.restarted && ++restarts > MAX_RESTARTS) {
        more = true;
        return DONE;
      }
      // Shown already, or at or before the cursor.
      if (walk.token <= lastToken) return STEP;
      if (holders.length === limit) {
        more = true;
        return DONE;
      }
      holders.push(walk.view(performance.now()));
      lastSession = walk.session;
      lastToken = walk.token;
      return STEP;
    },
  };
  return slices.walk(steps, () => {}, gone).then(() => ({
    holders,
    next: more && lastSession !== 0 ? encodeHolderCursor({ session: lastSession, token: lastToken }) : null,
  }));
}

/**
 * The session of the holder whose token is `token`, found by a walk of the
 * holders through `slices` (it stops at the first token at or above it:
 * they rise along the walk); 0 when none holds with it. What is found is a
 * candidate: the caller checks it again in the turn it acts.
 */
export function holderWithToken(slices: SliceQueue, walk: HolderWalk, token: number): Promise<number> {
  let found = 0;
  let restarts = 0;
  const steps: Iterator<null> = {
    next(): IteratorResult<null> {
      if (!walk.next()) return DONE;
      if (walk.restarted && ++restarts > MAX_RESTARTS) return DONE;
      if (walk.token < token) return STEP;
      if (walk.token === token) found = walk.session;
      return DONE;
    },
  };
  return slices.walk(steps, () => {}).then(() => found);
}

const DONE: IteratorResult<null> = { done: true, value: undefined };
const STEP: IteratorResult<null> = { done: false, value: null };

/** One lock as the page lists it. */
export interface LockRow extends RowKeys {
  /** The lock's limit, mode and holder count. */
  readonly limit: number;
  readonly mode: LockMode;
  readonly holders: number;
  /** The oldest holder's session, owner label, address and token; 0, "", "", "" when nobody holds it. */
  readonly session: number;
  readonly owner: string;
  readonly remote: string;
  readonly token: string;
}

/** A snapshot row as the page shows it: the same holder in every view of that snapshot (the source's row reads it once). */
export function shownRow(row: RowKeys & { readonly limit: number; readonly mode: LockMode; readonly holders: number; holder(): HolderLabels | null }): LockRow {
  const holder = row.holder();
  return {
    name: row.name,
    limit: row.limit,
    mode: row.mode,
    holders: row.holders,
    session: holder === null ? 0 : holder.session,
    owner: holder === null ? "" : holder.owner,
    remote: holder === null ? "" : holder.remote,
    token: holder === null ? "" : holder.token,
    heldForMs: row.heldForMs,
    waiting: row.waiting,
    oldestWaitMs: row.oldestWaitMs,
  };
}

/** The orders the page's table offers. Ties go by name. */
export const RowOrder = { name: "name", held: "held", waiting: "waiting", wait: "wait" } as const;
export type RowOrder = (typeof RowOrder)[keyof typeof RowOrder];

const rowKey: Record<RowOrder, (row: RowKeys) => number> = {
  name: () => 0,
  held: (row) => row.heldForMs,
  waiting: (row) => row.waiting,
  wait: (row) => row.oldestWaitMs,
};

/** A comparator for `order`, descending when `descending` (the name tie-break stays ascending). */
export function rowComparator(order: RowOrder, descending: boolean): (a: RowKeys, b: RowKeys) => number {
  const key = rowKey[order];
  const sign = descending ? -1 : 1;
  return (a, b) => {
    const d = order === "name" ? 0 : key(a) - key(b);
    if (d !== 0) return sign * d;
    return order === "name" ? sign * byName(a, b) : byName(a, b);
  };
}
