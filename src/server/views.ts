/**
 * JSON views of locks and sessions for the ops server. Times are
 * milliseconds relative to `now` (the engine's clock is monotonic, so
 * absolute times would mean nothing outside the process); fencing tokens are
 * decimal strings, since a u64 does not fit a JSON number everywhere.
 */
import type { Engine } from "../core/engine.ts";
import { type Lock, type Session, SessionState } from "../core/session.ts";
import type { Conn } from "./conn.ts";

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
  const socket = conn.socket;
  const address = socket.remoteAddress ?? "";
  if (address === "") return "";
  const port = socket.remotePort;
  const host = address.includes(":") ? `[${address}]` : address;
  return port === undefined ? host : `${host}:${port}`;
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

export interface LocksView {
  /**
   * Locks with a holder or waiters: the `limit` oldest, sorted by name. The
   * ops server shares the event loop with the lock listener, so a view
   * never sorts or walks more than it returns (a million locks must not
   * stall a handover).
   */
  readonly locks: LockView[];
  /** All such locks, before the limit. */
  readonly total: number;
  readonly truncated: boolean;
  readonly sessions: { readonly connected: number; readonly waiting: number; readonly owner: number };
}

export function locksView(engine: Engine<Conn>, limit: number, maxWaiters: number, now: number): LocksView {
  const locks: LockView[] = [];
  for (const lock of engine.locks.values()) {
    if (locks.length >= limit) break;
    locks.push(lockView(lock, now, maxWaiters));
  }
  locks.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const states = engine.stats.states;
  const total = engine.locks.size;
  return {
    locks,
    total,
    truncated: total > locks.length,
    sessions: { connected: states[SessionState.CONNECTED]!, waiting: states[SessionState.WAITING]!, owner: states[SessionState.OWNER]! },
  };
}
