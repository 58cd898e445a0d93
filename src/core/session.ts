/**
 * Session and Lock: the two records of the engine.
 *
 * A session is one connection's one claim. It is also the node of every list
 * it sits in: its lock's FIFO queue and the timer wheel. So joining, leaving
 * and expiring are O(1) pointer moves and nothing is allocated per heartbeat.
 * All fields are set in the constructor so every session has one shape.
 */
import type { WheelEntry } from "./wheel.ts";

export const SessionState = {
  /** Accepted; ACQUIRE not yet received. */
  CONNECTED: 0,
  /** In its lock's queue. */
  WAITING: 1,
  /** Holds its lock. */
  OWNER: 2,
  /** Over; forgotten by the engine. Terminal. */
  ENDED: 3,
} as const;
export type SessionState = (typeof SessionState)[keyof typeof SessionState];

/** SessionState by name, as metrics and views label them. */
export const SESSION_STATE_NAMES = ["connected", "waiting", "owner", "ended"] as const;

/** The states of a live session (ENDED sessions are forgotten). */
export const LIVE_STATES = [SessionState.CONNECTED, SessionState.WAITING, SessionState.OWNER] as const;

/**
 * `Session.endReason` (and the index in `EngineStats.ends`) of a session
 * the peer closed; every other end reason is the ERROR code sent.
 */
export const CLOSED_BY_PEER = 0;

export class Session<C = unknown> implements WheelEntry {
  state: SessionState = SessionState.CONNECTED;
  lock: Lock<C> | null = null;
  /** Owner label from ACQUIRE (informational). */
  owner = "";
  leaseMs = 0;
  /** Monotonic ms of the last complete frame received. */
  lastSeen: number;
  /** A started frame (or, before ACQUIRE, the first frame) must be complete by then. */
  readDeadline: number;
  /** Unflushed output must drain by then. */
  writeDeadline = Infinity;
  /** Fencing token of the grant; 0 until granted. */
  token = 0;
  /**
   * Whether its ACQUIRE has been answered (WAITING or ACQUIRED with REPLY).
   * A grant held back only for the durable largest lease is answered late,
   * with the reply; every later grant is a push.
   */
  answered = false;
  /** ACQUIRED with REPLY set and this session's token: the answer to each of its heartbeats. */
  ackFrame: Uint8Array | null = null;
  /** When ACQUIRE was accepted, and when the lock was granted (monotonic ms). */
  acquiredAt = 0;
  grantedAt = 0;
  /** Why it ended: 0 closed by the peer, else the ERROR code sent. -1 while live. */
  endReason = -1;
  /** The source address it is counted under (only while a per-source limit is set), else null. */
  source: string | null = null;

  // Links in the lock's FIFO queue.
  queuePrev: Session<C> | null = null;
  queueNext: Session<C> | null = null;

  // Links in the timer wheel (see wheel.ts).
  wheelNext: WheelEntry | null = null;
  wheelPrev: WheelEntry | null = null;
  wheelSlot = -1;
  wheelTick = 0;

  constructor(
    readonly id: number,
    /** The shell's handle for this session's connection. */
    readonly conn: C,
    readonly openedAt: number,
    ioTimeoutMs: number,
  ) {
    this.lastSeen = openedAt;
    this.readDeadline = openedAt + ioTimeoutMs;
  }

  /** The moment this session must end unless something happens first. */
  deadline(): number {
    const lease = this.state === SessionState.CONNECTED ? Infinity : this.lastSeen + this.leaseMs;
    return Math.min(lease, this.readDeadline, this.writeDeadline);
  }
}

export class Lock<C = unknown> {
  owner: Session<C> | null = null;
  head: Session<C> | null = null;
  tail: Session<C> | null = null;
  waiting = 0;

  constructor(readonly name: string) {}

  enqueue(session: Session<C>): void {
    session.queuePrev = this.tail;
    session.queueNext = null;
    if (this.tail !== null) this.tail.queueNext = session;
    else this.head = session;
    this.tail = session;
    this.waiting++;
  }

  /** O(1) removal from anywhere in the queue. */
  unlink(session: Session<C>): void {
    const prev = session.queuePrev;
    const next = session.queueNext;
    if (prev !== null) prev.queueNext = next;
    else this.head = next;
    if (next !== null) next.queuePrev = prev;
    else this.tail = prev;
    session.queuePrev = null;
    session.queueNext = null;
    this.waiting--;
  }

  /** Waiters from head to tail (for the ops view and tests; allocates). */
  waiters(): Session<C>[] {
    const out: Session<C>[] = [];
    for (let s = this.head; s !== null; s = s.queueNext) out.push(s);
    return out;
  }
}
