// The ops server's walk machinery alone: the queue that runs every walk over
// the lock table a slice per turn (src/server/ops-slices.ts), and the top-k
// selection that picks a page or a view from what a walk offers (views.ts).
import { expect, test } from "bun:test";
import { SliceQueue } from "../../src/server/ops-slices.ts";
import { TopK } from "../../src/server/views.ts";

/** The number of the current turn of the event loop, counted by one setImmediate chain. */
function turns(): { readonly now: number; stop(): void } {
  let turn = 0;
  let done = false;
  const tick = () => {
    if (done) return;
    turn++;
    setImmediate(tick);
  };
  setImmediate(tick);
  return {
    get now() {
      return turn;
    },
    stop: () => (done = true),
  };
}

test("walks take turns, one slice of one walk per turn of the event loop, none in the caller's turn", async () => {
  const queue = new SliceQueue(2);
  const clock = turns();
  const seen: { walk: string; item: number; turn: number }[] = [];
  const walk = (name: string, n: number) =>
    queue.walk(Array.from({ length: n }, (_, i) => i).values(), (item) => seen.push({ walk: name, item, turn: clock.now }));
  const done = Promise.all([walk("a", 5), walk("b", 3), walk("c", 1)]);
  expect(seen).toEqual([]); // queued, not run in this turn
  await done;
  clock.stop();
  const order = seen.map((s) => `${s.walk}${s.item}`).join(" ");
  expect(order).toBe("a0 a1 b0 b1 c0 a2 a3 b2 a4");
  // Never more than one slice in one turn, whatever the number of walks.
  const perTurn = new Map<number, number>();
  for (const s of seen) perTurn.set(s.turn, (perTurn.get(s.turn) ?? 0) + 1);
  expect(Math.max(...perTurn.values())).toBeLessThanOrEqual(2);
  expect(new Set(seen.map((s) => `${s.walk}@${s.turn}`)).size).toBe(perTurn.size);
});

test("a walk whose step throws is rejected; the others go on; stop drops what is queued", async () => {
  const queue = new SliceQueue(3);
  const sums = { good: 0 };
  const bad = queue.walk([1, 2, 3, 4, 5].values(), (n) => {
    if (n === 4) throw new Error("step 4");
  });
  const good = queue.walk([1, 2, 3, 4, 5, 6, 7].values(), (n) => (sums.good += n));
  await expect(bad).rejects.toThrow("step 4");
  await good;
  expect(sums.good).toBe(28);

  let stepped = 0;
  let settled = false;
  queue.walk([1, 2, 3].values(), () => stepped++).finally(() => (settled = true));
  queue.stop();
  // Another walk on the same queue still runs (stop drops, it does not break the queue).
  await queue.walk([1].values(), () => {});
  expect(stepped).toBe(0);
  expect(settled).toBe(false);
});

test("TopK keeps the first `limit` in order, whatever the order of the offers, and counts every offer", () => {
  let seed = 12345;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const byValue = (a: { v: number; name: string }, b: { v: number; name: string }) => a.v - b.v || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  for (let round = 0; round < 200; round++) {
    const n = Math.floor(random() * 300);
    const limit = 1 + Math.floor(random() * 40);
    // Few distinct values: many ties, broken by name.
    const items = Array.from({ length: n }, (_, i) => ({ v: Math.floor(random() * 10), name: `n${i}` }));
    const top = new TopK(limit, byValue);
    for (const item of items) top.offer(item);
    expect(top.finish()).toEqual([...items].sort(byValue).slice(0, limit));
    expect(top.offered).toBe(n);
  }
});
