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

/** `Session.slot` of an exclusive claim (limit 1, not shared): no slot. */
export const NO_SLOT = -1;
/** `Session.slot` of a shared claim (limit 1): holds beside other shared claims. */
export const SHARED_CLAIM = -2;

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
  /**
   * The claim's kind and grant in one number, so a session keeps one field
   * for it: SHARED_CLAIM, NO_SLOT (exclusive, or a semaphore claim not yet
   * granted), or the slot 0 .. limit - 1 of a semaphore holder.
   */
  slot = NO_SLOT;

  // Links in the lock's FIFO queue while waiting, in its holder list while holding.
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

  get shared(): boolean {
    return this.slot === SHARED_CLAIM;
  }

  /** The moment this session must end unless something happens first. */
  deadline(): number {
    const lease = this.state === SessionState.CONNECTED ? Infinity : this.lastSeen + this.leaseMs;
    return Math.min(lease, this.readDeadline, this.writeDeadline);
  }
}

/**
 * A name with live sessions: its holders (oldest first) and its FIFO queue,
 * both lists threaded through the sessions' own queue links (a session is in
 * one of them at a time), so neither costs an allocation.
 *
 * Every session of a lock agrees on its `limit`: 1 is an exclusive lock (one
 * exclusive holder, or any number of shared ones), above 1 a semaphore of
 * that many permits, whose holders each have a slot: `slots` is the bitmap
 * of slots in use, allocated only for a semaphore.
 */
export class Lock<C = unknown> {
  /** Oldest holder (the owner of an exclusive lock), and the newest. */
  holdHead: Session<C> | null = null;
  holdTail: Session<C> | null = null;
  holders = 0;
  head: Session<C> | null = null;
  tail: Session<C> | null = null;
  waiting = 0;
  readonly slots: Uint32Array | null;

  constructor(
    readonly name: string,
    readonly limit: number = 1,
  ) {
    this.slots = limit > 1 ? new Uint32Array((limit + 31) >>> 5) : null;
  }

  /** The oldest holder, or null: the owner of an exclusive lock. */
  get owner(): Session<C> | null {
    return this.holdHead;
  }

  /** Whether the holders are shared claims (false when there are none). */
  get sharedHeld(): boolean {
    return this.holdHead !== null && this.holdHead.slot === SHARED_CLAIM;
  }

  /** Whether `session`'s claim could hold beside the current holders (queue order aside). */
  admits(session: Session<C>): boolean {
    if (this.holders === 0) return true;
    if (this.limit > 1) return this.holders < this.limit;
    return session.slot === SHARED_CLAIM && this.holdHead!.slot === SHARED_CLAIM;
  }

  /** A session that left the queue (or never joined it) becomes a holder: appended, so the list stays oldest first. */
  hold(session: Session<C>): void {
    session.queuePrev = this.holdTail;
    session.queueNext = null;
    if (this.holdTail !== null) this.holdTail.queueNext = session;
    else this.holdHead = session;
    this.holdTail = session;
    this.holders++;
    if (this.slots !== null) session.slot = takeSlot(this.slots);
  }

  /** O(1) removal of a holder; its slot (if any) is free again. */
  unhold(session: Session<C>): void {
    const prev = session.queuePrev;
    const next = session.queueNext;
    if (prev !== null) prev.queueNext = next;
    else this.holdHead = next;
    if (next !== null) next.queuePrev = prev;
    else this.holdTail = prev;
    session.queuePrev = null;
    session.queueNext = null;
    this.holders--;
    if (this.slots !== null && session.slot >= 0) this.slots[session.slot >>> 5]! &= ~(1 << (session.slot & 31));
  }

  /** Holders oldest first (for the ops view and tests; allocates). */
  holderList(): Session<C>[] {
    const out: Session<C>[] = [];
    for (let s = this.holdHead; s !== null; s = s.queueNext) out.push(s);
    return out;
  }

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

/** The lowest free slot of a bitmap with one free (the caller checked the count), marked used. */
function takeSlot(slots: Uint32Array): number {
  for (let w = 0; w < slots.length; w++) {
    const free = ~slots[w]!;
    if (free === 0) continue;
    const bit = 31 - Math.clz32(free & -free);
    slots[w] = slots[w]! | (1 << bit);
    return (w << 5) + bit;
  }
  throw new Error("takeSlot: no free slot (the holder count is wrong)");
}
