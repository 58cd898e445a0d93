/**
 * JSON views of locks and sessions for the ops server. Times are
 * milliseconds relative to `now` (the engine's clock is monotonic, so
 * absolute times would mean nothing outside the process); fencing tokens are
 * decimal strings, since a u64 does not fit a JSON number everywhere.
 */
import type { ShardIdentity } from "../shard/identity.ts";
import type { EngineView } from "../core/engine.ts";
import { type Lock, type Session, SessionState } from "../core/session.ts";
import type { Conn } from "../server/conn.ts";
import { peerOf } from "../net/peer.ts";

export interface SessionView {
  readonly session: number;
  readonly owner: string;
  /** Peer address as HOST:PORT ([HOST]:PORT for IPv6); "" once the socket is gone. */
  readonly remote: string;
  readonly leaseMs: number;
  /** Since the last complete frame from the session. */
  readonly silentForMs: number;
}

export interface HolderView extends SessionView {
  readonly token: string;
  readonly heldForMs: number;
}

export interface WaiterView extends SessionView {
  /** 1 is the head of the queue: the next owner. */
  readonly position: number;
  readonly waitingForMs: number;
}

export interface LockView {
  readonly name: string;
  readonly holder: HolderView | null;
  /** All waiters of the lock. */
  readonly waiting: number;
  /** The first waiters in queue order (at most the view's limit). */
  readonly waiters: WaiterView[];
}

export function remoteOf(conn: Conn): string {
  return peerOf(conn.socket);
}

const ms = (value: number): number => Math.max(0, Math.round(value));

function sessionView(session: Session<Conn>, now: number): SessionView {
  return {
    session: session.id,
    owner: session.owner,
    remote: remoteOf(session.conn),
    leaseMs: session.leaseMs,
    silentForMs: ms(now - session.lastSeen),
  };
}

export function holderView(session: Session<Conn>, now: number): HolderView {
  return { ...sessionView(session, now), token: String(session.token), heldForMs: ms(now - session.grantedAt) };
}

export function waiterView(session: Session<Conn>, position: number, now: number): WaiterView {
  return { ...sessionView(session, now), position, waitingForMs: ms(now - session.acquiredAt) };
}

/** A lock, its holder and its first `maxWaiters` waiters. */
export function lockView(lock: Lock<Conn>, now: number, maxWaiters: number): LockView {
  const waiters: WaiterView[] = [];
  let position = 0;
  for (let s = lock.head; s !== null && position < maxWaiters; s = s.queueNext) waiters.push(waiterView(s, ++position, now));
  return { name: lock.name, holder: lock.owner === null ? null : holderView(lock.owner, now), waiting: lock.waiting, waiters };
}

/** A waiting session's place in its queue (1 = head), 0 if it is not waiting. */
export function positionOf(session: Session<Conn>): number {
  if (session.state !== SessionState.WAITING || session.lock === null) return 0;
  let position = 0;
  for (let s = session.lock.head; s !== null; s = s.queueNext) {
    position++;
    if (s === session) return position;
  }
  return 0;
}

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
   * waiters, fewer once the page has shown PAGE_WAITERS of them (`waiting`
   * always counts all).
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

/** Waiters shown per lock in a page of the list, and over the whole page. */
const LOCK_WAITERS = 100;
const PAGE_WAITERS = 1000;

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

/**
 * The answer for the locks picked for a page, in name order (`more`: locks
 * after them were seen). A lock that has gone since it was picked is left
 * out, but the cursor still moves past it: every lock that exists from the
 * first page to the last is shown exactly once.
 */
export function locksPage(engine: EngineView<Conn>, picked: readonly Lock<Conn>[], more: boolean, now: number): LocksView {
  const locks: LockView[] = [];
  let budget = PAGE_WAITERS;
  for (const lock of picked) {
    if (engine.locks.get(lock.name) !== lock) continue;
    const view = lockView(lock, now, Math.min(LOCK_WAITERS, budget));
    budget -= view.waiters.length;
    locks.push(view);
  }
  const next = more && picked.length > 0 ? encodeCursor(picked[picked.length - 1]!.name) : null;
  return {
    locks,
    total: engine.locks.size,
    next,
    truncated: next !== null,
    sessions: sessionCounts(engine.stats.states),
  };
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

/**
 * One lock in the page's shared snapshot: its sort keys, times relative to
 * the snapshot's moment, and its holder, whose labels (session, owner,
 * address, token) are formatted only when the row is shown.
 */
export interface SnapshotRow extends RowKeys {
  readonly holder: Session<Conn> | null;
  /** The row as shown, once a view of the snapshot has shown it. */
  shown: LockRow | null;
}

/** One lock as the page lists it. */
export interface LockRow extends RowKeys {
  /** The holder's session, owner label, address and token; 0, "", "", "" when nobody holds it. */
  readonly session: number;
  readonly owner: string;
  readonly remote: string;
  readonly token: string;
}

export function snapshotRow(lock: Lock<Conn>, now: number): SnapshotRow {
  const owner = lock.owner;
  const head = lock.head;
  return {
    name: lock.name,
    holder: owner,
    heldForMs: owner === null ? -1 : ms(now - owner.grantedAt),
    waiting: lock.waiting,
    oldestWaitMs: head === null ? -1 : ms(now - head.acquiredAt),
    shown: null,
  };
}

/**
 * A snapshot's row as the page shows it, formatted the first time a view
 * shows it (the holder's address is read then) and the same in every later
 * view of that snapshot.
 */
export function shownRow(row: SnapshotRow): LockRow {
  if (row.shown !== null) return row.shown;
  const owner = row.holder;
  return (row.shown = {
    name: row.name,
    session: owner === null ? 0 : owner.id,
    owner: owner === null ? "" : owner.owner,
    remote: owner === null ? "" : remoteOf(owner.conn),
    token: owner === null ? "" : String(owner.token),
    heldForMs: row.heldForMs,
    waiting: row.waiting,
    oldestWaitMs: row.oldestWaitMs,
  });
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
