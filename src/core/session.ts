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
 * that many permits, whose holders each have a slot.
 *
 * The layout is for memory: a server may keep a million locks, almost all
 * exclusive with one holder. So a Lock has six fields (name, the oldest
 * holder, the queue's head and tail, its length, and `more`), which JSC
 * keeps in a 64-byte cell, as it did the five of a lock before semaphores;
 * nine fields took a 112-byte one. What only a semaphore or a shared lock
 * needs (the limit, the slot bitmap, the newest holder, a holder count that
 * can exceed 1) is in `more`, a LockMore made when the lock is a semaphore
 * (at its creation) or when it first gets a second holder or a shared one
 * (`widen`), and kept while the lock lives. While `more` is null the lock
 * has limit 1 and at most one holder, an exclusive one: `holdHead` is also
 * the newest holder, and the count is 0 or 1. The getters below read the
 * same either way, so the engine and the views need not know; the
 * exclusive path (hold, unhold) allocates nothing.
 */
export class Lock<C = unknown> {
  /** Oldest holder (the owner of an exclusive lock). */
  holdHead: Session<C> | null = null;
  head: Session<C> | null = null;
  tail: Session<C> | null = null;
  waiting = 0;
  /** A semaphore's or a shared lock's part; null for an exclusive lock with at most one holder (see above). */
  private more: LockMore<C> | null;

  constructor(
    readonly name: string,
    limit: number = 1,
  ) {
    this.more = limit > 1 ? new LockMore<C>(limit, null, 0) : null;
  }

  /** 1 (exclusive or shared), or a semaphore's number of permits. */
  get limit(): number {
    return this.more === null ? 1 : this.more.limit;
  }

  /** How many sessions hold it. */
  get holders(): number {
    return this.more === null ? (this.holdHead === null ? 0 : 1) : this.more.holders;
  }

  /** Newest holder. */
  get holdTail(): Session<C> | null {
    return this.more === null ? this.holdHead : this.more.holdTail;
  }

  /** A semaphore's bitmap of slots in use; null for limit 1. */
  get slots(): Uint32Array | null {
    return this.more === null ? null : this.more.slots;
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
    const more = this.more;
    if (this.holdHead === null) return true;
    if (more !== null && more.limit > 1) return more.holders < more.limit;
    return session.slot === SHARED_CLAIM && this.holdHead.slot === SHARED_CLAIM;
  }

  /** A session that left the queue (or never joined it) becomes a holder: appended, so the list stays oldest first. */
  hold(session: Session<C>): void {
    let more = this.more;
    if (more === null) {
      if (this.holdHead === null && session.slot !== SHARED_CLAIM) {
        // The exclusive path: the one holder, nothing allocated.
        session.queuePrev = null;
        session.queueNext = null;
        this.holdHead = session;
        return;
      }
      more = this.widen();
    }
    session.queuePrev = more.holdTail;
    session.queueNext = null;
    if (more.holdTail !== null) more.holdTail.queueNext = session;
    else this.holdHead = session;
    more.holdTail = session;
    more.holders++;
    if (more.slots !== null) session.slot = takeSlot(more.slots);
  }

  /**
   * A reclaimed grant becomes a holder with the slot it names (free: the
   * earlier run's slots were distinct), placed by its token so the list
   * stays in token order, oldest grant first, as the ops views page it
   * (its token set before this call). Reclaims come before any fresh grant
   * of the name, so the walk back from the tail is over reclaims only.
   */
  holdAt(session: Session<C>): void {
    let more = this.more;
    if (more === null) {
      if (this.holdHead === null && session.slot !== SHARED_CLAIM) {
        session.queuePrev = null;
        session.queueNext = null;
        this.holdHead = session;
        return;
      }
      more = this.widen();
    }
    let after = more.holdTail;
    while (after !== null && after.token > session.token) after = after.queuePrev;
    const before = after === null ? this.holdHead : after.queueNext;
    session.queuePrev = after;
    session.queueNext = before;
    if (after !== null) after.queueNext = session;
    else this.holdHead = session;
    if (before !== null) before.queuePrev = session;
    else more.holdTail = session;
    more.holders++;
    const slots = more.slots;
    if (slots !== null) slots[session.slot >>> 5] = slots[session.slot >>> 5]! | (1 << (session.slot & 31));
  }

  /** O(1) removal of a holder; its slot (if any) is free again. */
  unhold(session: Session<C>): void {
    const prev = session.queuePrev;
    const next = session.queueNext;
    session.queuePrev = null;
    session.queueNext = null;
    const more = this.more;
    if (more === null) {
      // The one holder (the exclusive path).
      this.holdHead = null;
      return;
    }
    if (prev !== null) prev.queueNext = next;
    else this.holdHead = next;
    if (next !== null) next.queuePrev = prev;
    else more.holdTail = prev;
    more.holders--;
    if (more.slots !== null && session.slot >= 0) more.slots[session.slot >>> 5]! &= ~(1 << (session.slot & 31));
  }

  /** A limit-1 lock gets a second holder or a shared one: its LockMore, made once (the lock keeps it while it lives). */
  private widen(): LockMore<C> {
    const holder = this.holdHead;
    return (this.more = new LockMore<C>(1, holder, holder === null ? 0 : 1));
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

/**
 * What only a semaphore or a shared lock needs of a Lock (see Lock): kept
 * apart so that an exclusive lock's cell stays small.
 */
class LockMore<C> {
  /** A semaphore's bitmap of slots in use; null for limit 1. */
  readonly slots: Uint32Array | null;

  constructor(
    readonly limit: number,
    /** Newest holder. */
    public holdTail: Session<C> | null,
    public holders: number,
  ) {
    this.slots = limit > 1 ? new Uint32Array((limit + 31) >>> 5) : null;
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
