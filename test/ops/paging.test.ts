import { describe, expect, test } from "bun:test";
import { listLocks, status } from "../../src/cli/status.ts";
import { opsRequest } from "../../src/cli/ops-client.ts";
import type { Socket } from "bun";
import { SessionState } from "../../src/core/index.ts";
import { FrameType, encodeAcquire } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon, type TestDaemon } from "./harness.ts";
import { engineOf } from "../helpers/engine.ts";

interface Page {
  locks: { name: string; waiting: number; waiters: unknown[] }[];
  total: number;
  next: string | null;
  truncated: boolean;
}

async function hold(ops: TestDaemon, name: string): Promise<WirePeer> {
  const peer = await WirePeer.claim(ops.port, name, 60_000);
  expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
  return peer;
}

/**
 * Pages through /v1/locks while, before every page is asked for and while it
 * is being chosen, some locks go away and new ones appear (before, among and
 * after the names already shown). Returns every page.
 */
async function pageThroughChurn(ops: TestDaemon, limit: number): Promise<{ pages: Page[]; stable: string[] }> {
  const stable: string[] = [];
  const peers: WirePeer[] = [];
  for (let i = 0; i < 40; i++) {
    const name = `k${String(i).padStart(3, "0")}`;
    stable.push(name);
    peers.push(await hold(ops, name));
  }
  const churn: WirePeer[] = [];
  for (let i = 0; i < 20; i++) churn.push(await hold(ops, `k${String(i * 2).padStart(3, "0")}~gone`));
  const pages: Page[] = [];
  let cursor: string | null = null;
  let round = 0;
  do {
    const asked = ops.get(`/v1/locks?limit=${limit}${cursor === null ? "" : `&cursor=${cursor}`}`);
    // Meanwhile: two locks go, two come (one sorting before everything shown so far, one after).
    churn.shift()?.end();
    churn.shift()?.end();
    churn.push(await hold(ops, `a-new-${round}`), await hold(ops, `k${String(round * 5).padStart(3, "0")}+new`));
    const response = await asked;
    expect(response.status).toBe(200);
    const page = await body<Page>(response);
    pages.push(page);
    cursor = page.next;
    expect(page.truncated).toBe(cursor !== null);
    expect(page.locks.length).toBeLessThanOrEqual(limit);
    round++;
  } while (cursor !== null && round < 100);
  expect(cursor).toBeNull();
  for (const p of [...peers, ...churn]) p.end();
  return { pages, stable };
}

function checkExactlyOnce(pages: Page[], stable: string[]): void {
  const shown = pages.flatMap((p) => p.locks.map((l) => l.name));
  // Strictly increasing over all pages: no name twice.
  for (let i = 1; i < shown.length; i++) expect(shown[i - 1]! < shown[i]!, `${shown[i - 1]} before ${shown[i]}`).toBe(true);
  // Every lock that existed from the first page to the last was shown.
  for (const name of stable) expect(shown).toContain(name);
}

describe("/v1/locks pages with a cursor", () => {
  test("every lock that stays is shown exactly once while locks come and go", async () => {
    await using ops = startDaemon();
    const { pages, stable } = await pageThroughChurn(ops, 7);
    expect(pages.length).toBeGreaterThan(5);
    checkExactlyOnce(pages, stable);
  });

  test("the same when each page is chosen over many turns of the event loop", async () => {
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 3 } });
    const { pages, stable } = await pageThroughChurn(ops, 7);
    checkExactlyOnce(pages, stable);
  });

  test("listings chosen over many turns take turns, and the total is exact", async () => {
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 2 } });
    const peers: WirePeer[] = [];
    for (let i = 0; i < 30; i++) peers.push(await hold(ops, `n${String(i).padStart(2, "0")}`));
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => ops.get(`/v1/locks?limit=${i + 1}`).then((r) => body<Page>(r))));
    answers.forEach((page, i) => {
      expect(page.total).toBe(30);
      expect(page.locks.map((l) => l.name)).toEqual(Array.from({ length: i + 1 }, (_, j) => `n${String(j).padStart(2, "0")}`));
    });
    // A lock held from before the listing and still held when it ends is in the answer.
    const all = await body<Page>(await ops.get("/v1/locks"));
    expect(all.locks).toHaveLength(30);
    expect(all.next).toBeNull();
    for (const p of peers) p.end();
  });

  test("a page shows at most 1000 waiters in all; `waiting` still counts every one", async () => {
    await using ops = startDaemon();
    const peers: WirePeer[] = [];
    // Twelve locks with 100 waiters each: all 100 shown for the first ten, then the page's budget is spent.
    const names = Array.from({ length: 12 }, (_, i) => `q${String(i).padStart(2, "0")}`);
    for (const name of names) {
      peers.push(await hold(ops, name));
      for (let i = 0; i < 100; i++) {
        const w = await WirePeer.connect(ops.port);
        w.acquire(name, 60_000);
        peers.push(w);
      }
    }
    for (const w of peers) await w.frame(0);
    const page = await body<Page>(await ops.get("/v1/locks"));
    expect(page.locks.map((l) => l.name)).toEqual(names);
    expect(page.locks.map((l) => l.waiting)).toEqual(names.map(() => 100));
    expect(page.locks.map((l) => l.waiters.length)).toEqual([...names.slice(0, 10).map(() => 100), 0, 0]);
    const one = await body<{ waiting: number; waiters: unknown[] }>(await ops.get("/v1/locks/q11?limit=30"));
    expect(one.waiting).toBe(100);
    expect(one.waiters).toHaveLength(30);
    for (const p of peers) p.end();
  });
});

describe("lockd status pages through", () => {
  test("it follows the cursor to the last page, or stops at its page bound and says where it stopped", async () => {
    await using ops = startDaemon();
    const peers: WirePeer[] = [];
    for (let i = 0; i < 25; i++) peers.push(await hold(ops, `s${String(i).padStart(2, "0")}`));
    const address = { host: "127.0.0.1", port: ops.daemon.ops.port };
    const paths: string[] = [];
    const get = (path: string) => {
      paths.push(path);
      return opsRequest(address, "GET", path, { timeoutMs: 10_000 });
    };
    const all = (await listLocks(get, { pageSize: 10 }))!;
    expect(all.locks.map((l) => l.name)).toEqual(peers.map((_, i) => `s${String(i).padStart(2, "0")}`));
    expect(all.next).toBeNull();
    expect(all.total).toBe(25);
    expect(paths).toHaveLength(3);

    paths.length = 0;
    const first = (await listLocks(get, { pageSize: 10, maxPages: 2 }))!;
    expect(first.locks).toHaveLength(20);
    expect(first.next).not.toBeNull();
    expect(paths).toHaveLength(2);

    let text = "";
    const out = { write: (chunk: string) => ((text += chunk), true) } as unknown as typeof process.stdout;
    expect(await status(["--ops", `127.0.0.1:${address.port}`], {}, out)).toBe(0);
    const lines = text.trimEnd().split("\n");
    expect(lines[0]).toBe("25 locks; sessions: 25 holding, 0 waiting, 0 connecting");
    expect(lines).toHaveLength(27);
    for (const p of peers) p.end();
  });
});

describe("a listing that spans many turns", () => {
  test("lock traffic is answered while it is still being chosen", async () => {
    // One lock per turn: a page of 300 locks takes at least 300 turns of the event loop.
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 1 } });
    const peers: WirePeer[] = [];
    for (let i = 0; i < 300; i++) peers.push(await hold(ops, `t${String(i).padStart(3, "0")}`));
    const listing = ops.get("/v1/locks").then((r) => body<Page & { sessions: { owner: number } }>(r));
    const fresh = await WirePeer.claim(ops.port, "fresh", 5000);
    expect(fresh.frames[0]!.type).toBe(FrameType.ACQUIRED);
    const page = await listing;
    // The page was answered after the fresh ACQUIRE was granted: its counts include it.
    expect(page.sessions.owner).toBe(301);
    expect(page.total).toBe(301);
    expect(page.locks.map((l) => l.name)).toContain("t299");
    fresh.end();
    for (const p of peers) p.end();
  });
});

describe("many listings at once", () => {
  test("at most one page is built per turn of the event loop, however many connections ask at once", async () => {
    // The table fits in one slice (scanSlice is far above 20 locks), so each
    // page could be built at once; 24 connections asking in the same read of
    // the loop must still not be answered all in that turn: lock traffic that
    // arrived behind them is handled first, and every page counts it.
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0 } });
    const peers: WirePeer[] = [];
    for (let i = 0; i < 20; i++) peers.push(await hold(ops, `m${String(i).padStart(2, "0")}`));
    const answers: Promise<string>[] = [];
    const sockets: Socket<{ text: string; done: (text: string) => void }>[] = [];
    for (let i = 0; i < 24; i++) {
      let done!: (text: string) => void;
      answers.push(new Promise<string>((resolve) => (done = resolve)));
      sockets.push(
        await Bun.connect({
          hostname: "127.0.0.1",
          port: ops.daemon.ops.port,
          data: { text: "", done },
          socket: {
            data(socket, chunk) {
              socket.data.text += chunk.toString("latin1");
            },
            close(socket) {
              socket.data.done(socket.data.text);
            },
          },
        }),
      );
    }
    const fresh = await Bun.connect({ hostname: "127.0.0.1", port: ops.port, socket: { data() {} } });
    // The lock connection is accepted before the requests go out (the ops listener accepts a connection with its first bytes).
    const accepted = () => engineOf(ops.daemon.server).stats.states[SessionState.CONNECTED] === 1;
    for (let turns = 0; !accepted() && turns < 1000; turns++) await new Promise((r) => setImmediate(r));
    expect(engineOf(ops.daemon.server).stats.states[SessionState.CONNECTED]).toBe(1);
    // All at once, in this turn: the 24 requests, then the ACQUIRE behind them.
    for (const socket of sockets) socket.write("GET /v1/locks HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    fresh.write(encodeAcquire({ name: "fresh", leaseMs: 5000, owner: "test", try: false }));
    const owners = (await Promise.all(answers)).map((text) => JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4)).sessions.owner as number);
    expect(owners).toEqual(owners.map(() => 21));
    fresh.end();
    for (const p of peers) p.end();
  });
});
