// The ops server's queue of walks under a flood of lock views: a walk whose
// client has gone is dropped before its next slice (its view is never
// built), and beyond MAX_QUEUED_WALKS queued walks a listing or lock view
// gets 503 OPS_BUSY with Retry-After: 1 at once; probes are never queued.
import { afterEach, expect, test } from "bun:test";
import type { Socket } from "bun";
import { FrameType } from "../../src/protocol/index.ts";
import { MAX_QUEUED_WALKS, type OpsServer } from "../../src/ops/server.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon, type TestDaemon } from "./harness.ts";

const peers: WirePeer[] = [];
const sockets = new Set<Socket<unknown>>();

afterEach(() => {
  for (const p of peers.splice(0)) p.end();
  for (const s of sockets) s.terminate();
  sockets.clear();
});

/** One holder and `n` waiters on `name`. */
async function queue(ops: TestDaemon, name: string, n: number): Promise<void> {
  const holder = await WirePeer.claim(ops.port, name, 60_000, { owner: "holder" });
  expect(holder.frames[0]!.type).toBe(FrameType.ACQUIRED);
  peers.push(holder);
  for (let i = 0; i < n; i++) {
    const peer = await WirePeer.claim(ops.port, name, 60_000, { owner: `w${i}` });
    expect(peer.frames[0]!.type).toBe(FrameType.WAITING);
    peers.push(peer);
  }
}

/**
 * One request on a connection of its own. `drop`: close the connection
 * right after sending (resolves "" once written); else resolves the
 * answer's head (status line and headers).
 */
function raw(port: number, target: string, drop: boolean): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let head = "";
    Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        open(s) {
          sockets.add(s);
          s.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
          if (drop) {
            s.terminate();
            sockets.delete(s);
            resolve("");
          }
        },
        data(s, chunk) {
          head += Buffer.from(chunk).toString("latin1");
          const end = head.indexOf("\r\n\r\n");
          if (end >= 0) {
            s.terminate();
            sockets.delete(s);
            resolve(head.slice(0, end));
          }
        },
        close(s) {
          sockets.delete(s);
          resolve(head);
        },
        error(_s, error) {
          reject(error);
        },
      },
    }).catch(reject);
  });
}

function opsOf(ops: TestDaemon): OpsServer {
  return ops.daemon.ops as OpsServer;
}

test("a flood of views whose clients hang up builds none of them: a fresh view is answered after a bounded number of walks", async () => {
  // One lock per slice: each view of 40 waiters takes 40 turns of the queue.
  await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 1 } });
  await queue(ops, "big", 40);
  const server = opsOf(ops);
  const before = server.walkCounts;
  const flood = 600;
  // Connect, send, close: in waves of 100, so each wave is read in a few turns.
  for (let wave = 0; wave < flood / 100; wave++) {
    await Promise.all(Array.from({ length: 100 }, () => raw(ops.daemon.ops.port, "/v1/locks/big?limit=1000", true)));
  }
  const fresh = await ops.get("/v1/locks/big?limit=1000");
  expect(fresh.status).toBe(200);
  expect(((await fresh.json()) as { waiters: unknown[] }).waiters.length).toBe(40);
  const after = server.walkCounts;
  const finished = after.finished - before.finished;
  // Without the skip every dropped view that reached the queue ran to its end (two walks
  // each: holders, waiters; about 270 walks here). With it: the fresh view's two, and at
  // most a few begun before their client's close was read.
  expect(finished).toBeLessThanOrEqual(20);
  expect(after.skipped - before.skipped).toBeGreaterThan(0);
  expect(server.walksQueued).toBe(0);
});

test("beyond the cap of queued walks a lock view gets 503 OPS_BUSY with Retry-After: 1 at once; probes still answer", async () => {
  await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 1 } });
  await queue(ops, "big", 40);
  const server = opsOf(ops);
  const port = ops.daemon.ops.port;
  // Far more views than the cap, held open (their clients wait): each takes ~40 turns of the queue.
  const asked = Array.from({ length: MAX_QUEUED_WALKS * 2 }, () => raw(port, "/v1/locks/big?limit=1000", false));
  const heads = await Promise.all(asked);
  const busy = heads.filter((h) => h.startsWith("HTTP/1.1 503"));
  const ok = heads.filter((h) => h.startsWith("HTTP/1.1 200"));
  expect(busy.length).toBeGreaterThan(0);
  expect(ok.length).toBeGreaterThan(0);
  expect(busy.length + ok.length).toBe(heads.length);
  for (const h of busy) expect(h.toLowerCase()).toContain("retry-after: 1");
  // The queue never held more than the cap (each view is two walks in turn, one queued at a time).
  expect(ok.length).toBeGreaterThanOrEqual(1);
  expect(server.walksQueued).toBe(0);
  const live = await ops.get("/livez");
  expect(live.status).toBe(200);
});

test("the 503 body says OPS_BUSY, and /metrics shows lockd_ops_walks_queued", async () => {
  await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0, scanSlice: 1 } });
  await queue(ops, "big", 40);
  const port = ops.daemon.ops.port;
  const pending = Array.from({ length: MAX_QUEUED_WALKS + 64 }, () => raw(port, "/v1/locks/big?limit=1000", false));
  // Asked while the flood is queued: the gauge shows the queue, probes are answered.
  let seen = 0;
  let busyBody = "";
  for (let i = 0; i < 200 && (seen === 0 || busyBody === ""); i++) {
    const metrics = await ops.get("/metrics");
    const m = /^lockd_ops_walks_queued (\d+)$/m.exec(await metrics.text());
    expect(m).not.toBeNull();
    seen = Math.max(seen, Number(m![1]));
    const view = await ops.get("/v1/locks/big?limit=1");
    const text = await view.text();
    if (view.status === 503) {
      busyBody = text;
      expect(view.headers.get("retry-after")).toBe("1");
    } else expect(view.status).toBe(200);
  }
  await Promise.all(pending);
  expect(seen).toBeGreaterThan(0);
  expect(seen).toBeLessThanOrEqual(MAX_QUEUED_WALKS);
  expect(JSON.parse(busyBody).error.code).toBe("OPS_BUSY");
});
