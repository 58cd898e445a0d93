// The /ui board without a browser: a real engine driven by the test harness
// (no sockets), a manual clock, and the Board's answers. What is shared,
// what is exact, what is refused.
import { afterEach, expect, test } from "bun:test";
import type { Engine } from "../../src/core/index.ts";
import type { Conn } from "../../src/server/conn.ts";
import { EngineLocks } from "../../src/server/locks.ts";
import type { LockSource } from "../../src/ops/sources.ts";
import type { HttpReply } from "../../src/ops/http.ts";
import { Board, DEFAULT_ROWS, INTERVAL_MS, MAX_ROWS, SAMPLES } from "../../src/ops/ui/board.ts";
import { type FakeConn, Harness } from "../helpers/engine.ts";

const boards: Board[] = [];
afterEach(() => {
  for (const board of boards.splice(0)) board.stop();
});

let port = 40000;
/** A harness whose connections look like sockets to the views (an address and a port). */
function harness(): Harness {
  const h = new Harness();
  const open = h.open.bind(h);
  h.open = (name?: string) => Object.assign(open(name), { socket: { remoteAddress: "127.0.0.1", remotePort: port++ } });
  return h;
}

function board(h: Harness, scanSlice = 16_384): Board {
  const b = new Board({ locks: new EngineLocks(h.engine as unknown as Engine<Conn>), scanSlice, version: "0.0.0-test", now: () => h.now });
  boards.push(b);
  return b;
}

async function get(b: Board, target: string, method = "GET"): Promise<HttpReply> {
  const q = target.indexOf("?");
  const reply = b.handle(method, q < 0 ? target : target.slice(0, q), q < 0 ? "" : target.slice(q + 1));
  if (reply === null) throw new Error(`no /ui route for ${target}`);
  return reply;
}

function json(reply: HttpReply): any {
  expect(reply.status).toBe(200);
  return JSON.parse(typeof reply.body === "string" ? reply.body : new TextDecoder().decode(reply.body));
}

function hold(h: Harness, name: string, owner = ""): FakeConn {
  const conn = h.open(name);
  h.acquire(conn, name, 60_000, { owner });
  return conn;
}

test("pages asking within one interval share one snapshot, and the same query one built body; the next interval sees changes", async () => {
  const h = harness();
  hold(h, "a");
  hold(h, "b");
  const b = board(h);
  const replies = await Promise.all(Array.from({ length: 20 }, () => get(b, "/ui/v1/board?sort=name")));
  expect(b.snapshotsBuilt).toBe(1);
  expect(b.viewsBuilt).toBe(1);
  for (const reply of replies) expect(reply.body).toBe(replies[0]!.body); // the same bytes, built once
  expect(json(replies[0]!).locks.rows.map((r: any) => r.name)).toEqual(["a", "b"]);

  // Another query in the same interval: a new view of the same snapshot.
  hold(h, "ab");
  h.now += INTERVAL_MS - 1;
  const filtered = json(await get(b, "/ui/v1/board?prefix=a"));
  expect(b.snapshotsBuilt).toBe(1);
  expect(b.viewsBuilt).toBe(2);
  expect(filtered.locks.rows.map((r: any) => r.name)).toEqual(["a"]); // "ab" came after the snapshot
  expect(filtered.locks.matched).toBe(1);

  h.now += 1;
  const next = json(await get(b, "/ui/v1/board?prefix=a"));
  expect(b.snapshotsBuilt).toBe(2);
  expect(next.locks.rows.map((r: any) => r.name)).toEqual(["a", "ab"]);
  expect(next.locks).toMatchObject({ total: 3, matched: 2, prefix: "a", sort: "name", dir: "asc", limit: DEFAULT_ROWS });
  expect(next.totals.locks).toBe(3);
  expect(next.totals.sessions).toEqual({ connected: 0, waiting: 0, owner: 3 });
});

test("a snapshot of many locks is walked scanSlice locks per turn of the event loop, and its counts are exact", async () => {
  const h = harness();
  for (let i = 0; i < 1000; i++) hold(h, `k/${String(i).padStart(4, "0")}`);
  const b = board(h, 64);
  let turns = 0;
  let done = false;
  const counting = () => {
    if (done) return;
    turns++;
    setImmediate(counting);
  };
  setImmediate(counting);
  const reply = await get(b, "/ui/v1/board?prefix=k/09&limit=5&sort=name&dir=desc");
  done = true;
  // 1000 locks in slices of 64 (then 1000 rows for the view): other callbacks ran in between.
  expect(turns).toBeGreaterThanOrEqual(Math.floor(1000 / 64));
  const body = json(reply);
  expect(b.snapshotsBuilt).toBe(1);
  expect(body.locks.total).toBe(1000);
  expect(body.locks.matched).toBe(100);
  expect(body.locks.rows.map((r: any) => r.name)).toEqual(["k/0999", "k/0998", "k/0997", "k/0996", "k/0995"]);
});

test("a walk that outlasts the interval is shared, not doubled: requests during it wait for it", async () => {
  const h = harness();
  for (let i = 0; i < 300; i++) hold(h, `w/${i}`);
  const b = board(h, 10);
  const first = get(b, "/ui/v1/board");
  h.now += 5 * INTERVAL_MS; // the walk is still going (30 turns)
  const second = get(b, "/ui/v1/board?prefix=w/1");
  const [a, c] = [json(await first), json(await second)];
  expect(b.snapshotsBuilt).toBe(1);
  expect(a.locks.total).toBe(300);
  expect(c.locks.matched).toBe(111); // w/1, w/10..w/19, w/100..w/199
  const third = json(await get(b, "/ui/v1/board"));
  expect(b.snapshotsBuilt).toBe(2); // complete and older than an interval: a new one
  expect(third.locks.total).toBe(300);
});

test("rows carry holder, token, waiters and the oldest wait, and sort by each column with ties by name", async () => {
  const h = harness();
  hold(h, "free-soon", "x"); // held, no waiters
  const busy = hold(h, "busy", "holder-1");
  h.now += 500;
  const w1 = h.open("w1");
  h.acquire(w1, "busy", 60_000, { owner: "w1" });
  h.now += 250;
  const w2 = h.open("w2");
  h.acquire(w2, "busy", 60_000, { owner: "w2" });
  h.now += 250;
  hold(h, "late", "late-holder");
  const b = board(h);
  const body = json(await get(b, "/ui/v1/board?sort=waiting&dir=desc"));
  const rows = body.locks.rows;
  expect(rows.map((r: any) => r.name)).toEqual(["busy", "free-soon", "late"]);
  expect(rows[0]).toMatchObject({ name: "busy", owner: "holder-1", heldForMs: 1000, waiting: 2, oldestWaitMs: 500, session: busy.session!.id });
  expect(rows[0].remote).toMatch(/^127\.0\.0\.1:\d+$/);
  expect(rows[0].token).toMatch(/^\d+$/);
  expect(rows[2]).toMatchObject({ name: "late", heldForMs: 0, waiting: 0, oldestWaitMs: -1 });
  const order = async (query: string) => json(await get(b, `/ui/v1/board?${query}`)).locks.rows.map((r: any) => r.name);
  expect(await order("sort=held&dir=desc")).toEqual(["busy", "free-soon", "late"]);
  expect(await order("sort=held&dir=asc")).toEqual(["late", "busy", "free-soon"]); // late 0; busy and free-soon 1000 each, by name
  expect(await order("sort=wait&dir=desc")).toEqual(["busy", "free-soon", "late"]);
  expect(await order("sort=name&dir=desc")).toEqual(["late", "free-soon", "busy"]);
  expect(await order("limit=1&sort=held&dir=asc")).toEqual(["late"]);
});

test("bad queries name the parameter (400); other methods are 405; unknown /ui paths 404; every answer carries the page's security headers", async () => {
  const b = board(harness());
  const cases: [string, string][] = [
    ["/ui/v1/board?sort=owner", "sort must be one of name, held, waiting, wait"],
    ["/ui/v1/board?dir=up", "dir must be asc or desc"],
    ["/ui/v1/board?limit=0", `limit must be a whole number in 1..${MAX_ROWS}`],
    [`/ui/v1/board?limit=${MAX_ROWS + 1}`, `limit must be a whole number in 1..${MAX_ROWS}`],
    ["/ui/v1/board?prefix=%E0%A4", "prefix is not valid percent-encoded UTF-8"],
    [`/ui/v1/board?prefix=${"x".repeat(513)}`, "prefix is longer than a lock name can be (512 bytes)"],
  ];
  for (const [target, message] of cases) {
    const reply = await get(b, target);
    expect(reply.status).toBe(400);
    expect(JSON.parse(String(reply.body)).error).toEqual({ code: "BAD_QUERY", message });
  }
  const post = await get(b, "/ui", "POST");
  expect(post.status).toBe(405);
  expect(post.headers.allow).toBe("GET");
  expect((await get(b, "/ui/nope.js")).status).toBe(404);
  expect(b.handle("GET", "/uix", "")).toBeNull(); // not a /ui path: the ops server's 404
  for (const target of ["/ui", "/ui/", "/ui/ops-ui.js", "/ui/ops-ui.css", "/ui/v1/board", "/ui/nope", "/ui/v1/board?dir=x"]) {
    const reply = await get(b, target);
    expect(reply.headers["content-security-policy"]).toContain("script-src 'self'");
    expect(reply.headers["content-security-policy"]).toContain("frame-ancestors 'none'");
    expect(reply.headers["x-content-type-options"]).toBeUndefined(); // ops-http adds it to every answer, once
    expect(reply.headers["referrer-policy"]).toBe("no-referrer");
  }
  const html = new TextDecoder().decode((await get(b, "/ui")).body as Uint8Array);
  expect(html).toContain('<script src="/ui/ops-ui.js" defer></script>');
  expect(html).not.toMatch(/<script>|<style|\sstyle=|\son\w+=/); // nothing inline for the CSP to forbid
});

test("samples: one per take, grants per second over the time since the last, handover quantiles per interval, the last SAMPLES kept", async () => {
  const h = harness();
  const b = board(h);
  const stats = h.engine.stats;
  for (let i = 0; i < 4; i++) hold(h, `g${i}`);
  stats.handedOver(0, 0.004); // 4 µs
  stats.handedOver(0, 0.2); // 200 µs
  h.now += 2000;
  b.samples.take(h.now, 1_000_000);
  let series = b.samples.toJSON();
  expect(series.grantsPerSecond).toEqual([2]);
  expect(series.owner).toEqual([4]);
  expect(series.handoverP50Us).toEqual([5]); // the upper bound of its bucket
  expect(series.handoverP99Us).toEqual([250]);
  h.now += 1000;
  b.samples.take(h.now, 1_001_000);
  series = b.samples.toJSON();
  expect(series.grantsPerSecond).toEqual([2, 0]);
  expect(series.handoverP50Us).toEqual([5, null]); // no handover in that second
  for (let i = 0; i < SAMPLES + 8; i++) b.samples.take((h.now += 1000), 2_000_000 + i);
  series = b.samples.toJSON();
  expect(series.t.length).toBe(SAMPLES);
  expect(series.t[0]).toBe(2_000_008);
  expect(series.t[SAMPLES - 1]).toBe(2_000_000 + SAMPLES + 7);
});

test("with --coordinator the engine changes with each active term: the board reads the current one, and its rates start over", async () => {
  const first = harness();
  const second = harness();
  let current = first;
  for (let i = 0; i < 6; i++) hold(first, `old${i}`);
  const sources = new Map([first, second].map((h) => [h, new EngineLocks(h.engine as unknown as Engine<Conn>)]));
  const b = new Board({
    get locks() {
      return sources.get(current)!;
    },
    scanSlice: 16_384,
    version: "0.0.0-test",
    now: () => current.now,
  });
  boards.push(b);
  first.now += 1000;
  b.samples.take(first.now, 1_000_000);
  expect(b.samples.toJSON().owner).toEqual([6]);

  // A new term: a fresh engine with two holders and fewer grants than the old one counted.
  current = second;
  second.now = first.now + 1000;
  hold(second, "new-a");
  hold(second, "new-b");
  b.samples.take(second.now, 1_001_000);
  const series = b.samples.toJSON();
  expect(series.owner).toEqual([6, 2]);
  expect(series.grantsPerSecond[1]).toBe(0); // started over at the switch, never negative
  second.now += 1000;
  const rows = json(await get(b, "/ui/v1/board?sort=name")).locks.rows.map((r: any) => r.name);
  expect(rows).toEqual(["new-a", "new-b"]);
});

/** Counts turns of the event loop (one setImmediate chain) until stopped. */
function turnCounter(): { readonly turns: number; stop(): void } {
  let turns = 0;
  let done = false;
  const tick = () => {
    if (done) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  return {
    get turns() {
      return turns;
    },
    stop: () => (done = true),
  };
}

test("eight pages asking different questions at once take one slice per turn in all, not one each", async () => {
  const h = harness();
  for (let i = 0; i < 100; i++) hold(h, `p/${String(i).padStart(3, "0")}`);
  const b = board(h, 10);
  const counter = turnCounter();
  const queries = ["sort=name", "sort=held", "sort=wait", "sort=waiting", "prefix=p/0", "prefix=p/1", "dir=desc", "limit=3"];
  const bodies = (await Promise.all(queries.map((q) => get(b, `/ui/v1/board?${q}`)))).map(json);
  counter.stop();
  expect(b.snapshotsBuilt).toBe(1);
  expect(b.viewsBuilt).toBe(8);
  // The snapshot's walk (100 locks, 10 a turn) and then eight views of 100 rows each, 10 rows a turn:
  // 90 turns at least. Eight views each taking their own slice every turn would need about 20.
  expect(counter.turns).toBeGreaterThanOrEqual(10 + 8 * 10);
  expect(bodies.map((body) => body.locks.matched)).toEqual([100, 100, 100, 100, 100, 0, 100, 100]);
  expect(bodies[4].locks.rows.map((r: any) => r.name)).toEqual(Array.from({ length: 100 }, (_, i) => `p/${String(i).padStart(3, "0")}`));
  expect(bodies[6].locks.rows[0].name).toBe("p/099");
  expect(bodies[7].locks.rows.map((r: any) => r.name)).toEqual(["p/000", "p/001", "p/002"]);
});

test("a snapshot is of the engine its walk began on, when the term changes mid-walk", async () => {
  const first = harness();
  const second = harness();
  let current = first;
  for (let i = 0; i < 50; i++) hold(first, `old/${String(i).padStart(2, "0")}`);
  const waiter = first.open("w");
  first.acquire(waiter, "old/00", 60_000);
  for (let i = 0; i < 7; i++) hold(second, `new/${i}`);
  const sources = new Map([first, second].map((h) => [h, new EngineLocks(h.engine as unknown as Engine<Conn>)]));
  const b = new Board({
    get locks() {
      return sources.get(current)!;
    },
    scanSlice: 10,
    version: "0.0.0-test",
    now: () => current.now,
  });
  boards.push(b);
  let answered = false;
  const reply = get(b, "/ui/v1/board?sort=name&limit=500").then((r) => ((answered = true), r));
  // The walk's first slice runs in the next turn, before this callback; it needs six.
  await new Promise<void>((resolve) => setImmediate(resolve));
  expect(answered).toBe(false);
  current = second;
  const body = json(await reply);
  expect(body.locks.total).toBe(50);
  expect(body.locks.rows.map((r: any) => r.name)).toEqual(Array.from({ length: 50 }, (_, i) => `old/${String(i).padStart(2, "0")}`));
  expect(body.totals.locks).toBe(50);
  expect(body.totals.sessions).toEqual({ connected: 0, waiting: 1, owner: 50 }); // the old engine's counters, not the new one's
  first.now += INTERVAL_MS;
  second.now = first.now;
  const next = json(await get(b, "/ui/v1/board?sort=name&limit=500"));
  expect(next.locks.rows.map((r: any) => r.name)).toEqual(Array.from({ length: 7 }, (_, i) => `new/${i}`));
  expect(next.totals.sessions).toEqual({ connected: 0, waiting: 0, owner: 7 });
});

test("locks that come and go during the walk: each lock there from start to end is shown once, one gone before the walk reached it is not", async () => {
  const h = harness();
  const conns = new Map<string, FakeConn>();
  for (let i = 0; i < 100; i++) {
    const name = `s/${String(i).padStart(3, "0")}`;
    conns.set(name, hold(h, name));
  }
  const b = board(h, 10);
  let answered = false;
  const reply = get(b, "/ui/v1/board?sort=name&limit=500").then((r) => ((answered = true), r));
  // After the walk's first slice (s/000..s/009): two locks walked and two not yet reached go, two come.
  await new Promise<void>((resolve) => setImmediate(resolve));
  expect(answered).toBe(false);
  for (const name of ["s/003", "s/007", "s/050", "s/099"]) h.closePeer(conns.get(name)!);
  hold(h, "a-new");
  hold(h, "s/100");
  const body = json(await reply);
  const expected = [
    "a-new",
    ...Array.from({ length: 101 }, (_, i) => `s/${String(i).padStart(3, "0")}`).filter((name) => name !== "s/050" && name !== "s/099"),
  ];
  // s/003 and s/007 had been walked: they are in the snapshot, as of its moment.
  expect(body.locks.rows.map((r: any) => r.name)).toEqual(expected);
  expect(body.locks.total).toBe(expected.length);
  expect(body.totals.locks).toBe(expected.length);
});

test("a row shows the holder of the snapshot's moment, in a view built after the lock changed hands", async () => {
  const h = harness();
  const holder = hold(h, "busy", "holder-1");
  const token = String(holder.sent[0]!.token);
  h.now += 100;
  const waiter = h.open("w");
  h.acquire(waiter, "busy", 60_000, { owner: "next" });
  const b = board(h);
  const before = json(await get(b, "/ui/v1/board?sort=name")).locks.rows[0];
  h.closePeer(holder); // "next" holds it now
  h.now += 10;
  const after = json(await get(b, "/ui/v1/board?sort=held")).locks.rows[0]; // another view of the same snapshot
  expect(b.snapshotsBuilt).toBe(1);
  expect(b.viewsBuilt).toBe(2);
  for (const row of [before, after]) {
    expect(Object.keys(row)).toEqual(["name", "limit", "mode", "holders", "session", "owner", "remote", "token", "heldForMs", "waiting", "oldestWaitMs"]);
    expect(row).toMatchObject({ name: "busy", session: holder.session!.id, owner: "holder-1", token, heldForMs: 100, waiting: 1, oldestWaitMs: 0 });
  }
  expect(after.remote).toBe(before.remote);
});

test("a snapshot whose walk failed is not shared: the request gets the error, the next one a new snapshot", async () => {
  const h = harness();
  hold(h, "ok");
  let broken = true;
  const locks = new EngineLocks(h.engine as unknown as Engine<Conn>);
  // The same table, whose rows cannot be walked.
  const failing: LockSource = Object.assign(Object.create(locks) as LockSource, {
    rows: () => ({
      next: () => {
        throw new Error("walk failed");
      },
    }),
  });
  const b = new Board({
    get locks() {
      return broken ? failing : locks;
    },
    scanSlice: 16_384,
    version: "0.0.0-test",
    now: () => h.now,
  });
  boards.push(b);
  await expect(Promise.resolve(b.handle("GET", "/ui/v1/board", ""))).rejects.toThrow("walk failed");
  broken = false;
  const body = json(await get(b, "/ui/v1/board")); // the same interval (the clock has not moved)
  expect(b.snapshotsBuilt).toBe(2);
  expect(body.locks.rows.map((r: any) => r.name)).toEqual(["ok"]);
});
