// The timer wheel: never early, due by the tick after its deadline, O(1)
// cancel, lazy re-file, leases from 1 ms to 2^32 - 1 ms, no timer while empty.
import { describe, expect, test } from "bun:test";
import { TimerWheel, type WheelEntry, type WheelOwner } from "../../src/core/wheel.ts";

class Entry implements WheelEntry {
  wheelNext: WheelEntry | null = null;
  wheelPrev: WheelEntry | null = null;
  wheelSlot = -1;
  wheelTick = 0;
  fired: number[] = [];
  constructor(
    readonly id: number,
    public deadline: number,
  ) {}
}

/** Records each firing; checks it is never early; optionally pushes deadlines later (lazy touch). */
class Owner implements WheelOwner<Entry> {
  fired: Entry[] = [];
  extend = new Map<Entry, number>();
  due(entry: Entry, now: number): number {
    const later = this.extend.get(entry);
    if (later !== undefined) {
      this.extend.delete(entry);
      entry.deadline = later;
      if (later > now) return later;
    }
    if (now < entry.deadline) throw new Error(`entry ${entry.id} fired early: now ${now} < deadline ${entry.deadline}`);
    entry.fired.push(now);
    this.fired.push(entry);
    return -1;
  }
}

function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("TimerWheel", () => {
  test("a deadline is rounded up: 10.2 is not due at 10.9, is due at 11", () => {
    const wheel = new TimerWheel<Entry>(0);
    const owner = new Owner();
    const e = new Entry(1, 10.2);
    wheel.schedule(e, e.deadline);
    wheel.advance(10.9, owner);
    expect(owner.fired).toEqual([]);
    wheel.advance(11, owner);
    expect(owner.fired).toEqual([e]);
    expect(e.fired).toEqual([11]);
    expect(wheel.size).toBe(0);
  });

  test("an exact integer deadline is due at that tick", () => {
    const wheel = new TimerWheel<Entry>(100);
    const owner = new Owner();
    const e = new Entry(1, 101);
    wheel.schedule(e, 101);
    wheel.advance(100.999, owner);
    expect(owner.fired.length).toBe(0);
    wheel.advance(101, owner);
    expect(owner.fired.length).toBe(1);
  });

  test("1 ms leases and a deadline in the past fire on the next advance", () => {
    const wheel = new TimerWheel<Entry>(50);
    const owner = new Owner();
    const soon = new Entry(1, 51);
    const past = new Entry(2, 10);
    wheel.schedule(soon, 51);
    wheel.schedule(past, 10);
    wheel.advance(50.5, owner);
    expect(owner.fired).toEqual([past]);
    wheel.advance(51, owner);
    expect(owner.fired).toEqual([past, soon]);
  });

  test("remove: a cancelled entry never fires; removing twice is harmless", () => {
    const wheel = new TimerWheel<Entry>(0);
    const owner = new Owner();
    const entries = Array.from({ length: 10 }, (_, i) => new Entry(i, 5)); // all in one slot
    for (const e of entries) wheel.schedule(e, 5);
    wheel.remove(entries[0]!); // head
    wheel.remove(entries[9]!); // tail
    wheel.remove(entries[5]!); // middle
    wheel.remove(entries[5]!);
    expect(wheel.size).toBe(7);
    wheel.advance(5, owner);
    expect(owner.fired.map((e) => e.id).sort()).toEqual([1, 2, 3, 4, 6, 7, 8]);
  });

  test("schedule again moves an entry, earlier or later", () => {
    const wheel = new TimerWheel<Entry>(0);
    const owner = new Owner();
    const e = new Entry(1, 1000);
    wheel.schedule(e, 1000);
    e.deadline = 20;
    wheel.schedule(e, 20);
    wheel.advance(20, owner);
    expect(e.fired).toEqual([20]);
    const f = new Entry(2, 20);
    wheel.schedule(f, 20);
    f.deadline = 70_000;
    wheel.schedule(f, 70_000);
    wheel.advance(69_999, owner);
    expect(f.fired).toEqual([]);
    wheel.advance(70_000, owner);
    expect(f.fired).toEqual([70_000]);
  });

  test("lazy re-file: a touched entry is filed again at its new deadline, not fired", () => {
    const wheel = new TimerWheel<Entry>(0);
    const owner = new Owner();
    const e = new Entry(1, 100);
    wheel.schedule(e, 100);
    owner.extend.set(e, 350.5);
    wheel.advance(200, owner);
    expect(e.fired).toEqual([]);
    expect(wheel.refiled).toBe(1);
    wheel.advance(350.9, owner);
    expect(e.fired).toEqual([]);
    wheel.advance(351, owner);
    expect(e.fired).toEqual([351]);
  });

  test("the longest lease (2^32 - 1 ms) cascades down and fires on time, not before", () => {
    const start = 123_456.7;
    const wheel = new TimerWheel<Entry>(start);
    const owner = new Owner();
    const e = new Entry(1, start + 0xffff_ffff);
    wheel.schedule(e, e.deadline);
    // Walk the clock in big uneven steps, as a driver following nextTick would.
    let now = start;
    let steps = 0;
    while (e.fired.length === 0 && steps < 10_000) {
      const next = wheel.nextTick();
      expect(next).toBeGreaterThan(0);
      expect(next).toBeLessThanOrEqual(Math.ceil(e.deadline));
      now = Math.max(now, next);
      wheel.advance(now, owner);
      steps++;
    }
    expect(e.fired).toEqual([Math.ceil(e.deadline)]);
    expect(steps).toBeLessThan(400); // a handful of cascades per level, not a wake per slot
    expect(wheel.cascaded).toBeLessThanOrEqual(5);
  });

  test("random deadlines, random advances: never early, never more than a tick late", () => {
    const random = rng(42);
    for (let round = 0; round < 20; round++) {
      let now = random() * 1e6;
      const wheel = new TimerWheel<Entry>(now);
      const owner = new Owner();
      const live = new Set<Entry>();
      for (let i = 0; i < 3000; i++) {
        const r = random();
        if (r < 0.5) {
          const span = [1, 300, 20_000, 2_000_000, 300_000_000][Math.floor(random() * 5)]!;
          const e = new Entry(i, now + random() * span);
          wheel.schedule(e, e.deadline);
          live.add(e);
        } else if (r < 0.6 && live.size > 0) {
          const victim = [...live][Math.floor(random() * live.size)]!;
          wheel.remove(victim);
          live.delete(victim);
        } else {
          now += random() < 0.9 ? random() * 50 : random() * 5_000_000;
          wheel.advance(now, owner);
          for (const e of owner.fired) live.delete(e);
          owner.fired.length = 0;
          // Everything whose tick has passed has fired.
          for (const e of live) expect(Math.ceil(e.deadline)).toBeGreaterThan(Math.floor(now));
        }
        expect(wheel.size).toBe(live.size);
      }
    }
  });

  test("nextTick: -1 when empty, the exact tick for near deadlines, never after the earliest", () => {
    const wheel = new TimerWheel<Entry>(1000);
    expect(wheel.nextTick()).toBe(-1);
    wheel.schedule(new Entry(1, 1200.5), 1200.5);
    expect(wheel.nextTick()).toBe(1201);
    wheel.schedule(new Entry(2, 1100), 1100);
    expect(wheel.nextTick()).toBe(1100);
    const far = new TimerWheel<Entry>(0);
    far.schedule(new Entry(3, 50_000), 50_000);
    const next = far.nextTick();
    expect(next).toBeGreaterThan(0);
    expect(next).toBeLessThanOrEqual(50_000);
  });

  test("the driver is armed for the earliest tick, re-armed only when it moves earlier, never while empty", () => {
    const wheel = new TimerWheel<Entry>(0);
    const armed: number[] = [];
    wheel.setDriver({ arm: (tick) => armed.push(tick) });
    expect(armed).toEqual([]);
    const a = new Entry(1, 100);
    wheel.schedule(a, 100);
    wheel.schedule(new Entry(2, 200), 200); // later: no re-arm
    const c = new Entry(3, 50);
    wheel.schedule(c, 50);
    expect(armed).toEqual([100, 50]);
    const owner = new Owner();
    wheel.advance(50, owner);
    expect(armed).toEqual([100, 50, 100]);
    wheel.advance(100, owner);
    wheel.advance(200, owner);
    expect(wheel.size).toBe(0);
    expect(armed).toEqual([100, 50, 100, 200]);
  });

  test("touching is free: a million deadline moves later never touch the wheel", () => {
    // The engine's touch is `lastSeen = now`; the wheel sees the session once per lease.
    const wheel = new TimerWheel<Entry>(0);
    const owner = new Owner();
    const e = new Entry(1, 1000);
    wheel.schedule(e, 1000);
    let now = 0;
    for (let i = 0; i < 1_000_000; i++) {
      now += 0.01; // 10 s of heartbeats every 10 us
      owner.extend.set(e, now + 1000);
      if (i % 100_000 === 0) wheel.advance(now, owner);
    }
    wheel.advance(now, owner);
    expect(e.fired).toEqual([]);
    expect(wheel.refiled).toBeLessThanOrEqual(11); // about once per lease
  });
});

test("a budget spreads a crowd of deadlines in one tick over several advances, in order, arming the driver at once for the rest", () => {
  const wheel = new TimerWheel<Entry>(0);
  const armed: number[] = [];
  wheel.setDriver({ arm: (tick) => armed.push(tick) });
  const items = Array.from({ length: 1000 }, (_, i) => new Entry(i, 50));
  for (const item of items) wheel.schedule(item, 50);
  const ended: number[] = [];
  const owner = { due: (item: Entry) => (ended.push(item.id), -1) };
  armed.length = 0;
  expect(wheel.advance(60, owner, 300)).toBe(true);
  expect(ended).toHaveLength(300);
  // The rest is due now: the driver is armed for a tick already past, so it comes back at once.
  expect(armed.at(-1)).toBeLessThanOrEqual(60);
  expect(wheel.advance(60, owner, 300)).toBe(true);
  expect(wheel.advance(60, owner, 300)).toBe(true);
  expect(wheel.advance(60, owner, 300)).toBe(false);
  expect(ended).toHaveLength(1000);
  expect(new Set(ended).size).toBe(1000);
  expect(wheel.size).toBe(0);
  expect(wheel.cuts).toBe(3);
});
