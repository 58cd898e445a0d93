// Semaphores and shared locks as the ops API shows them: the lock's limit
// and mode, every holder (slot or shared) in pages of their own, each
// waiter's mode; force-release of the holder named among all of them (by
// session or token; none of them: 409), the oldest without a name; kick of
// a semaphore's and a shared lock's waiter.
import { describe, expect, test } from "bun:test";
import { decodeSlot, ErrorCode, FrameType } from "../../src/protocol/index.ts";
import type { HolderView, LockSource, LockView } from "../../src/ops/sources.ts";
import { SliceQueue } from "../../src/ops/slices.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon, type TestDaemon } from "./harness.ts";

const TOKEN = "semaphore-views-admin-token";

interface View extends LockView {
  holdersNext: string | null;
  next: string | null;
}

async function view(ops: TestDaemon, path: string): Promise<View> {
  const response = await ops.get(path);
  expect(response.status).toBe(200);
  return body<View>(response);
}

function slotOf(peer: WirePeer, frame = 0): number {
  const f = peer.frames[frame]!;
  return decodeSlot(f.body, 0, f.body.length);
}

/** `n` claims of `name` with `limit` (or shared), one after the other. */
async function claims(ops: TestDaemon, name: string, n: number, options: { limit?: number; shared?: boolean }, prefix: string): Promise<WirePeer[]> {
  const peers: WirePeer[] = [];
  for (let i = 0; i < n; i++) peers.push(await WirePeer.claim(ops.port, name, 60_000, { ...options, owner: `${prefix}${i}` }));
  return peers;
}

function endAll(...groups: WirePeer[][]): void {
  for (const group of groups) for (const p of group) p.end();
}

describe("the views of a semaphore and a shared lock", () => {
  test("a semaphore of 3: its limit and mode, the three holders with their slots and tokens, the waiter's limit; the listing's row the same", async () => {
    await using ops = startDaemon();
    const holders = await claims(ops, "pool", 3, { limit: 3 }, "h");
    const [waiter] = await claims(ops, "pool", 1, { limit: 3 }, "w");
    expect(holders.map((p) => p.frames[0]!.type)).toEqual([FrameType.ACQUIRED, FrameType.ACQUIRED, FrameType.ACQUIRED]);
    expect(waiter!.frames[0]!.type).toBe(FrameType.WAITING);
    const v = await view(ops, "/v1/locks/pool");
    expect(v).toMatchObject({ name: "pool", limit: 3, mode: "semaphore", holding: 3, waiting: 1, holdersNext: null, next: null });
    expect(v.holders.map((h) => [h.owner, h.slot, h.shared, h.token])).toEqual(
      holders.map((p, i) => [`h${i}`, slotOf(p), false, p.frames[0]!.token!.toString()]),
    );
    expect(v.holders.map((h) => h.slot)).toEqual([0, 1, 2]);
    // `holder` is still there, the oldest.
    expect(v.holder).toMatchObject({ session: v.holders[0]!.session, token: v.holders[0]!.token, slot: 0 });
    expect(v.waiters).toHaveLength(1);
    expect(v.waiters[0]).toMatchObject({ owner: "w0", position: 1, shared: false, limit: 3 });
    const list = await body<{ locks: LockView[] }>(await ops.get("/v1/locks"));
    expect(list.locks).toHaveLength(1);
    expect(list.locks[0]).toMatchObject({ name: "pool", limit: 3, mode: "semaphore", holding: 3, waiting: 1 });
    expect(list.locks[0]!.holders.map((h) => h.slot)).toEqual([0, 1, 2]);
    expect(list.locks[0]!.waiters[0]).toMatchObject({ shared: false, limit: 3 });
    endAll(holders, [waiter!]);
  });

  test("an exclusive holder with shared waiters, then the shared batch: modes, and every shared holder shown", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [writer] = await claims(ops, "rw", 1, {}, "writer");
    const readers = await claims(ops, "rw", 3, { shared: true }, "r");
    const before = await view(ops, "/v1/locks/rw");
    expect(before).toMatchObject({ limit: 1, mode: "exclusive", holding: 1, waiting: 3 });
    expect(before.holders.map((h) => h.session)).toEqual([before.holder!.session]);
    expect(before.holder).toMatchObject({ owner: "writer0", slot: null, shared: false });
    expect(before.waiters.map((w) => [w.owner, w.shared, w.limit])).toEqual([["r0", true, 1], ["r1", true, 1], ["r2", true, 1]]);
    // Force-release of the writer lets the whole batch in: the answer says how many.
    const released = await ops.post(`/v1/locks/rw/force-release?session=${before.holder!.session}`, TOKEN);
    expect(released.status).toBe(200);
    const answer = await body(released);
    expect(answer.released).toMatchObject({ owner: "writer0", shared: false });
    expect(answer.promoted).toMatchObject({ owner: "r0", shared: true, slot: null });
    expect(answer.promotedCount).toBe(3);
    for (const r of readers) expect((await r.frame(1)).type).toBe(FrameType.ACQUIRED);
    const after = await view(ops, "/v1/locks/rw");
    expect(after).toMatchObject({ limit: 1, mode: "shared", holding: 3, waiting: 0 });
    expect(after.holders.map((h) => [h.owner, h.shared, h.slot])).toEqual([["r0", true, null], ["r1", true, null], ["r2", true, null]]);
    expect((await writer!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    endAll(readers);
  });
});

describe("the holders in pages", () => {
  /** Every page of a lock's holders, following `holdersNext`; `between` runs after each page is read. */
  async function pages(ops: TestDaemon, name: string, size: number, between: (page: number) => void | Promise<void> = () => {}): Promise<View[]> {
    const out: View[] = [];
    let cursor: string | null = null;
    for (let round = 0; round < 100; round++) {
      const page: View = await view(ops, `/v1/locks/${encodeURIComponent(name)}?holders=${size}&limit=1${cursor === null ? "" : `&holdersCursor=${cursor}`}`);
      out.push(page);
      expect(page.holders.length).toBeLessThanOrEqual(size);
      cursor = page.holdersNext;
      if (cursor === null) return out;
      await between(round);
    }
    throw new Error("more than 100 pages");
  }

  test("pages of `holders` with `holdersNext` show every holder once, oldest first; the waiters' paging is its own", async () => {
    await using ops = startDaemon();
    const holders = await claims(ops, "wide", 7, { limit: 10 }, "h");
    const waiters = await claims(ops, "wide", 0, { limit: 10 }, "w");
    const shown = await pages(ops, "wide", 3);
    expect(shown.map((p) => p.holders.length)).toEqual([3, 3, 1]);
    expect(shown.flatMap((p) => p.holders.map((h) => h.owner))).toEqual(holders.map((_, i) => `h${i}`));
    expect(shown.flatMap((p) => p.holders.map((h) => h.slot))).toEqual([0, 1, 2, 3, 4, 5, 6]);
    for (const p of shown) expect(p.holding).toBe(7);
    // Bad sizes and cursors are refused, naming the parameter.
    const bad = await ops.get("/v1/locks/wide?holders=0");
    expect(bad.status).toBe(400);
    expect((await body(bad)).error).toMatchObject({ code: "BAD_LIMIT" });
    expect((await body(await ops.get("/v1/locks/wide?holders=1001"))).error.message).toContain("holders must be a whole number in 1..1000");
    const cursor = await ops.get("/v1/locks/wide?holdersCursor=bm9wZQ");
    expect(cursor.status).toBe(400);
    const cursorError = (await body(cursor)).error;
    expect(cursorError.code).toBe("BAD_CURSOR");
    expect(cursorError.message).toContain("holdersCursor");
    // A waiter cursor is not a holder cursor.
    const w = await WirePeer.claim(ops.port, "wide", 60_000, { limit: 10, owner: "x" });
    const withWaiter = await claims(ops, "wide", 4, { limit: 10 }, "q");
    const page = await view(ops, "/v1/locks/wide?limit=1");
    expect(page.next).not.toBeNull();
    expect((await ops.get(`/v1/locks/wide?holdersCursor=${page.next}`)).status).toBe(400);
    endAll(holders, waiters, [w], withWaiter);
  });

  test("while holders end and new ones are granted between pages (a walk over several turns), each holder that stays is shown once", async () => {
    // A slice of 2: every page's walk spans several turns, with lock traffic in between.
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 2 } });
    const holders = await claims(ops, "churn", 16, { shared: true }, "h");
    const leaving = new Set([0, 1, 5, 6, 9]);
    const stayed = holders.map((_, i) => `h${i}`).filter((_, i) => !leaving.has(i));
    const joined: WirePeer[] = [];
    const shown = await pages(ops, "churn", 3, async (round) => {
      for (const i of [...leaving].filter((i) => i < 3 * (round + 2))) {
        leaving.delete(i);
        holders[i]!.end();
        await holders[i]!.closed();
      }
      joined.push(await WirePeer.claim(ops.port, "churn", 60_000, { shared: true, owner: `late${round}` }));
    });
    const owners = shown.flatMap((p) => p.holders.map((h) => h.owner));
    expect(new Set(owners).size).toBe(owners.length);
    for (const owner of stayed) expect(owners).toContain(owner);
    // Holders granted after the walk began are reached at the end: the first late one at least.
    expect(owners).toContain("late0");
    // Tokens rise along the pages.
    const tokens = shown.flatMap((p) => p.holders.map((h) => BigInt(h.token)));
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    endAll(holders, joined);
  });

  test("1,100 shared holders: the default view shows 1,000 with holdersNext, the next page the rest; no turn builds more than a slice of holders", async () => {
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 64 } });
    const peers: WirePeer[] = [];
    for (let i = 0; i < 1100; i += 100) {
      const batch = await Promise.all(Array.from({ length: 100 }, (_, j) => WirePeer.claim(ops.port, "readers", 60_000, { shared: true, owner: `r${i + j}` })));
      for (const p of batch) expect(p.frames[0]!.type).toBe(FrameType.ACQUIRED);
      peers.push(...batch);
    }
    const rows = holderRowsPerTurn(ops);
    try {
      const first = await view(ops, "/v1/locks/readers");
      expect(first).toMatchObject({ mode: "shared", holding: 1100 });
      expect(first.holders).toHaveLength(1000);
      expect(first.holdersNext).not.toBeNull();
      const second = await view(ops, `/v1/locks/readers?holdersCursor=${first.holdersNext}`);
      expect(second.holders).toHaveLength(100);
      expect(second.holdersNext).toBeNull();
      expect(new Set([...first.holders, ...second.holders].map((h) => h.owner)).size).toBe(1100);
      // The listing shows the first 100 of them; `holding` counts all.
      const list = await body<{ locks: LockView[] }>(await ops.get("/v1/locks"));
      expect(list.locks[0]!.holders).toHaveLength(100);
      expect(list.locks[0]!.holding).toBe(1100);
    } finally {
      rows.stop();
    }
    // The views' holders were built a slice at a time; the listing's 100 in its own turn.
    expect(rows.max).toBeGreaterThanOrEqual(64);
    expect(rows.max).toBeLessThanOrEqual(100);
    endAll(peers);
  }, 60_000);
});

/** Holder rows the ops server builds per turn of the event loop, at most (the source's holder walks and views counted). */
function holderRowsPerTurn(ops: TestDaemon): { readonly max: number; stop(): void } {
  const source = (ops.daemon.ops as unknown as { options: { locks: LockSource } }).options.locks;
  let inTurn = 0;
  let max = 0;
  let running = true;
  const count = (n: number) => {
    if (!running) return;
    inTurn += n;
    if (inTurn > max) max = inTurn;
  };
  const tick = () => {
    if (!running) return;
    inTurn = 0;
    setImmediate(tick);
  };
  setImmediate(tick);
  const lock = source.lock.bind(source);
  const holders = source.holders.bind(source);
  source.lock = (name, now, maxWaiters, maxHolders) => {
    const v = lock(name, now, maxWaiters, maxHolders);
    if (v !== null) count(v.holders.length);
    return v;
  };
  source.holders = (name) => {
    const walk = holders(name);
    if (walk !== null) {
      const viewOf = walk.view.bind(walk);
      walk.view = (now) => (count(1), viewOf(now));
    }
    return walk;
  };
  return {
    get max() {
      return max;
    },
    stop() {
      running = false;
    },
  };
}

describe("force-release of one chosen holder", () => {
  test("?session= releases that holder of a semaphore, not the oldest; the waiter gets its slot", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const holders = await claims(ops, "pool", 3, { limit: 3 }, "h");
    const [waiter] = await claims(ops, "pool", 1, { limit: 3 }, "w");
    const v = await view(ops, "/v1/locks/pool");
    const middle = v.holders[1]!;
    const done = await ops.post(`/v1/locks/pool/force-release?session=${middle.session}&token=${middle.token}`, TOKEN);
    expect(done.status).toBe(200);
    const answer = await body<{ released: HolderView; promoted: HolderView; promotedCount: number }>(done);
    expect(answer.released).toMatchObject({ session: middle.session, owner: "h1", slot: 1 });
    expect(answer.promoted).toMatchObject({ owner: "w0", slot: 1 });
    expect(answer.promotedCount).toBe(1);
    expect((await holders[1]!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect((await waiter!.frame(1)).type).toBe(FrameType.ACQUIRED);
    expect(slotOf(waiter!, 1)).toBe(1);
    // The others were not touched.
    expect(holders[0]!.frames).toHaveLength(1);
    expect(holders[2]!.frames).toHaveLength(1);
    const after = await view(ops, "/v1/locks/pool");
    expect(after.holders.map((h) => [h.owner, h.slot])).toEqual([["h0", 0], ["h2", 2], ["w0", 1]]);
    expect(ops.logs.find((l) => l.event === "admin.force_release")).toMatchObject({ lock: "pool", session: middle.session, promoted: answer.promoted.session });
    endAll(holders, [waiter!]);
  });

  test("?token= alone finds its holder among them (a walk through the slice queue)", async () => {
    await using ops = startDaemon({ adminToken: TOKEN, opsLimits: { metricsMaxAgeMs: 0, scanSlice: 1 } });
    const holders = await claims(ops, "rw", 5, { shared: true }, "r");
    const v = await view(ops, "/v1/locks/rw");
    const fourth = v.holders[3]!;
    const done = await ops.post(`/v1/locks/rw/force-release?token=${fourth.token}`, TOKEN);
    expect(done.status).toBe(200);
    expect((await body(done)).released).toMatchObject({ session: fourth.session, owner: "r3", shared: true });
    expect((await holders[3]!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    const after = await view(ops, "/v1/locks/rw");
    expect(after.holders.map((h) => h.owner)).toEqual(["r0", "r1", "r2", "r4"]);
    // The ?name= form takes it too.
    const last = after.holders[3]!;
    expect((await ops.post(`/v1/locks/force-release?name=rw&token=${last.token}`, TOKEN)).status).toBe(200);
    expect((await holders[4]!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    endAll(holders);
  });

  test("none of the holders is the one named: 409 HOLDER_CHANGED, nothing released; no name: the oldest", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const holders = await claims(ops, "pool", 3, { limit: 3 }, "h");
    const v = await view(ops, "/v1/locks/pool");
    const gone = v.holders[2]!;
    holders[2]!.end();
    await holders[2]!.closed();
    const oldest = v.holders[0]!;
    for (const query of [`session=${gone.session}`, `token=${gone.token}`, `session=${gone.session}&token=${gone.token}`]) {
      const refused = await ops.post(`/v1/locks/pool/force-release?${query}`, TOKEN);
      expect(refused.status, query).toBe(409);
      const answer = await body(refused);
      expect(answer.error.code).toBe("HOLDER_CHANGED");
      expect(answer.error.message).toContain(`"pool" has 2 holders and none is the`);
      expect(answer.error.message).toContain(`the oldest is session ${oldest.session} (owner "h0") with token ${oldest.token}`);
      expect(answer.error.message).toContain("nothing was released");
      expect(answer.holder).toMatchObject({ session: oldest.session, token: oldest.token });
    }
    // A holder's session with another holder's token: that holder, shown.
    const mixed = await ops.post(`/v1/locks/pool/force-release?session=${v.holders[1]!.session}&token=${oldest.token}`, TOKEN);
    expect(mixed.status).toBe(409);
    const mixedAnswer = await body(mixed);
    expect(mixedAnswer.error.message).toContain(`is held by session ${v.holders[1]!.session} (owner "h1") with token ${v.holders[1]!.token}`);
    expect(mixedAnswer.holder).toMatchObject({ session: v.holders[1]!.session });
    expect(holders[0]!.frames).toHaveLength(1);
    expect(holders[1]!.frames).toHaveLength(1);
    expect(ops.daemon.ops.stats.forceReleases).toBe(0);
    // Without a name: the oldest holder.
    const done = await ops.post("/v1/locks/pool/force-release", TOKEN);
    expect(done.status).toBe(200);
    expect((await body(done)).released).toMatchObject({ session: oldest.session, slot: 0 });
    expect((await holders[0]!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    endAll(holders);
  });

  test("kick works on a semaphore's waiter and a shared waiter; the others keep their places", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const holders = await claims(ops, "pool", 2, { limit: 2 }, "h");
    const waiters = await claims(ops, "pool", 3, { limit: 2 }, "w");
    const [writer] = await claims(ops, "rw", 1, {}, "writer");
    const readers = await claims(ops, "rw", 2, { shared: true }, "r");
    const pool = await view(ops, "/v1/locks/pool");
    const kicked = await ops.post(`/v1/sessions/${pool.waiters[1]!.session}/kick?lock=pool`, TOKEN);
    expect(kicked.status).toBe(200);
    expect((await body(kicked)).kicked).toMatchObject({ owner: "w1", position: 2, limit: 2, shared: false });
    expect((await waiters[1]!.frame(1)).code).toBe(ErrorCode.KICKED);
    expect((await view(ops, "/v1/locks/pool")).waiters.map((w) => [w.owner, w.position])).toEqual([["w0", 1], ["w2", 2]]);
    const rw = await view(ops, "/v1/locks/rw");
    const reader = await ops.post(`/v1/sessions/${rw.waiters[0]!.session}/kick?lock=rw`, TOKEN);
    expect(reader.status).toBe(200);
    expect((await body(reader)).kicked).toMatchObject({ owner: "r0", shared: true, limit: 1 });
    expect((await readers[0]!.frame(1)).code).toBe(ErrorCode.KICKED);
    // A holder of a semaphore is not kicked: force-release is the action.
    const holder = await ops.post(`/v1/sessions/${pool.holders[0]!.session}/kick`, TOKEN);
    expect(holder.status).toBe(409);
    expect((await body(holder)).error.code).toBe("NOT_WAITING");
    endAll(holders, waiters, [writer!], readers);
  });
});

test("holdersPage over a fake walk: one slice per turn, resumes after the cursor's token", async () => {
  // A direct check of the paging against a walk that does not touch the engine.
  const { holdersPage } = await import("../../src/ops/views.ts");
  const tokens = [3, 5, 8, 13, 21];
  let i = -1;
  const walk = {
    restarted: false,
    next: () => ++i < tokens.length,
    get session() {
      return i + 1;
    },
    get token() {
      return tokens[i]!;
    },
    view: (): HolderView => ({ session: i + 1, owner: "", remote: "", leaseMs: 0, silentForMs: 0, token: String(tokens[i]), heldForMs: 0, slot: null, shared: true }),
  };
  const page = await holdersPage(new SliceQueue(1), walk, { session: 2, token: 5 }, 2);
  expect(page.holders.map((h) => h.token)).toEqual(["8", "13"]);
  expect(page.next).not.toBeNull();
});
