// Reclaim in the engine (protocol.md section 14): the RECLAIMABLE flag, the
// clean stop's SHUTTING_DOWN with RECLAIM and its published grants, and a
// restarted engine that grants exactly those reclaims, with their tokens,
// while their names are held back, and refuses every other.
import { describe, expect, test } from "bun:test";
import { LockDelay } from "../../src/core/delay.ts";
import { NO_SLOT, type ReclaimEntry, SessionState, SHARED_CLAIM } from "../../src/core/index.ts";
import { MemoryTokens } from "../../src/core/tokens.ts";
import { encodeAcquire, ErrorCode, FLAG_RECLAIM, FLAG_RECLAIMABLE, FLAG_REPLY, FLAG_SLOT, FrameType } from "../../src/protocol/index.ts";
import { type FakeConn, Harness } from "../helpers/engine.ts";

const ACQUIRED = FrameType.ACQUIRED;
const holding = (c: FakeConn): boolean => c.session!.state === SessionState.OWNER;

/** The next run after a clean stop: published names held back until `until`, reclaim on with cap M, tokens above `floor`. */
function restarted(published: Map<string, ReclaimEntry[]>, options: { until?: number; maxLeaseMs?: number; floor?: number } = {}): Harness {
  const until = options.until ?? 10_000;
  const delay = new LockDelay({
    why: "clean-restart",
    until: 0,
    names: new Map([...published.keys()].map((name) => [name, until])),
    durableMaxMs: Infinity,
    raise: () => true,
  });
  const tokens = new MemoryTokens();
  for (let i = 0; i < (options.floor ?? 100); i++) tokens.next();
  return new Harness({ delay, tokens, reclaim: { maxLeaseMs: options.maxLeaseMs ?? 10_000, published } });
}

describe("reclaim off", () => {
  test("no flag on any grant, a reclaim is refused, and a shutdown sends plain SHUTTING_DOWN", () => {
    const h = new Harness();
    const a = h.client("L", 1000);
    expect(a.sent).toEqual([{ type: ACQUIRED, flags: FLAG_REPLY, token: 1n }]);
    const r = h.claim("M", 1000, { reclaim: { token: 1 } });
    expect(r.closeFrame!.code).toBe(ErrorCode.RECLAIM_REFUSED);
    expect(r.closeText).toContain("off");
    expect(h.engine.reclaimableGrants().size).toBe(0);
    h.engine.shutdown(h.now, true);
    expect(a.closeFrame).toEqual({ type: FrameType.ERROR, flags: 0, code: ErrorCode.SHUTTING_DOWN });
  });
});

describe("reclaim on: the stopping run", () => {
  test("grants within the cap carry RECLAIMABLE on every ACQUIRED; longer leases do not", () => {
    const h = new Harness({ reclaim: { maxLeaseMs: 5000 } });
    const a = h.client("L", 5000, "a");
    const b = h.client("L", 5001, "b");
    const c = h.client("L", 2000, "c");
    const long = h.client("M", 9000, "long");
    expect(a.sent[0]).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: 1n });
    expect(long.sent[0]).toEqual({ type: ACQUIRED, flags: FLAG_REPLY, token: 2n });
    h.heartbeat(a);
    expect(a.last).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: 1n });
    h.closePeer(a);
    expect(b.last).toEqual({ type: ACQUIRED, flags: 0, token: 3n }); // above the cap: a push without the flag
    h.closePeer(b);
    expect(c.last).toEqual({ type: ACQUIRED, flags: FLAG_RECLAIMABLE, token: 4n });
    const pool = [0, 1].map(() => h.claim("pool", 1000, { limit: 2 }));
    expect(pool[1]!.sent[0]).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT | FLAG_RECLAIMABLE, token: 6n, slot: 1 });
  });

  test("a clean stop: the reclaimable grants published, RECLAIM on their SHUTTING_DOWN only", () => {
    const h = new Harness({ reclaim: { maxLeaseMs: 5000 } });
    const a = h.client("L", 5000, "a");
    const w = h.client("L", 5000, "w");
    const long = h.client("M", 9000, "long");
    const r1 = h.claim("rw", 3000, { shared: true });
    const r2 = h.claim("rw", 4000, { shared: true });
    const s = h.claim("pool", 1000, { limit: 3 });
    const grants = h.engine.reclaimableGrants();
    expect(Object.fromEntries(grants)).toEqual({
      L: [{ token: 1, slot: NO_SLOT, limit: 1, leaseMs: 5000 }],
      rw: [
        { token: 3, slot: SHARED_CLAIM, limit: 1, leaseMs: 3000 },
        { token: 4, slot: SHARED_CLAIM, limit: 1, leaseMs: 4000 },
      ],
      pool: [{ token: 5, slot: 0, limit: 3, leaseMs: 1000 }],
    });
    h.engine.shutdown(h.now, true);
    for (const c of [a, r1, r2, s]) expect(c.closeFrame).toEqual({ type: FrameType.ERROR, flags: FLAG_RECLAIM, code: ErrorCode.SHUTTING_DOWN });
    for (const c of [w, long]) expect(c.closeFrame).toEqual({ type: FrameType.ERROR, flags: 0, code: ErrorCode.SHUTTING_DOWN });
  });
});

describe("reclaim on: the next run", () => {
  const published = (): Map<string, ReclaimEntry[]> =>
    new Map([
      ["L", [{ token: 7, slot: NO_SLOT, limit: 1, leaseMs: 5000 }]],
      [
        "rw",
        [
          { token: 8, slot: SHARED_CLAIM, limit: 1, leaseMs: 3000 },
          { token: 9, slot: SHARED_CLAIM, limit: 1, leaseMs: 3000 },
        ],
      ],
      [
        "pool",
        [
          { token: 10, slot: 0, limit: 3, leaseMs: 1000 },
          { token: 12, slot: 2, limit: 3, leaseMs: 1000 },
        ],
      ],
    ]);

  test("a published grant is reclaimed at once with its own token, ahead of fresh claims, which are served after it", () => {
    const h = restarted(published(), { until: 4000 });
    const fresh = h.client("L", 5000, "fresh");
    expect(fresh.sent).toEqual([{ type: FrameType.WAITING, flags: FLAG_REPLY }]);
    const r = h.claim("L", 5000, { reclaim: { token: 7 } }, "r");
    expect(r.sent).toEqual([{ type: ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: 7n }]);
    expect(h.engine.tokens.last).toBe(100); // a reclaim takes no new token
    expect(h.engine.stats.reclaims).toBe(1);
    h.heartbeat(r);
    expect(r.last).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: 7n });
    // The delay ends: the fresh claim still waits behind the reclaimed holder, then gets a token above the earlier run's.
    h.at(4000);
    h.engine.resume(h.now);
    expect(holding(fresh)).toBe(false);
    h.closePeer(r);
    expect(fresh.last).toEqual({ type: ACQUIRED, flags: FLAG_RECLAIMABLE, token: 101n });
  });

  test("refused: a token, slot, mode or limit that was not published, a name not held back, a lease above the cap, after the grace", () => {
    const h = restarted(published());
    const refused = (name: string, options: Parameters<Harness["claim"]>[2], lease = 1000): string => {
      const c = h.claim(name, lease, options);
      expect(c.closeFrame?.code).toBe(ErrorCode.RECLAIM_REFUSED);
      return c.closeText;
    };
    expect(refused("L", { reclaim: { token: 6 } })).toContain("no such grant");
    expect(refused("L", { reclaim: { token: 7 }, shared: true })).toContain("no such grant");
    expect(refused("pool", { reclaim: { token: 10, slot: 1 }, limit: 3 })).toContain("no such grant");
    expect(refused("pool", { reclaim: { token: 10, slot: 0 }, limit: 4 })).toContain("no such grant");
    expect(refused("other", { reclaim: { token: 7 } })).toContain("not in a grace");
    expect(refused("L", { reclaim: { token: 7 } }, 10_001)).toContain("reclaim cap");
    h.at(10_000);
    expect(refused("L", { reclaim: { token: 7 } })).toContain("not in a grace");
    expect(h.engine.stats.reclaimsRefused).toBe(7);
    expect(h.engine.locks.size).toBe(0);
  });

  test("a second connection reclaiming the same grant replaces the first", () => {
    const h = restarted(published());
    const first = h.claim("L", 5000, { reclaim: { token: 7 } }, "first");
    const second = h.claim("L", 5000, { reclaim: { token: 7 } }, "second");
    expect(first.closeFrame!.code).toBe(ErrorCode.RECLAIM_REFUSED);
    expect(first.closeText).toContain("replaced");
    expect(second.sent[0]).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: 7n });
    expect(h.engine.locks.get("L")!.holders).toBe(1);
  });

  test("shared grants are reclaimed side by side; a semaphore's in their slots, and fresh claims take the free ones after the grace", () => {
    const h = restarted(published(), { until: 1500 });
    const r9 = h.claim("rw", 3000, { shared: true, reclaim: { token: 9 } });
    const r8 = h.claim("rw", 3000, { shared: true, reclaim: { token: 8 } });
    expect([holding(r8), holding(r9)]).toEqual([true, true]);
    // Holders stay in token order whatever order the reclaims came in (the ops views page them by token).
    expect(h.engine.locks.get("rw")!.holderList().map((x) => x.token)).toEqual([8, 9]);
    const fresh = h.claim("pool", 1000, { limit: 3 }, "fresh");
    const s2 = h.claim("pool", 1000, { limit: 3, reclaim: { token: 12, slot: 2 } });
    expect(s2.sent[0]).toEqual({ type: ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT | FLAG_RECLAIMABLE, token: 12n, slot: 2 });
    expect(holding(fresh)).toBe(false); // held back with its name, even though a permit is free
    h.at(1500);
    h.engine.resume(h.now);
    expect(fresh.last).toEqual({ type: ACQUIRED, flags: FLAG_SLOT | FLAG_RECLAIMABLE, token: 101n, slot: 0 });
    // Slot 0's reclaim is now too late: the grace is over, and the slot has a newer holder.
    expect(h.claim("pool", 1000, { limit: 3, reclaim: { token: 10, slot: 0 } }).closeFrame!.code).toBe(ErrorCode.RECLAIM_REFUSED);
  });
});

/** A takeover's grace: every name held back until `until`, open reclaims of tokens at or below `floor`. */
function takenOver(options: { until?: number; floor?: number; published?: Map<string, ReclaimEntry[]>; names?: number } = {}): Harness {
  const until = options.until ?? 10_000;
  const published = options.published ?? new Map();
  const delay = new LockDelay({
    why: "takeover",
    until,
    names: new Map([...published.keys()].map((name) => [name, options.names ?? until])),
    durableMaxMs: Infinity,
    raise: () => true,
  });
  const tokens = new MemoryTokens();
  for (let i = 0; i < (options.floor ?? 100); i++) tokens.next();
  return new Harness({ delay, tokens, reclaim: { maxLeaseMs: 10_000, published, open: true } });
}

describe("open reclaims: a takeover's grace, nothing published", () => {
  test("any name held back is reclaimed with a token issued before the term; a token of this term or none is refused", () => {
    const h = takenOver({ floor: 100, until: 4000 });
    const fresh = h.client("L", 5000, "fresh");
    const r = h.claim("L", 5000, { reclaim: { token: 42 } }, "r");
    expect(r.sent).toEqual([{ type: ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: 42n }]);
    expect(holding(fresh)).toBe(false);
    for (const token of [101, 0, 2 ** 60]) {
      const bad = h.claim("M", 1000, { reclaim: { token } });
      expect(bad.closeFrame?.code).toBe(ErrorCode.RECLAIM_REFUSED);
      expect(bad.closeText).toContain("not issued before");
    }
    // A slot beyond the limit (the encoder refuses to write one: the bytes are patched to limit 2).
    const frame = encodeAcquire({ name: "pool", leaseMs: 1000, owner: "", try: false, limit: 3, shared: false, reclaim: { token: 5, slot: 2 } });
    frame[11] = 2;
    const slot = h.open("slot");
    h.frame(slot, frame);
    expect(slot.closeText).toContain("not a slot");
    // After the grace: no reclaim at all, and the fresh claim is served behind the reclaimed holder.
    h.at(4000);
    h.engine.resume(h.now);
    expect(h.claim("N", 1000, { reclaim: { token: 43 } }).closeText).toContain("not in a grace");
    h.closePeer(r);
    expect(fresh.last).toEqual({ type: ACQUIRED, flags: FLAG_RECLAIMABLE, token: 101n });
  });

  test("two reclaims of one exclusive name: the later token wins, whichever comes first; the same token replaces the connection", () => {
    const h = takenOver();
    const older = h.claim("L", 5000, { reclaim: { token: 30 } }, "older");
    const newer = h.claim("L", 5000, { reclaim: { token: 40 } }, "newer");
    expect(older.closeFrame!.code).toBe(ErrorCode.RECLAIM_REFUSED);
    expect(older.closeText).toContain("later token");
    expect(holding(newer)).toBe(true);
    const late = h.claim("L", 5000, { reclaim: { token: 35 } }, "late");
    expect(late.closeFrame!.code).toBe(ErrorCode.RECLAIM_REFUSED);
    expect(late.closeText).toContain("later token (40)");
    expect(holding(newer)).toBe(true);
    const again = h.claim("L", 5000, { reclaim: { token: 40 } }, "again");
    expect(newer.closeText).toContain("replaced");
    expect(holding(again)).toBe(true);
    expect(h.engine.locks.get("L")!.holders).toBe(1);
  });

  test("shared and exclusive reclaims of one name: readers older than a writer's token give way to it, a writer older than a reader's does", () => {
    const h = takenOver();
    const r1 = h.claim("rw", 3000, { shared: true, reclaim: { token: 10 } });
    const r2 = h.claim("rw", 3000, { shared: true, reclaim: { token: 12 } });
    expect([holding(r1), holding(r2)]).toEqual([true, true]);
    // A writer granted after both readers left (token 20) makes them stale.
    const w = h.claim("rw", 3000, { reclaim: { token: 20 } });
    expect(holding(w)).toBe(true);
    expect([r1.closeFrame!.code, r2.closeFrame!.code]).toEqual([ErrorCode.RECLAIM_REFUSED, ErrorCode.RECLAIM_REFUSED]);
    // A reader older than the writer is refused; one newer (granted after the writer left) makes the writer stale.
    expect(h.claim("rw", 3000, { shared: true, reclaim: { token: 15 } }).closeText).toContain("later token (20)");
    const r3 = h.claim("rw", 3000, { shared: true, reclaim: { token: 25 } });
    expect(holding(r3)).toBe(true);
    expect(w.closeText).toContain("stale");
    // A writer older than a reader is refused.
    expect(h.claim("rw", 3000, { reclaim: { token: 22 } }).closeText).toContain("later token (25)");
    expect(h.engine.locks.get("rw")!.holderList().map((x) => x.token)).toEqual([25]);
  });

  test("a semaphore's slots: distinct slots side by side, one slot's later token wins", () => {
    const h = takenOver();
    const a = h.claim("pool", 1000, { limit: 3, reclaim: { token: 50, slot: 1 } });
    const b = h.claim("pool", 1000, { limit: 3, reclaim: { token: 40, slot: 0 } });
    expect([holding(a), holding(b)]).toEqual([true, true]);
    expect(h.claim("pool", 1000, { limit: 3, reclaim: { token: 45, slot: 1 } }).closeText).toContain("later token (50)");
    const c = h.claim("pool", 1000, { limit: 3, reclaim: { token: 60, slot: 0 } });
    expect(holding(c)).toBe(true);
    expect(b.closeText).toContain("stale");
    expect(h.engine.locks.get("pool")!.holderList().map((x) => [x.token, x.slot])).toEqual([[50, 1], [60, 0]]);
    // A limit that differs is refused before anything (LIMIT_MISMATCH), like any claim.
    expect(h.claim("pool", 1000, { limit: 4, reclaim: { token: 61, slot: 0 } }).closeFrame!.code).toBe(ErrorCode.LIMIT_MISMATCH);
  });

  test("once only published names are held back, an unpublished grant is refused, a published one still reclaimed", () => {
    const published = new Map([["P", [{ token: 70, slot: NO_SLOT, limit: 1, leaseMs: 5000 } satisfies ReclaimEntry]]]);
    const h = takenOver({ until: 1000, names: 8000, published });
    h.at(1000);
    expect(h.claim("Q", 5000, { reclaim: { token: 71 } }).closeText).toContain("not in a grace");
    expect(h.claim("P", 5000, { reclaim: { token: 69 } }).closeText).toContain("no such grant");
    expect(holding(h.claim("P", 5000, { reclaim: { token: 70 } }))).toBe(true);
  });
});

describe("a stop inside the grace", () => {
  test("publishes its own reclaimable grants and, with the time, the published ones nobody reclaimed whose names still wait", () => {
    const published = new Map<string, ReclaimEntry[]>([
      ["a", [{ token: 7, slot: NO_SLOT, limit: 1, leaseMs: 5000 }]],
      ["b", [{ token: 8, slot: NO_SLOT, limit: 1, leaseMs: 5000 }]],
      ["early", [{ token: 9, slot: NO_SLOT, limit: 1, leaseMs: 500 }]],
    ]);
    const delay = new LockDelay({ why: "released", until: 0, names: new Map([["a", 4000], ["b", 4000], ["early", 400]]), durableMaxMs: Infinity, raise: () => true });
    const tokens = new MemoryTokens();
    for (let i = 0; i < 100; i++) tokens.next();
    const h = new Harness({ delay, tokens, reclaim: { maxLeaseMs: 10_000, published } });
    const a = h.claim("a", 5000, { reclaim: { token: 7 } });
    expect(holding(a)).toBe(true);
    const fresh = h.client("free", 5000);
    h.at(1000);
    const grants = h.engine.reclaimableGrants(h.now);
    // "a" is held here (its reclaim), "b" still awaits its holder, "early" no longer waits, "free" is this run's.
    expect(Object.fromEntries(grants)).toEqual({
      b: [{ token: 8, slot: NO_SLOT, limit: 1, leaseMs: 5000 }],
      a: [{ token: 7, slot: NO_SLOT, limit: 1, leaseMs: 5000 }],
      free: [{ token: fresh.session!.token, slot: NO_SLOT, limit: 1, leaseMs: 5000 }],
    });
    // A reclaim that left is not published again; without the time only this run's holders are.
    h.closePeer(a);
    expect([...h.engine.reclaimableGrants(h.now).keys()].sort()).toEqual(["b", "free"]);
    expect([...h.engine.reclaimableGrants().keys()]).toEqual(["free"]);
  });
});
