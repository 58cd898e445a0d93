/**
 * JSON views of locks and sessions for the ops server. Times are
 * milliseconds relative to `now` (the engine's clock is monotonic, so
 * absolute times would mean nothing outside the process); fencing tokens are
 * decimal strings, since a u64 does not fit a JSON number everywhere.
 */
import type { EngineView } from "../core/engine.ts";
import { type Lock, type Session, SessionState } from "../core/session.ts";
import type { Conn } from "./conn.ts";
import { peerOf } from "./peer.ts";

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
 * The `limit` smallest lock names after a cursor, picked from locks offered
 * one at a time in any order (a walk of the engine's Map that may span
 * several turns of the event loop). Memory and work per lock are bounded by
 * the limit: a buffer of at most 2 * limit, sorted and cut back to `limit`
 * when full.
 */
export class PageSelection {
  private picked: Lock<Conn>[] = [];
  /** The largest name kept once the buffer holds `limit` (a name above it cannot make the page). */
  private ceiling: string | null = null;
  /** Locks after the cursor seen so far: more than `limit` means another page follows. */
  private candidates = 0;

  constructor(
    readonly after: string | null,
    readonly limit: number,
  ) {}

  offer(lock: Lock<Conn>): void {
    const name = lock.name;
    if (this.after !== null && name <= this.after) return;
    this.candidates++;
    if (this.ceiling !== null && name >= this.ceiling) return;
    this.picked.push(lock);
    if (this.picked.length >= 2 * this.limit) this.cut();
  }

  private cut(): void {
    this.picked.sort(byName);
    if (this.picked.length > this.limit) this.picked.length = this.limit;
    if (this.picked.length === this.limit) this.ceiling = this.picked[this.limit - 1]!.name;
  }

  /** The page, in name order, and whether locks after it were seen. */
  finish(): { locks: Lock<Conn>[]; more: boolean } {
    this.cut();
    return { locks: this.picked, more: this.candidates > this.picked.length };
  }
}

const byName = (a: Lock<Conn>, b: Lock<Conn>): number => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/**
 * The answer for a finished selection. A lock that has gone since it was
 * picked is left out, but the cursor still moves past it: every lock that
 * exists from the first page to the last is shown exactly once.
 */
export function locksPage(engine: EngineView<Conn>, selection: PageSelection, now: number): LocksView {
  const { locks: picked, more } = selection.finish();
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

/**
 * One lock as the operator's page (/ui) lists it: what the shared
 * snapshot keeps per lock, times relative to the snapshot's moment.
 */
export interface LockRow {
  readonly name: string;
  /** The holder's session, owner label, address and token; 0, "", "", "" when nobody holds it. */
  readonly session: number;
  readonly owner: string;
  readonly remote: string;
  readonly token: string;
  /** -1 when nobody holds it. */
  readonly heldForMs: number;
  readonly waiting: number;
  /** How long the head of the queue has waited (the oldest wait, FIFO); -1 with no waiters. */
  readonly oldestWaitMs: number;
}

export function lockRow(lock: Lock<Conn>, now: number): LockRow {
  const owner = lock.owner;
  const head = lock.head;
  return {
    name: lock.name,
    session: owner === null ? 0 : owner.id,
    owner: owner === null ? "" : owner.owner,
    remote: owner === null ? "" : remoteOf(owner.conn),
    token: owner === null ? "" : String(owner.token),
    heldForMs: owner === null ? -1 : ms(now - owner.grantedAt),
    waiting: lock.waiting,
    oldestWaitMs: head === null ? -1 : ms(now - head.acquiredAt),
  };
}

/** The orders the page's table offers. Ties go by name. */
export const RowOrder = { name: "name", held: "held", waiting: "waiting", wait: "wait" } as const;
export type RowOrder = (typeof RowOrder)[keyof typeof RowOrder];

const rowKey: Record<RowOrder, (row: LockRow) => number> = {
  name: () => 0,
  held: (row) => row.heldForMs,
  waiting: (row) => row.waiting,
  wait: (row) => row.oldestWaitMs,
};

/** A comparator for `order`, descending when `descending` (the name tie-break stays ascending). */
export function rowComparator(order: RowOrder, descending: boolean): (a: LockRow, b: LockRow) => number {
  const key = rowKey[order];
  const sign = descending ? -1 : 1;
  return (a, b) => {
    const d = order === "name" ? 0 : key(a) - key(b);
    if (d !== 0) return sign * d;
    const byName = a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    return order === "name" ? sign * byName : byName;
  };
}

/**
 * The first `limit` rows in an order, picked from rows offered one at a
 * time, with exact counts of what was offered and what matched a name
 * prefix. Memory is bounded by the limit (a buffer of at most 2 * limit,
 * sorted and cut back when full), so picking from n rows is O(n log limit).
 */
export class RowSelection {
  private picked: LockRow[] = [];
  /** Rows whose name starts with the prefix. */
  matched = 0;

  constructor(
    readonly prefix: string,
    readonly limit: number,
    private readonly compare: (a: LockRow, b: LockRow) => number,
  ) {}

  offer(row: LockRow): void {
    if (!row.name.startsWith(this.prefix)) return;
    this.matched++;
    this.picked.push(row);
    if (this.picked.length >= 2 * this.limit) this.cut();
  }

  private cut(): void {
    this.picked.sort(this.compare);
    if (this.picked.length > this.limit) this.picked.length = this.limit;
  }

  /** The chosen rows, in order. */
  finish(): LockRow[] {
    this.cut();
    return this.picked;
  }
}
