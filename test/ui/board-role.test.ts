// The /ui board's answer names the instance's role (with --coordinator) and
// its shard, so the page can tell "this standby serves no locks" from
// "nothing is held". The role is switched by hand here (the real roles are in
// test/coordinator/failover.test.ts).
import { afterEach, expect, test } from "bun:test";
import type { Engine } from "../../src/core/index.ts";
import { Logger } from "../../src/log/logger.ts";
import { AdminAuth } from "../../src/ops/admin.ts";
import type { Conn } from "../../src/server/conn.ts";
import { EngineLocks } from "../../src/server/locks.ts";
import { OpsServer } from "../../src/ops/server.ts";
import type { CoordinatorMetrics, RoleView } from "../../src/ops/sources.ts";
import { Board } from "../../src/ops/ui/board.ts";
import { Harness } from "../helpers/engine.ts";
import { startServer, WirePeer } from "../helpers/wire.ts";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** An ops server in this process, with a role switched by hand (or none: no --coordinator). */
function opsServer(role: (() => RoleView) | null, shard?: { shard: string; shards: string[]; generation: number }) {
  const server = startServer();
  cleanups.push(() => server.stop());
  const ops = new OpsServer({
    hostname: "127.0.0.1",
    port: 0,
    locks: server.locks,
    ...(role === null ? {} : { roles: { view: role, metrics: () => ({ ...role() }) as CoordinatorMetrics } }),
    ...(shard === undefined ? {} : { shard }),
    auth: new AdminAuth("board-role-token"),
    log: new Logger("error", () => {}),
    version: "0.0.0-test",
    isReady: () => role === null || role().role === "active",
  });
  cleanups.push(() => ops.stop());
  return { server, ops, base: `http://127.0.0.1:${ops.port}` };
}

async function board(base: string): Promise<any> {
  const answer = await fetch(`${base}/ui/v1/board`);
  expect(answer.status).toBe(200);
  return answer.json();
}

test("a standby's board names its role, epoch, service and refusal, and its shard as /readyz does; the active's says active", async () => {
  let view: RoleView = { role: "standby", epoch: 3, service: "svc", instance: "test", active: "db1/pid-42/9f3a01bc", activeOps: "10.0.0.5:7701", refusal: "its shard map differs from the active's" };
  const { server, base } = opsServer(() => view, { shard: "b", shards: ["a", "b"], generation: 7 });
  const holder = await WirePeer.claim(server.port, "held");
  cleanups.push(() => holder.end());

  const standby = await board(base);
  expect(standby.role).toEqual({ role: "standby", epoch: 3, service: "svc", active: "db1/pid-42/9f3a01bc", activeOps: "10.0.0.5:7701", refusal: "its shard map differs from the active's" });
  // Its engine's table is not the service's: no rows (the lock "held" is in it), and counts of none.
  expect(standby.locks.rows).toEqual([]);
  expect({ total: standby.locks.total, matched: standby.locks.matched, locks: standby.totals.locks }).toEqual({ total: 0, matched: 0, locks: 0 });
  const readyz = (await (await fetch(`${base}/readyz`)).json()) as { shard: unknown };
  expect(standby.shard).toEqual({ name: "b", shards: ["a", "b"], generation: 7 });
  expect(standby.shard).toEqual(readyz.shard);
  // Every field the page had before is still there, in the same order; role, shard and the lock-delay come last.
  expect(Object.keys(standby)).toEqual(["version", "at", "intervalMs", "totals", "series", "locks", "role", "shard", "lockDelay"]);
  expect(Object.keys(standby.locks)).toEqual(["total", "matched", "prefix", "sort", "dir", "limit", "rows"]);

  // Becoming the active shows at the next request (even within the same second): a new snapshot, and no refusal.
  view = { role: "active", epoch: 4, service: "svc", instance: "test", active: null, activeOps: null };
  const active = await board(base);
  expect(active.role).toEqual({ role: "active", epoch: 4, service: "svc", active: null, activeOps: null });
  expect(active.locks.rows.map((row: { name: string }) => row.name)).toEqual(["held"]);

  view = { role: "stopped", epoch: 4, service: "svc", instance: "test", active: null, activeOps: null };
  const stopped = await board(base);
  expect(stopped.role).toEqual({ role: "stopped", epoch: 4, service: "svc", active: null, activeOps: null });
  expect(stopped.locks.rows).toEqual([]);
});

test("without --coordinator the board's role is null, and without shards its shard is the unsharded view", async () => {
  const { base } = opsServer(null);
  const answer = await board(base);
  expect(answer.role).toBeNull();
  expect(answer.shard).toEqual({ name: null, shards: [], generation: 0 });
});

test("a role change within one interval is not answered from the last role's snapshot or views", async () => {
  const h = new Harness();
  let view: RoleView = { role: "standby", epoch: 1, service: "svc", instance: "test", active: null, activeOps: null };
  const b = new Board({ locks: new EngineLocks(h.engine as unknown as Engine<Conn>), scanSlice: 16_384, version: "0.0.0-test", now: () => h.now, role: () => view });
  cleanups.push(() => b.stop());
  const ask = async () => {
    const reply = await b.handle("GET", "/ui/v1/board", "")!;
    return JSON.parse(new TextDecoder().decode(reply.body as Uint8Array));
  };
  expect((await ask()).role).toEqual({ role: "standby", epoch: 1, service: "svc", active: null, activeOps: null });
  expect((await ask()).role.role).toBe("standby");
  expect(b.snapshotsBuilt).toBe(1); // the same role within the interval: shared

  view = { ...view, refusal: "not the same map" };
  expect((await ask()).role).toEqual({ role: "standby", epoch: 1, service: "svc", active: null, activeOps: null, refusal: "not the same map" });
  view = { role: "active", epoch: 2, service: "svc", instance: "test", active: null, activeOps: null };
  expect((await ask()).role).toEqual({ role: "active", epoch: 2, service: "svc", active: null, activeOps: null });
  expect(b.snapshotsBuilt).toBe(3); // the clock never moved: each change made its own snapshot
});
