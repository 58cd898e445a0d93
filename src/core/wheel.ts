/**
 * TimerWheel: one hierarchical timing wheel for every deadline in the server.
 *
 * Why a wheel: a lease is a failure detector that every frame from the client
 * pushes forward. With a timer per session, each heartbeat would cancel and
 * re-arm a timer; with thousands of sessions that is most of the server's
 * work. Here a heartbeat only stores `lastSeen` (the caller's business) and
 * the wheel re-checks lazily: when an entry's slot comes due the owner is
 * asked for its real deadline, and the entry either expires or is filed again
 * at that deadline. A session that heartbeats is filed about once per lease,
 * not once per heartbeat (Netty's IdleStateHandler, ZooKeeper's ExpiryQueue).
 *
 * Structure (the classic cascading wheel of Linux before 4.8, Varghese and
 * Lauck's scheme 6): ticks are 1 ms; level 0 has 256 slots of 1 tick;
 * levels 1..5 have 64 slots each, of 2^8, 2^14, 2^20, 2^26 and 2^32 ticks.
 * An entry due in `delta` ticks goes to the lowest level whose span holds
 * delta: level 0 below 256 ms, level 1 below 16.4 s, level 2 below 17.5 min,
 * level 3 below 18.6 h, level 4 below 49.7 days, level 5 below 8.7 years, so
 * the longest lease (2^32 - 1 ms) fits without clamping.
 *
 * Worked example: at tick 1000 an entry due at tick 31000 (delta 30,000) goes
 * to level 2's slot floor(31000 / 2^14) % 64 = 1. When the wheel reaches tick
 * 16384 (a multiple of 2^14, where level 2 slot 1 cascades) it is filed again,
 * now 14,616 ticks away: level 1, slot floor(31000 / 256) % 64 = 57. At tick
 * 30976 (= 121 * 256) level 1 slot 57 cascades and the entry lands in level 0
 * slot 31000 % 256 = 24, which expires at tick 31000 exactly. Each entry moves
 * at most once per level, and a slot's work is only the entries in it;
 * empty stretches are skipped, so an idle wheel costs nothing per tick.
 *
 * Guarantees: nothing fires early. Deadlines are rounded up to the next whole
 * tick and an entry is handed to its owner only once the clock has passed its
 * tick, so the owner sees `now >= deadline`. Lateness is bounded by how late
 * the driver calls `advance`, not by the wheel.
 *
 * Entries are intrusive: the session object carries its own links, so arming
 * and removing are O(1) and allocate nothing. Occupied slots are tracked in
 * bitmaps, so `nextTick()` finds the next thing to do with a few word scans,
 * `advance` jumps over empty stretches, and a driver arms one
 * real timer for the next occupied slot and none while the wheel is empty.
 */

/** The links an entry carries. Initialise to null / -1 in the constructor. */
export interface WheelEntry {
  wheelNext: WheelEntry | null;
  wheelPrev: WheelEntry | null;
  /** Global slot index while filed, -1 while not. */
  wheelSlot: number;
  /** The tick the entry is filed for. */
  wheelTick: number;
}

/** Asked when an entry's tick has passed. */
export interface WheelOwner<E extends WheelEntry> {
  /**
   * The entry is out of the wheel. Either end it (return -1) or return its
   * real deadline in ms, which must be later than `now`, to file it again.
   */
  due(entry: E, now: number): number;
}

/** Whoever runs the one real timer: call `advance` at (or soon after) `tick`. */
export interface WheelDriver {
  arm(tick: number): void;
}

const LEVELS = 6;
const L0_SLOTS = 256;
const LN_SLOTS = 64;
/** Ticks per slot at each level: 1, 2^8, 2^14, 2^20, 2^26, 2^32. */
const UNIT = [1, 2 ** 8, 2 ** 14, 2 ** 20, 2 ** 26, 2 ** 32] as const;
/** Ticks a whole level spans (= the unit of the level above). */
const SPAN = [2 ** 8, 2 ** 14, 2 ** 20, 2 ** 26, 2 ** 32, 2 ** 38] as const;
/** First global slot index of each level. */
const BASE = [0, 256, 320, 384, 448, 512] as const;
const SLOT_COUNT = 576;
/** First bitmap word of each level (32 slots per word). */
const WORD_BASE = [0, 8, 10, 12, 14, 16] as const;

export class TimerWheel<E extends WheelEntry> {
  /** The next tick to process; every tick before it has been handled. */
  private current: number;
  private readonly heads: (WheelEntry | null)[] = new Array<WheelEntry | null>(SLOT_COUNT).fill(null);
  private readonly occupied = new Uint32Array(18);
  private readonly levelCount = new Int32Array(LEVELS);
  private count = 0;
  private advancing = false;
  /** The tick the driver is armed for, Infinity when it is not armed. */
  private armedAt = Infinity;
  private driver: WheelDriver | null = null;

  /** Entries filed again after a lazy re-check (for tests and metrics). */
  refiled = 0;
  /** Entries moved down a level. */
  cascaded = 0;
  /** Advances cut short by their budget. */
  cuts = 0;
  /** What is left of the current advance's budget. */
  private budget = Infinity;

  constructor(now: number) {
    this.current = Math.floor(now);
  }

  get size(): number {
    return this.count;
  }

  /** Set the driver; it is armed whenever the earliest due tick moves earlier. */
  setDriver(driver: WheelDriver | null): void {
    this.driver = driver;
    this.armedAt = Infinity;
    this.rearm();
  }

  /** File `entry` at `deadline` (ms; rounded up to its tick). Moves it if already filed. */
  schedule(entry: E, deadline: number): void {
    if (entry.wheelSlot >= 0) this.unlink(entry);
    this.insert(entry, Math.ceil(deadline));
    if (!this.advancing && entry.wheelTick < this.armedAt && this.driver !== null) this.rearm();
  }

  /** Take `entry` out; harmless when it is not filed. */
  remove(entry: E): void {
    if (entry.wheelSlot >= 0) this.unlink(entry);
  }

  /**
   * Process every tick up to `now`: cascade what comes due, hand each entry
   * whose tick has passed to `owner.due`, and re-arm the driver. At most
   * `budget` entries are handed over: the rest stay due, the driver is
   * armed for them at once (a crowd of deadlines in one millisecond is
   * spread over loop turns), and the call returns true.
   */
  advance(now: number, owner: WheelOwner<E>, budget = Infinity): boolean {
    const target = Math.floor(now);
    this.advancing = true;
    this.budget = budget;
    let cut = false;
    try {
      while (this.current <= target) {
        if (this.count === 0) {
          this.current = target + 1;
          break;
        }
        const tick = this.current;
        const index = tick % L0_SLOTS;
        if (index === 0) this.cascade(tick); // idempotent: a tick resumed after a cut cascades an empty slot
        if (!this.expireSlot(index, now, owner)) {
          cut = true; // this tick again, next time
          break;
        }
        this.current = tick + 1;
        // Skip empty ticks: to the next occupied slot of this 256-tick window,
        // else to the window's end, or, with level 0 empty, straight to the
        // next cascade that has work.
        const from = (tick + 1) % L0_SLOTS;
        const found = from === 0 ? -1 : findSet(this.occupied, 0, 8, from);
        let next: number;
        if (found >= 0) next = tick + 1 - from + found;
        else if (this.levelCount[0] === 0) next = this.count === 0 ? target + 1 : this.nextTick();
        else next = from === 0 ? tick + 1 : tick + 1 - from + L0_SLOTS;
        this.current = Math.min(next, target + 1);
      }
    } finally {
      this.advancing = false;
    }
    if (cut) this.cuts++;
    this.armedAt = Infinity;
    this.rearm();
    return cut;
  }

  /** The earliest tick at which `advance` has work, or -1 when the wheel is empty. */
  nextTick(): number {
    if (this.count === 0) return -1;
    let best = Infinity;
    if (this.levelCount[0]! > 0) {
      const from = this.current % L0_SLOTS;
      const found = findSetCircular(this.occupied, 0, 8, from, L0_SLOTS);
      if (found >= 0) best = this.current + ((found - from + L0_SLOTS) % L0_SLOTS);
    }
    for (let level = 1; level < LEVELS; level++) {
      if (this.levelCount[level]! === 0) continue;
      const unit = UNIT[level]!;
      const first = Math.ceil(this.current / unit); // the next cascade point of this level
      const from = first % LN_SLOTS;
      const found = findSetCircular(this.occupied, WORD_BASE[level]!, 2, from, LN_SLOTS);
      const at = (first + ((found - from + LN_SLOTS) % LN_SLOTS)) * unit;
      if (at < best) best = at;
    }
    return best;
  }

  private rearm(): void {
    if (this.driver === null) return;
    const next = this.nextTick();
    if (next >= 0 && next < this.armedAt) {
      this.armedAt = next;
      this.driver.arm(next);
    }
  }

  private insert(entry: WheelEntry, tick: number): void {
    entry.wheelTick = tick;
    const at = tick < this.current ? this.current : tick;
    const delta = at - this.current;
    let level = 0;
    while (level < LEVELS - 1 && delta >= SPAN[level]!) level++;
    const slotsInLevel = level === 0 ? L0_SLOTS : LN_SLOTS;
    // Past the top level's span (unreachable with 32-bit leases): park in its last slot.
    const index = delta >= SPAN[LEVELS - 1]! ? (Math.floor(this.current / UNIT[level]!) + LN_SLOTS - 1) % LN_SLOTS
      : Math.floor(at / UNIT[level]!) % slotsInLevel;
    const slot = BASE[level]! + index;
    const head = this.heads[slot]!;
    entry.wheelPrev = null;
    entry.wheelNext = head;
    if (head !== null) head.wheelPrev = entry;
    else this.occupied[WORD_BASE[level]! + (index >>> 5)]! |= 1 << (index & 31);
    this.heads[slot] = entry;
    entry.wheelSlot = slot;
    this.levelCount[level]!++;
    this.count++;
  }

  private unlink(entry: WheelEntry): void {
    const slot = entry.wheelSlot;
    const next = entry.wheelNext;
    const prev = entry.wheelPrev;
    if (prev !== null) prev.wheelNext = next;
    else this.heads[slot] = next;
    if (next !== null) next.wheelPrev = prev;
    const level = levelOf(slot);
    if (this.heads[slot] === null) {
      const index = slot - BASE[level]!;
      this.occupied[WORD_BASE[level]! + (index >>> 5)]! &= ~(1 << (index & 31));
    }
    entry.wheelNext = null;
    entry.wheelPrev = null;
    entry.wheelSlot = -1;
    this.levelCount[level]!--;
    this.count--;
  }

  /** At a multiple of 256 ticks: move level 1's slot down, and higher ones when their turn wraps. */
  private cascade(tick: number): void {
    for (let level = 1; level < LEVELS; level++) {
      const index = Math.floor(tick / UNIT[level]!) % LN_SLOTS;
      const slot = BASE[level]! + index;
      let entry = this.heads[slot]!;
      while (entry !== null) {
        this.unlink(entry);
        this.insert(entry, entry.wheelTick);
        this.cascaded++;
        entry = this.heads[slot]!;
      }
      if (index !== 0) break;
    }
  }

  /** Hand the slot's entries to the owner; false when the budget ran out with some left. */
  private expireSlot(index: number, now: number, owner: WheelOwner<E>): boolean {
    // Pop one at a time: `due` may remove other entries of this slot.
    let entry = this.heads[index]!;
    while (entry !== null) {
      if (this.budget <= 0) return false;
      this.budget--;
      this.unlink(entry);
      const deadline = owner.due(entry as E, now);
      if (deadline >= 0) {
        // The owner promises deadline > now; the floor keeps a broken promise
        // from refiling into the slot being drained (a loop that never ends).
        this.insert(entry, Math.max(Math.ceil(deadline), Math.floor(now) + 1));
        this.refiled++;
      }
      entry = this.heads[index]!;
    }
    return true;
  }
}

function levelOf(slot: number): number {
  return slot < L0_SLOTS ? 0 : 1 + ((slot - L0_SLOTS) >>> 6);
}

/** Index of the first set bit at or after `from` in a run of `words` words, or -1. */
function findSet(bits: Uint32Array, wordBase: number, words: number, from: number): number {
  let w = from >>> 5;
  let word = bits[wordBase + w]! & (-1 << (from & 31));
  for (;;) {
    if (word !== 0) return (w << 5) + (31 - Math.clz32(word & -word));
    if (++w >= words) return -1;
    word = bits[wordBase + w]!;
  }
}

/** Like findSet, wrapping around to the start: the first occupied slot from `from` on. */
function findSetCircular(bits: Uint32Array, wordBase: number, words: number, from: number, size: number): number {
  const found = findSet(bits, wordBase, words, from % size);
  return found >= 0 || from === 0 ? found : findSet(bits, wordBase, words, 0);
}
