/**
 * The lock table as the ops room reads it (ops/sources.ts, LockSource):
 * views of an engine's locks and sessions, built here, where the engine's
 * nodes (Lock, Session and their queue links) are walked, so that the ops
 * room never sees them. Nothing here runs on a hot path: only ops requests,
 * /metrics scrapes, the /ui board's snapshots and the session log call it.
 */
import type { Engine } from "../core/engine.ts";
import { type Lock, type Session, SessionState, SHARED_CLAIM } from "../core/session.ts";
import { peerOf } from "../net/peer.ts";
import type {
  ForceReleased,
  HolderLabels,
  HolderView,
  HolderWalk,
  KickResult,
  LockCounters,
  LockMode,
  LockSource,
  LockView,
  QueueWalk,
  SessionView,
  TableRow,
  WaiterView,
} from "../ops/sources.ts";
import type { Conn } from "./conn.ts";

/** A session's peer as HOST:PORT ([HOST]:PORT for IPv6); "" once its socket is gone. */
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

function holderView(session: Session<Conn>, now: number): HolderView {
  return {
    ...sessionView(session, now),
    token: String(session.token),
    heldForMs: ms(now - session.grantedAt),
    slot: session.slot >= 0 ? session.slot : null,
    shared: session.slot === SHARED_CLAIM,
  };
}

function waiterView(session: Session<Conn>, position: number, now: number): WaiterView {
  return {
    ...sessionView(session, now),
    position,
    waitingForMs: ms(now - session.acquiredAt),
    shared: session.slot === SHARED_CLAIM,
    limit: session.lock?.limit ?? 1,
  };
}

/** What a lock is now (LockMode): a semaphore by its limit; with limit 1, shared when its holders (or, with none, its first waiter) are. */
export function modeOf(lock: Lock<Conn>): LockMode {
  if (lock.limit > 1) return "semaphore";
  const first = lock.holdHead ?? lock.head;
  return first !== null && first.slot === SHARED_CLAIM ? "shared" : "exclusive";
}

/** A lock, its first `maxHolders` holders (oldest first) and its first `maxWaiters` waiters. */
function lockView(lock: Lock<Conn>, now: number, maxWaiters: number, maxHolders: number): LockView {
  const holders: HolderView[] = [];
  for (let s = lock.holdHead; s !== null && holders.length < maxHolders; s = s.queueNext) holders.push(holderView(s, now));
  const waiters: WaiterView[] = [];
  let position = 0;
  for (let s = lock.head; s !== null && position < maxWaiters; s = s.queueNext) waiters.push(waiterView(s, ++position, now));
  const oldest = lock.holdHead;
  return {
    name: lock.name,
    limit: lock.limit,
    mode: modeOf(lock),
    holder: oldest === null ? null : (holders[0] ?? holderView(oldest, now)),
    holding: lock.holders,
    holders,
    waiting: lock.waiting,
    waiters,
  };
}

/** A waiting session's place in its queue (1 = head), 0 if it is not waiting. */
function positionOf(session: Session<Conn>): number {
  if (session.state !== SessionState.WAITING || session.lock === null) return 0;
  let position = 0;
  for (let s = session.lock.head; s !== null; s = s.queueNext) {
    position++;
    if (s === session) return position;
  }
  return 0;
}

/**
 * A walk of one of a lock's two lists (its queue, or its holders: both are
 * threaded through the sessions' queue links) that may span turns: before
 * each step it checks that the session it stands on is still in that list
 * (a session leaves the queue only by being granted, ending or being
 * kicked, and the holders only by ending, and never comes back: one
 * ACQUIRE per session), else it starts again at the list's first.
 */
abstract class ListWalk {
  /** The session stepped to (null before the first step and after the last). */
  protected at: Session<Conn> | null = null;
  private ended = false;
  restarted = false;

  constructor(
    protected readonly lock: Lock<Conn>,
    /** WAITING for the queue, OWNER for the holders. */
    private readonly state: SessionState,
  ) {}

  protected abstract first(): Session<Conn> | null;

  next(): boolean {
    if (this.ended) return false;
    const at = this.at;
    this.restarted = at !== null && !(at.state === this.state && at.lock === this.lock);
    const step = at === null || this.restarted ? this.first() : at.queueNext;
    this.at = step;
    this.ended = step === null;
    return step !== null;
  }

  get session(): number {
    return this.at?.id ?? 0;
  }
}

/** A walk of a lock's queue (QueueWalk). */
class Walk extends ListWalk implements QueueWalk {
  constructor(lock: Lock<Conn>) {
    super(lock, SessionState.WAITING);
  }

  protected first(): Session<Conn> | null {
    return this.lock.head;
  }

  get queuedAt(): number {
    return this.at?.acquiredAt ?? 0;
  }

  view(position: number, now: number): WaiterView {
    return waiterView(this.at!, position, now);
  }
}

/** A walk of a lock's holders, oldest first (HolderWalk). */
class Holders extends ListWalk implements HolderWalk {
  constructor(lock: Lock<Conn>) {
    super(lock, SessionState.OWNER);
  }

  protected first(): Session<Conn> | null {
    return this.lock.holdHead;
  }

  get token(): number {
    return this.at?.token ?? 0;
  }

  view(now: number): HolderView {
    return holderView(this.at!, now);
  }
}

/** One lock of a /ui snapshot: sort keys at the snapshot's moment, the holder then, its labels read once when shown. */
class Row implements TableRow {
  readonly name: string;
  readonly heldForMs: number;
  readonly waiting: number;
  readonly oldestWaitMs: number;
  readonly limit: number;
  readonly mode: LockMode;
  readonly holders: number;
  private owner: Session<Conn> | null;
  private labels: HolderLabels | null = null;

  constructor(lock: Lock<Conn>, now: number) {
    const owner = lock.owner;
    const head = lock.head;
    this.name = lock.name;
    this.owner = owner;
    this.heldForMs = owner === null ? -1 : ms(now - owner.grantedAt);
    this.waiting = lock.waiting;
    this.oldestWaitMs = head === null ? -1 : ms(now - head.acquiredAt);
    this.limit = lock.limit;
    this.mode = modeOf(lock);
    this.holders = lock.holders;
  }

  holder(): HolderLabels | null {
    const owner = this.owner;
    if (owner === null) return this.labels;
    // Formatted once, then the session is let go: every later view shows the same holder.
    this.labels = { session: owner.id, owner: owner.owner, remote: remoteOf(owner.conn), token: String(owner.token) };
    this.owner = null;
    return this.labels;
  }
}

/** What the lock server does beyond the engine for the two admin actions and the connection count. */
export interface LockShell {
  readonly connectionCount: number;
  /** End holder `session` of `name`, or its oldest (the server measures the handover); the ended session, or null. */
  forceRelease(name: string, now: number, session?: number): Session<Conn> | null;
  kick(id: number, now: number): Session<Conn> | null;
}

/** An engine without a shell (tests, benchmarks, a standby's idle engine): no connections, the engine's own actions. */
function bare(engine: Engine<Conn>): LockShell {
  return {
    connectionCount: 0,
    forceRelease: (name, now, session) => engine.forceRelease(name, now, session),
    kick: (id, now) => engine.kick(id, now),
  };
}

/** LockSource over an engine: the lock server's (server.ts) and a standby's idle one (failover/shell.ts). */
export class EngineLocks implements LockSource {
  private readonly shell: LockShell;

  constructor(
    private readonly engine: Engine<Conn>,
    shell?: LockShell,
  ) {
    this.shell = shell ?? bare(engine);
  }

  get counters(): LockCounters {
    return this.engine.stats;
  }

  get lockCount(): number {
    return this.engine.locks.size;
  }

  get connectionCount(): number {
    return this.shell.connectionCount;
  }

  get tokensLast(): number {
    return this.engine.tokens.last;
  }

  get maxSessions(): number {
    return this.engine.maxSessions;
  }

  get maxSessionsPerSource(): number {
    return this.engine.maxSessionsPerSource;
  }

  get sourceCount(): number {
    return this.engine.sources.size;
  }

  lockNames(): Iterator<string> {
    return this.engine.locks.keys();
  }

  lock(name: string, now: number, maxWaiters: number, maxHolders: number): LockView | null {
    const lock = this.engine.locks.get(name);
    return lock === undefined ? null : lockView(lock, now, maxWaiters, maxHolders);
  }

  holders(name: string): HolderWalk | null {
    const lock = this.engine.locks.get(name);
    return lock === undefined ? null : new Holders(lock);
  }

  holderOf(name: string, session: number, now: number): HolderView | null {
    const holder = this.holding(name, session);
    return holder === null ? null : holderView(holder, now);
  }

  /** Session `id` if it holds `name`, else null. */
  private holding(name: string, id: number): Session<Conn> | null {
    const session = this.engine.sessions.get(id);
    if (session === undefined || session.state !== SessionState.OWNER || session.lock === null || session.lock.name !== name) return null;
    return session.lock === this.engine.locks.get(name) ? session : null;
  }

  queue(name: string): QueueWalk | null {
    const lock = this.engine.locks.get(name);
    return lock === undefined ? null : new Walk(lock);
  }

  rows(now: number): Iterator<TableRow> {
    const locks = this.engine.locks.values();
    return {
      next(): IteratorResult<TableRow> {
        const step = locks.next();
        return step.done === true ? { done: true, value: undefined } : { done: false, value: new Row(step.value, now) };
      },
    };
  }

  forceRelease(name: string, now: number, session?: number): ForceReleased | null {
    const lock = this.engine.locks.get(name);
    if (lock === undefined) return null;
    const holder = session === undefined ? lock.owner : this.holding(name, session);
    if (holder === null) return null;
    const released = holderView(holder, now);
    // The queue grants from its head: if this release lets anyone in, the head now is the first.
    const head = lock.head;
    const stats = this.engine.stats;
    const before = stats.grantsPromoted + stats.grantsImmediate;
    this.shell.forceRelease(name, now, holder.id);
    const promotedCount = stats.grantsPromoted + stats.grantsImmediate - before;
    const promoted = head !== null && head.state === SessionState.OWNER && head.lock === lock ? holderView(head, performance.now()) : null;
    return { released, promoted, promotedCount, holding: lock.holders, waiting: lock.waiting };
  }

  kick(id: number, now: number, lock?: string): KickResult {
    const session = this.engine.sessions.get(id);
    if (session === undefined) return { refused: "unknown" };
    // The lock the caller named is not this session's: it is not the session meant (an id of another server?).
    if (lock !== undefined && session.state === SessionState.WAITING && session.lock!.name !== lock) return { refused: "elsewhere", lock: session.lock!.name };
    if (session.state === SessionState.OWNER) return { refused: "owner", lock: session.lock!.name };
    if (session.state !== SessionState.WAITING) return { refused: "connected" };
    const kicked = waiterView(session, positionOf(session), now);
    const waited = session.lock!.name;
    this.shell.kick(id, now);
    return { kicked, lock: waited };
  }
}
