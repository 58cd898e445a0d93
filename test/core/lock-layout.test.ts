// The Lock's two layouts (src/core/session.ts): an exclusive lock keeps six
// fields, and a semaphore or a lock that has had shared holders keeps its
// limit, slots, newest holder and holder count apart. Both must read the
// same through the getters the engine and the views use, across a name
// going from exclusive holders to shared ones and back.
import { describe, expect, test } from "bun:test";
import { Lock, NO_SLOT, SHARED_CLAIM, Session, SessionState } from "../../src/core/index.ts";
import { type FakeConn, Harness } from "../helpers/engine.ts";

const holding = (c: FakeConn): boolean => c.session!.state === SessionState.OWNER;

/** holders, holdTail's owner label, holderList's labels, limit, slots: what the getters say. */
function seen(lock: Lock<FakeConn>): unknown[] {
  return [lock.holders, lock.holdTail?.owner ?? null, lock.holderList().map((s) => s.owner), lock.limit, lock.slots === null ? null : [...lock.slots]];
}

describe("Lock layout", () => {
  test("an exclusive lock with its holder and a queue has six own fields (bench/core-scale.ts's memory budget)", () => {
    const h = new Harness();
    h.claim("x", 1000, { owner: "a" });
    h.claim("x", 1000, { owner: "b" });
    const lock = h.engine.locks.get("x")!;
    expect(Object.keys(lock)).toHaveLength(6);
    expect(seen(lock)).toEqual([1, "a", ["a"], 1, null]);
    expect(lock.owner?.owner).toBe("a");
  });

  test("exclusive, then shared holders, then exclusive again: the counts and lists stay right", () => {
    const h = new Harness();
    const a = h.claim("rw", 1000, { owner: "a" });
    const r = [0, 1, 2].map((i) => h.claim("rw", 1000, { shared: true, owner: `r${i}` }));
    const w = h.claim("rw", 1000, { owner: "w" });
    const lock = h.engine.locks.get("rw")!;
    expect(seen(lock)).toEqual([1, "a", ["a"], 1, null]);
    expect(lock.waiting).toBe(4);
    h.closePeer(a);
    expect(r.every(holding)).toBe(true);
    expect(seen(lock)).toEqual([3, "r2", ["r0", "r1", "r2"], 1, null]);
    expect(lock.sharedHeld).toBe(true);
    // A holder from the middle, then the newest: the list and its tail follow.
    h.closePeer(r[1]!);
    expect(seen(lock)).toEqual([2, "r2", ["r0", "r2"], 1, null]);
    h.closePeer(r[2]!);
    expect(seen(lock)).toEqual([1, "r0", ["r0"], 1, null]);
    expect(holding(w)).toBe(false);
    h.closePeer(r[0]!);
    expect(holding(w)).toBe(true);
    expect(seen(lock)).toEqual([1, "w", ["w"], 1, null]);
    expect(w.session!.slot).toBe(NO_SLOT);
    expect(lock.sharedHeld).toBe(false);
    h.closePeer(w);
    expect(h.engine.locks.has("rw")).toBe(false);
  });

  test("a semaphore reads its limit and slot bitmap through the same getters", () => {
    const h = new Harness();
    const c = [0, 1, 2].map((i) => h.claim("pool", 1000, { limit: 40, owner: `s${i}` }));
    const lock = h.engine.locks.get("pool")!;
    expect(seen(lock)).toEqual([3, "s2", ["s0", "s1", "s2"], 40, [0b111, 0]]);
    h.closePeer(c[1]!);
    expect(seen(lock)).toEqual([2, "s2", ["s0", "s2"], 40, [0b101, 0]]);
    expect(lock.admits(c[0]!.session!)).toBe(true);
  });

  test("a Lock made directly: exclusive holds and unholds without a second holder, a shared claim widens it", () => {
    const lock = new Lock<number>("direct");
    const s0 = new Session<number>(1, 1, 0, 1000);
    const s1 = new Session<number>(2, 2, 0, 1000);
    const s2 = new Session<number>(3, 3, 0, 1000);
    lock.hold(s0);
    expect([lock.holders, lock.holdTail, lock.admits(s1)]).toEqual([1, s0, false]);
    lock.unhold(s0);
    expect([lock.holders, lock.holdHead, lock.holdTail, Object.keys(lock).length]).toEqual([0, null, null, 6]);
    s1.slot = SHARED_CLAIM;
    s2.slot = SHARED_CLAIM;
    lock.hold(s1);
    expect(lock.admits(s2)).toBe(true);
    lock.hold(s2);
    expect([lock.holders, lock.holdHead, lock.holdTail, lock.limit]).toEqual([2, s1, s2, 1]);
    expect(lock.admits(s0)).toBe(false);
    lock.unhold(s1);
    lock.unhold(s2);
    expect([lock.holders, lock.holdHead, lock.holdTail]).toEqual([0, null, null]);
    lock.hold(s0);
    expect([lock.holders, lock.holdHead, lock.holdTail, s0.queueNext, s0.queuePrev]).toEqual([1, s0, s0, null, null]);
  });
});
