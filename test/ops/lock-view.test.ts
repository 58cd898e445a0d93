// The lock view (GET/HEAD /v1/locks/NAME): its waiters in pages with a
// cursor, picked by a walk of the queue through the ops server's slice
// queue (never in the request's turn, one slice per turn with the other
// walks), and HEAD answering from a lookup with no view built.
import { describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { FrameType } from "../../src/protocol/index.ts";
import { SliceQueue } from "../../src/ops/slices.ts";
import { decodeWaiterCursor, encodeWaiterCursor, waitersPage } from "../../src/ops/views.ts";
import type { QueueWalk, WaiterView } from "../../src/ops/sources.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon, type TestDaemon } from "./harness.ts";

interface View {
  name: string;
  holder: { session: number } | null;
  waiting: number;
  waiters: { session: number; position: number; owner: string }[];
  next: string | null;
}

/** One holder and `n` waiters on `name`, in that order of arrival. */
async function queue(ops: TestDaemon, name: string, n: number): Promise<{ holder: WirePeer; waiters: WirePeer[] }> {
  const holder = await WirePeer.claim(ops.port, name, 60_000, { owner: "holder" });
  expect(holder.frames[0]!.type).toBe(FrameType.ACQUIRED);
  const waiters: WirePeer[] = [];
  for (let i = 0; i < n; i++) {
    const peer = await WirePeer.claim(ops.port, name, 60_000, { owner: `w${i}` });
    expect(peer.frames[0]!.type).toBe(FrameType.WAITING);
    waiters.push(peer);
  }
  return { holder, waiters };
}

async function view(ops: TestDaemon, path: string): Promise<View> {
  const response = await ops.get(path);
  expect(response.status).toBe(200);
  return body<View>(response);
}

/** Every page of a lock's waiters, following `next`; `between` runs after each page is read. */
async function pages(ops: TestDaemon, name: string, limit: number, between: (page: number) => void | Promise<void> = () => {}): Promise<View[]> {
  const out: View[] = [];
  let cursor: string | null = null;
  for (let round = 0; round < 100; round++) {
    const page: View = await view(ops, `/v1/locks/${encodeURIComponent(name)}?limit=${limit}${cursor === null ? "" : `&cursor=${cursor}`}`);
    out.push(page);
    expect(page.waiters.length).toBeLessThanOrEqual(limit);
    cursor = page.next;
    if (cursor === null) return out;
    await between(round);
  }
  throw new Error("more than 100 pages");
}

describe("the lock view's waiters in pages", () => {
  test("the default view shows up to 1000 waiters and no cursor when that is all; fields as before, plus next", async () => {
    await using ops = startDaemon();
    const { holder, waiters } = await queue(ops, "jobs/a", 5);
    const all = await view(ops, "/v1/locks/jobs%2Fa");
    expect(Object.keys(all).sort()).toEqual(["holder", "holders", "holdersNext", "holding", "limit", "mode", "name", "next", "shard", "waiters", "waiting"]);
    expect(all.name).toBe("jobs/a");
    expect(all.waiting).toBe(5);
    expect(all.waiters.map((w) => w.owner)).toEqual(["w0", "w1", "w2", "w3", "w4"]);
    expect(all.waiters.map((w) => w.position)).toEqual([1, 2, 3, 4, 5]);
    expect(all.next).toBeNull();
    // The same through ?name=.
    expect((await view(ops, "/v1/locks?name=jobs%2Fa")).waiters.length).toBe(5);
    for (const p of [holder, ...waiters]) p.end();
  });

  test("pages of `limit` with `next` show every waiter once, in queue order, with positions from the head", async () => {
    await using ops = startDaemon();
    const { holder, waiters } = await queue(ops, "q", 11);
    const shown = await pages(ops, "q", 4);
    expect(shown.map((p) => p.waiters.length)).toEqual([4, 4, 3]);
    expect(shown.flatMap((p) => p.waiters.map((w) => w.owner))).toEqual(waiters.map((_, i) => `w${i}`));
    expect(shown.flatMap((p) => p.waiters.map((w) => w.position))).toEqual(Array.from({ length: 11 }, (_, i) => i + 1));
    for (const p of shown) {
      expect(p.waiting).toBe(11);
      expect(p.holder).not.toBeNull();
    }
    for (const p of [holder, ...waiters]) p.end();
  });

  test("while waiters ahead leave and new ones join, each waiter that stays is shown exactly once", async () => {
    // A slice of 2: every page's walk spans several turns, with lock traffic in between.
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 2 } });
    const { holder, waiters } = await queue(ops, "churn", 16);
    const leaving = new Set([0, 1, 5, 6, 9]); // some shown already, some not yet
    const stayed = waiters.map((_, i) => `w${i}`).filter((_, i) => !leaving.has(i));
    const joined: WirePeer[] = [];
    const shown = await pages(ops, "churn", 3, async (round) => {
      for (const i of [...leaving].filter((i) => i < 3 * (round + 2))) {
        leaving.delete(i);
        waiters[i]!.end();
      }
      joined.push(await WirePeer.claim(ops.port, "churn", 60_000, { owner: `late${round}` }));
    });
    const owners = shown.flatMap((p) => p.waiters.map((w) => w.owner));
    expect(new Set(owners).size).toBe(owners.length); // none twice
    for (const owner of stayed) expect(owners).toContain(owner);
    // The page's positions are counted from the head at the time: increasing within a page.
    for (const p of shown) for (let i = 1; i < p.waiters.length; i++) expect(p.waiters[i]!.position).toBeGreaterThan(p.waiters[i - 1]!.position);
    for (const p of [holder, ...waiters, ...joined]) p.end();
  });

  test("a cursor whose waiter was granted the lock resumes at the waiter after it", async () => {
    await using ops = startDaemon();
    const { holder, waiters } = await queue(ops, "grant", 4);
    const first = await view(ops, "/v1/locks/grant?limit=1");
    expect(first.waiters.map((w) => w.owner)).toEqual(["w0"]);
    holder.end(); // w0 is promoted
    await waiters[0]!.frame(1);
    const second = await view(ops, `/v1/locks/grant?limit=2&cursor=${first.next}`);
    expect(second.holder!.session).toBe(first.waiters[0]!.session);
    expect(second.waiters.map((w) => [w.owner, w.position])).toEqual([["w1", 1], ["w2", 2]]);
    for (const p of waiters) p.end();
  });

  test("bad limits and cursors are 400 naming the parameter; a lock nobody holds is 404", async () => {
    await using ops = startDaemon();
    const { holder } = await queue(ops, "x", 0);
    for (const [path, code] of [
      ["/v1/locks/x?limit=0", "BAD_LIMIT"],
      ["/v1/locks/x?limit=1001", "BAD_LIMIT"],
      ["/v1/locks/x?cursor=nope!", "BAD_CURSOR"],
      [`/v1/locks/x?cursor=${Buffer.from("1:2x").toString("base64url")}`, "BAD_CURSOR"],
      // A listing cursor (a name) is not a waiter cursor.
      [`/v1/locks/x?cursor=${Buffer.from("x").toString("base64url")}`, "BAD_CURSOR"],
    ] as const) {
      const response = await ops.get(path);
      expect(response.status, path).toBe(400);
      expect((await body(response)).error.code, path).toBe(code);
    }
    const missing = await ops.get("/v1/locks/nobody");
    expect(missing.status).toBe(404);
    expect((await body(missing)).error.code).toBe("NO_SUCH_LOCK");
    holder.end();
  });

  test("the cursor is opaque and round-trips; anything else is refused", () => {
    const cursor = { session: 42, queuedAt: 1234.567891 };
    expect(decodeWaiterCursor(encodeWaiterCursor(cursor))).toEqual(cursor);
    expect(decodeWaiterCursor(encodeWaiterCursor({ session: 1, queuedAt: 77 }))).toEqual({ session: 1, queuedAt: 77 });
    for (const bad of ["", "=", Buffer.from("0:1").toString("base64url"), Buffer.from("1:-1").toString("base64url"), Buffer.from("1:1:1").toString("base64url"), `${encodeWaiterCursor(cursor)}A`]) {
      expect(decodeWaiterCursor(bad), bad).toBeNull();
    }
  });
});

/** A queue of plain waiters, walked as the lock source walks an engine's (restart when the one stood on left). */
class FakeQueue {
  items: { session: number; queuedAt: number }[] = [];
  walk(): QueueWalk {
    const q = this;
    let at: { session: number; queuedAt: number } | null = null;
    let ended = false;
    const walk = {
      restarted: false,
      next(): boolean {
        if (ended) return false;
        walk.restarted = at !== null && !q.items.includes(at);
        const step: { session: number; queuedAt: number } | null = at === null || walk.restarted ? (q.items[0] ?? null) : (q.items[q.items.indexOf(at) + 1] ?? null);
        at = step;
        ended = step === null;
        return step !== null;
      },
      get session() {
        return at!.session;
      },
      get queuedAt() {
        return at!.queuedAt;
      },
      view(position: number): WaiterView {
        return { session: at!.session, owner: "", remote: "", leaseMs: 0, silentForMs: 0, position, waitingForMs: 0, shared: false, limit: 1 };
      },
    };
    return walk;
  }
}

describe("waitersPage", () => {
  test("one slice per turn; a walk whose waiter leaves between slices begins again at the head and shows no waiter twice", async () => {
    const q = new FakeQueue();
    for (let i = 1; i <= 10; i++) q.items.push({ session: i, queuedAt: i * 10 });
    const slices = new SliceQueue(3);
    let turns = 0;
    let stop = false;
    const tick = () => {
      if (stop) return;
      turns++;
      // Between the walk's slices: the waiter the walk stands on (after the first slice, session 3) leaves.
      if (turns === 2) q.items.splice(2, 1);
      setImmediate(tick);
    };
    setImmediate(tick);
    const page = await waitersPage(slices, q.walk(), null, 6);
    expect(page.waiters.map((w) => w.session)).toEqual([1, 2, 3, 4, 5, 6]);
    // After the restart positions are counted again from the head (session 4 is now third).
    expect(page.waiters.map((w) => w.position)).toEqual([1, 2, 3, 3, 4, 5]);
    expect(page.next).not.toBeNull();
    const rest = await waitersPage(slices, q.walk(), decodeWaiterCursor(page.next!), 6);
    expect(rest.waiters.map((w) => w.session)).toEqual([7, 8, 9, 10]);
    expect(rest.next).toBeNull();
    stop = true;
    // 3 slices for the first page, 4 for the second (6 skipped, 4 shown, the end): a turn each.
    expect(turns).toBeGreaterThanOrEqual(7);
  });

  test("a cursor whose waiter has left resumes at the first waiter that queued after it", async () => {
    const q = new FakeQueue();
    for (let i = 1; i <= 6; i++) q.items.push({ session: i, queuedAt: i * 10 });
    const slices = new SliceQueue(100);
    const first = await waitersPage(slices, q.walk(), null, 3);
    expect(first.waiters.map((w) => w.session)).toEqual([1, 2, 3]);
    q.items = q.items.filter((w) => w.session !== 3 && w.session !== 1);
    const rest = await waitersPage(slices, q.walk(), decodeWaiterCursor(first.next!), 3);
    expect(rest.waiters.map((w) => [w.session, w.position])).toEqual([[4, 2], [5, 3], [6, 4]]);
    expect(rest.next).toBeNull();
  });

  test("never in the caller's turn", async () => {
    const q = new FakeQueue();
    q.items.push({ session: 1, queuedAt: 1 });
    let stepped = false;
    const walk = q.walk();
    const next = walk.next.bind(walk);
    walk.next = () => ((stepped = true), next());
    const page = waitersPage(new SliceQueue(10), walk, null, 10);
    expect(stepped).toBe(false);
    expect((await page).waiters.length).toBe(1);
  });
});

/** Raw HTTP: what HEAD answers, byte for byte (fetch hides the framing). */
async function rawHead(port: number, path: string): Promise<string> {
  let text = "";
  const { promise, resolve } = Promise.withResolvers<void>();
  const socket: Socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_s, chunk) {
        text += Buffer.from(chunk).toString("latin1");
        if (text.includes("\r\n\r\n")) resolve();
      },
      close: () => resolve(),
      error: () => resolve(),
    },
  });
  socket.write(`HEAD ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  await Promise.race([promise, Bun.sleep(5000)]);
  socket.end();
  return text;
}

describe("HEAD of the lock routes", () => {
  test("HEAD builds no view: the status and headers only, no length, nothing walked", async () => {
    await using ops = startDaemon();
    const { holder, waiters } = await queue(ops, "h", 3);
    const server = ops.daemon.ops as unknown as { slices: SliceQueue };
    const walk = server.slices.walk.bind(server.slices);
    let walks = 0;
    server.slices.walk = ((items, each) => (walks++, walk(items, each))) as SliceQueue["walk"];
    const head = await rawHead(ops.daemon.ops.port, "/v1/locks/h?limit=1000");
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    expect(head).toMatch(/\r\ncontent-type: application\/json/i);
    expect(head).not.toMatch(/\r\ncontent-length:/i);
    expect(head).toMatch(/\r\ntransfer-encoding: chunked\r\n/i);
    expect(head.endsWith("\r\n\r\n")).toBe(true);
    // The listing's HEAD walks nothing either; fetch and keep-alive are happy with such a head.
    const listing = await fetch(ops.url("/v1/locks"), { method: "HEAD" });
    expect(listing.status).toBe(200);
    expect(await listing.text()).toBe("");
    const again = await fetch(ops.url("/v1/locks/h"), { method: "HEAD" });
    expect(again.status).toBe(200);
    expect(walks).toBe(0);
    // Not there, or a bad request: the same status as GET.
    expect((await fetch(ops.url("/v1/locks/none"), { method: "HEAD" })).status).toBe(404);
    expect((await fetch(ops.url("/v1/locks/h?limit=0"), { method: "HEAD" })).status).toBe(400);
    // GET still walks: its holders, then its waiters.
    expect((await ops.get("/v1/locks/h")).status).toBe(200);
    expect(walks).toBe(2);
    for (const p of [holder, ...waiters]) p.end();
  });
});
