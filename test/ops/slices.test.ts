// The ops server's walk machinery: the queue that runs every walk over the
// lock table a slice per turn (src/ops/slices.ts), alone and as the
// ops server shares it, and the top-k selection that picks a page or a view
// from what a walk offers (views.ts).
import { expect, test } from "bun:test";
import { SliceQueue } from "../../src/ops/slices.ts";
import { TopK } from "../../src/ops/views.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon } from "./harness.ts";

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

test("the ops server's listings and its /ui page share one queue: one slice per turn between them", async () => {
  await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 1 } });
  const peers: WirePeer[] = [];
  for (let i = 0; i < 40; i++) peers.push(await WirePeer.claim(ops.port, `q${i}`, 60_000));
  const server = ops.daemon.ops;
  // Both asked in this turn, in-process: a listing (through the server's own router) and the page's data.
  const request = { method: "GET", target: "/v1/locks", remote: "127.0.0.1:1", header: () => null };
  const clock = turns();
  const [listing, board] = await Promise.all([
    (server as unknown as { handle(r: typeof request): Promise<{ status: number }> }).handle(request),
    server.board.handle("GET", "/ui/v1/board", ""),
  ]);
  clock.stop();
  expect(listing.status).toBe(200);
  expect(board!.status).toBe(200);
  // 41 slices for the listing, 41 for the snapshot and 41 for its view (a slice of one lock or row,
  // and one that finds the end): 123 turns in one queue; about 82 if the page had a queue of its own.
  expect(clock.now).toBeGreaterThanOrEqual(120);
  for (const p of peers) p.end();
});
