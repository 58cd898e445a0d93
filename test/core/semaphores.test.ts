// Semaphores and shared claims in the engine (protocol.md section 13):
// N holders and no more, slots lowest-first, LIMIT_MISMATCH, shared runs,
// no overtaking, TRY, the promotion budget, force-release of one holder.
import { describe, expect, test } from "bun:test";
import { ClaimKind, PROMOTE_BUDGET, SessionState } from "../../src/core/index.ts";
import { ErrorCode, FLAG_REPLY, FLAG_SLOT, FrameType } from "../../src/protocol/index.ts";
import { type FakeConn, Harness } from "../helpers/engine.ts";

const ACQUIRED = FrameType.ACQUIRED;
const WAITING = FrameType.WAITING;

const holding = (c: FakeConn): boolean => c.session!.state === SessionState.OWNER;
const waiting = (c: FakeConn): boolean => c.session!.state === SessionState.WAITING;

describe("a semaphore of N permits", () => {
  test("the first N claims hold at once, each with the lowest free slot; the rest wait", () => {
    const h = new Harness();
    const c = [0, 1, 2, 3, 4].map((i) => h.claim("pool", 1000, { limit: 3 }, `c${i}`));
    expect(c.slice(0, 3).map((x) => x.sent[0])).toEqual([
      { type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT, token: 1n, slot: 0 },
      { type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT, token: 2n, slot: 1 },
      { type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT, token: 3n, slot: 2 },
    ]);
    expect(c.slice(3).map((x) => x.sent)).toEqual([[{ type: WAITING, flags: FLAG_REPLY }], [{ type: WAITING, flags: FLAG_REPLY }]]);
    const lock = h.engine.locks.get("pool")!;
    expect([lock.holders, lock.waiting, lock.limit]).toEqual([3, 2, 3]);
    // A heartbeat's answer carries the slot too.
    h.heartbeat(c[1]!);
    expect(c[1]!.last).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT, token: 2n, slot: 1 });
  });

  test("a holder's end promotes the head at once, by push, into the freed slot; later ones take the lowest free", () => {
    const h = new Harness();
    const c = [0, 1, 2, 3, 4].map((i) => h.claim("pool", 1000, { limit: 3 }, `c${i}`));
    h.closePeer(c[1]!);
    expect(c[3]!.last).toEqual({ type: ACQUIRED, flags: FLAG_SLOT, token: 4n, slot: 1 });
    expect(waiting(c[4]!)).toBe(true);
    h.closePeer(c[2]!);
    h.closePeer(c[0]!);
    expect(c[4]!.last).toEqual({ type: ACQUIRED, flags: FLAG_SLOT, token: 5n, slot: 2 });
    const next = h.claim("pool", 1000, { limit: 3 }, "late");
    expect(next.sent[0]).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT, token: 6n, slot: 0 });
  });

  test("per slot, tokens rise: each slot's next holder has a larger token than its last", () => {
    const h = new Harness();
    const lastBySlot = new Map<number, bigint>();
    const live: FakeConn[] = [];
    for (let round = 0; round < 50; round++) {
      while (live.length < 4) live.push(h.claim("pool", 1000, { limit: 4 }, `r${round}`));
      const leaving = live.splice((round * 7) % live.length, 1)[0]!;
      h.closePeer(leaving);
      for (const conn of live) {
        const grant = conn.sent.find((f) => f.type === ACQUIRED);
        if (grant === undefined) continue;
        const before = lastBySlot.get(grant.slot!);
        if (before !== undefined) expect(grant.token! >= before).toBe(true);
        lastBySlot.set(grant.slot!, grant.token!);
      }
    }
    expect([...lastBySlot.keys()].sort()).toEqual([0, 1, 2, 3]);
  });

  test("limit 1 is today's lock: no slot flag, an 8-byte ACQUIRED", () => {
    const h = new Harness();
    const a = h.claim("L", 1000, { limit: 1 });
    expect(a.sent).toEqual([{ type: ACQUIRED, flags: FLAG_REPLY, token: 1n }]);
  });
});

describe("LIMIT_MISMATCH", () => {
  test("a claim with another limit ends alone, with a message naming both limits", () => {
    const h = new Harness();
    const a = h.claim("pool", 1000, { limit: 3 }, "a");
    const w = [1, 2, 3].map((i) => h.claim("pool", 1000, { limit: 3 }, `w${i}`));
    const bad = h.claim("pool", 1000, { limit: 5 }, "bad");
    expect(bad.closeFrame).toEqual({ type: FrameType.ERROR, flags: 0, code: ErrorCode.LIMIT_MISMATCH });
    expect(bad.closeText).toContain("limit 3");
    expect(bad.closeText).toContain("limit 5");
    expect(holding(a)).toBe(true);
    expect(w.map(holding)).toEqual([true, true, false]);
    expect(h.engine.stats.mismatched).toBe(1);
    // A shared claim or an exclusive one on a semaphore is a mismatch too, and so is a semaphore claim on a lock.
    expect(h.claim("pool", 1000, { shared: true }).closeFrame!.code).toBe(ErrorCode.LIMIT_MISMATCH);
    expect(h.claim("pool", 1000).closeFrame!.code).toBe(ErrorCode.LIMIT_MISMATCH);
    h.claim("L", 1000, { shared: true });
    const sem = h.claim("L", 1000, { limit: 2 });
    expect(sem.closeFrame!.code).toBe(ErrorCode.LIMIT_MISMATCH);
    expect(sem.closeText).toContain("limit 1");
    expect(sem.closeText).toContain("limit 2");
  });

  test("a name with no sessions left takes the limit of its next claim", () => {
    const h = new Harness();
    const a = h.claim("pool", 1000, { limit: 3 });
    h.closePeer(a);
    expect(h.engine.locks.has("pool")).toBe(false);
    const b = h.claim("pool", 1000, { limit: 2 });
    expect(b.sent[0]).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT, token: 2n, slot: 0 });
    expect(h.engine.locks.get("pool")!.limit).toBe(2);
  });
});

describe("shared claims", () => {
  test("shared holders coexist; an exclusive claim waits for all of them; a shared claim behind it waits too", () => {
    const h = new Harness();
    const r1 = h.claim("rw", 1000, { shared: true }, "r1");
    const r2 = h.claim("rw", 1000, { shared: true }, "r2");
    expect([r1, r2].map((c) => c.sent[0])).toEqual([
      { type: ACQUIRED, flags: FLAG_REPLY, token: 1n },
      { type: ACQUIRED, flags: FLAG_REPLY, token: 2n },
    ]);
    const w = h.claim("rw", 1000, {}, "w");
    const r3 = h.claim("rw", 1000, { shared: true }, "r3");
    expect([waiting(w), waiting(r3)]).toEqual([true, true]); // r3 would fit beside r1 and r2, but w is first
    h.closePeer(r1);
    expect(waiting(w)).toBe(true);
    h.closePeer(r2);
    expect(w.last).toEqual({ type: ACQUIRED, flags: 0, token: 3n });
    expect(waiting(r3)).toBe(true);
    h.closePeer(w);
    expect(r3.last).toEqual({ type: ACQUIRED, flags: 0, token: 4n });
  });

  test("a run of shared waiters at the head is granted together, each its own token, up to the next exclusive claim", () => {
    const h = new Harness();
    const w = h.claim("rw", 1000, {}, "w");
    const readers = [0, 1, 2, 3].map((i) => h.claim("rw", 1000, { shared: true }, `r${i}`));
    const w2 = h.claim("rw", 1000, {}, "w2");
    const r9 = h.claim("rw", 1000, { shared: true }, "r9");
    h.closePeer(w);
    expect(readers.map((r) => r.last)).toEqual([2n, 3n, 4n, 5n].map((token) => ({ type: ACQUIRED, flags: 0, token })));
    expect([waiting(w2), waiting(r9)]).toEqual([true, true]);
    // An exclusive grant's token is above every earlier grant's, shared or not.
    for (const r of readers) h.closePeer(r);
    expect(w2.last).toEqual({ type: ACQUIRED, flags: 0, token: 6n });
  });

  test("when the exclusive head waiter leaves, the shared waiters behind it join the shared holders at once", () => {
    const h = new Harness();
    const r1 = h.claim("rw", 1000, { shared: true }, "r1");
    const w = h.claim("rw", 1000, {}, "w");
    const r2 = h.claim("rw", 1000, { shared: true }, "r2");
    const r3 = h.claim("rw", 1000, { shared: true }, "r3");
    h.closePeer(w);
    expect([holding(r1), holding(r2), holding(r3)]).toEqual([true, true, true]);
    expect(r2.last).toEqual({ type: ACQUIRED, flags: 0, token: 2n });
  });

  test("an exclusive holder holds alone: a shared claim waits", () => {
    const h = new Harness();
    const w = h.claim("rw", 1000, {}, "w");
    const r = h.claim("rw", 1000, { shared: true }, "r");
    expect(waiting(r)).toBe(true);
    h.closePeer(w);
    expect(holding(r)).toBe(true);
  });
});

describe("TRY", () => {
  test("granted only when it fits at once and nobody is queued", () => {
    const h = new Harness();
    h.claim("rw", 1000, { shared: true }, "r1");
    expect(holding(h.claim("rw", 1000, { shared: true, try: true }, "r2"))).toBe(true);
    expect(h.claim("rw", 1000, { try: true }, "w-try").closeFrame!.code).toBe(ErrorCode.LOCK_BUSY);
    h.claim("rw", 1000, {}, "w");
    // It would fit beside the readers, but an exclusive claim is queued: no overtaking.
    expect(h.claim("rw", 1000, { shared: true, try: true }, "r3").closeFrame!.code).toBe(ErrorCode.LOCK_BUSY);

    h.claim("pool", 1000, { limit: 2 });
    expect(holding(h.claim("pool", 1000, { limit: 2, try: true }))).toBe(true);
    expect(h.claim("pool", 1000, { limit: 2, try: true }).closeFrame!.code).toBe(ErrorCode.LOCK_BUSY);
  });
});

describe("bounded work per step", () => {
  test("a run longer than PROMOTE_BUDGET is granted over several steps, the shell told to resume", () => {
    let asked = 0;
    const h = new Harness({ onResumeNeeded: () => asked++ });
    const w = h.claim("rw", 1000, {}, "w");
    const readers = Array.from({ length: PROMOTE_BUDGET + 300 }, (_, i) => h.claim("rw", 1000, { shared: true }, `r${i}`));
    const w2 = h.claim("rw", 1000, {}, "w2");
    h.closePeer(w);
    expect(readers.filter(holding).length).toBe(PROMOTE_BUDGET);
    expect(asked).toBe(1);
    // A claim arriving in between does not overtake the rest of the run.
    const late = h.claim("rw", 1000, { shared: true, try: true }, "late");
    expect(late.closeFrame!.code).toBe(ErrorCode.LOCK_BUSY);
    expect(h.engine.resume(h.now)).toBe(false);
    expect(readers.every(holding)).toBe(true);
    expect(waiting(w2)).toBe(true);
    // Tokens in queue order.
    const tokens = readers.map((r) => r.last!.token!);
    expect(tokens.every((t, i) => i === 0 || t > tokens[i - 1]!)).toBe(true);
  });
});

describe("operators", () => {
  test("force-release ends the chosen holder (or the oldest), and the head takes the freed slot", () => {
    const h = new Harness();
    const c = [0, 1, 2].map((i) => h.claim("pool", 1000, { limit: 2 }, `c${i}`));
    const ended = h.engine.forceRelease("pool", h.now, c[1]!.session!.id);
    expect(ended).toBe(c[1]!.session!);
    expect(c[1]!.closeFrame!.code).toBe(ErrorCode.FORCE_RELEASED);
    expect(c[2]!.last).toEqual({ type: ACQUIRED, flags: FLAG_SLOT, token: 3n, slot: 1 });
    expect(h.engine.forceRelease("pool", h.now, 9999)).toBeNull(); // no such holder: nothing happens
    expect(h.engine.forceRelease("pool", h.now)).toBe(c[0]!.session!); // the oldest holder
  });

  test("holders and waiters are counted by kind", () => {
    const h = new Harness();
    h.claim("a", 1000, {});
    h.claim("a", 1000, {});
    h.claim("b", 1000, { shared: true });
    h.claim("b", 1000, { shared: true });
    const p = [0, 1, 2].map(() => h.claim("c", 1000, { limit: 2 }));
    const stats = h.engine.stats;
    expect([...stats.holdersByKind]).toEqual([1, 2, 2]);
    expect([...stats.waitersByKind]).toEqual([1, 0, 1]);
    h.closePeer(p[0]!);
    expect(stats.holdersByKind[ClaimKind.SEMAPHORE]).toBe(2);
    expect(stats.waitersByKind[ClaimKind.SEMAPHORE]).toBe(0);
    h.engine.shutdown(h.now);
    expect([...stats.holdersByKind, ...stats.waitersByKind]).toEqual([0, 0, 0, 0, 0, 0]);
  });

  test("held(): a name's largest holder lease", () => {
    const h = new Harness();
    h.claim("pool", 1000, { limit: 3 });
    h.claim("pool", 7000, { limit: 3 });
    h.claim("pool", 3000, { limit: 3 });
    expect(h.engine.held(10)).toEqual([["pool", 7000]]);
  });
});
