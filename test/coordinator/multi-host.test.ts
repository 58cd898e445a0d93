/**
 * A multi-host coordinator URL against two real PostgreSQL servers: a
 * primary and a streaming replica of it (pg_basebackup). lockd passes over
 * the replica (in recovery), uses the primary, and when the primary turns
 * read-only and the replica is promoted (a switchover done by hand) every
 * instance walks the list again and moves to the new primary, the same row
 * on it; tokens keep rising.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { LockClient } from "../../src/client/index.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";
import { freePort, PG_PASSWORD, PG_USER, Postgres } from "./pg.ts";

const LEASE = 2000;
let primary: Postgres;
let replica: Postgres;

beforeAll(async () => {
  primary = await Postgres.start();
  replica = await Postgres.replicaOf(primary);
}, 120_000);

afterAll(async () => {
  await replica?.[Symbol.asyncDispose]();
  await primary?.[Symbol.asyncDispose]();
});

async function readyz(child: ChildServer): Promise<Record<string, unknown>> {
  const ops = String((await child.event("server.started")).ops);
  return (await (await fetch(`http://${ops}/readyz`)).json()) as Record<string, unknown>;
}

/** Poll `check` every 100 ms until it holds, at most `ms`. */
async function until(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await Bun.sleep(100);
  }
  throw new Error(`not within ${ms} ms: ${what}`);
}

describe("a primary and its replica, the replica listed first", () => {
  test("lockd uses the writable one, and moves with the primary when it turns read-only and the replica is promoted", async () => {
    // Commits wait for the replica: the synchronous mode, reported by every instance, with no warning.
    await primary.set("synchronous_standby_names", "*");
    const url = `postgres://${PG_USER}:${PG_PASSWORD}@127.0.0.1:${replica.port},127.0.0.1:${primary.port}/postgres?target_session_attrs=read-write`;
    const port = await freePort();
    const spawn = () =>
      ChildServer.spawn(["serve", "--service", "multi", "--coordinator-lease", `${LEASE}ms`, "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_COORDINATOR: url });
    await using a = spawn();
    expect((await a.event("failover.active")).why).toBe("created");
    await using b = spawn();
    const started = await b.event("server.started");
    expect(started).toMatchObject({ role: "standby", coordinatorServer: `127.0.0.1:${primary.port}` });
    expect(String(started.coordinator)).not.toContain(PG_PASSWORD);
    // At start each instance says which server it uses and which it passed over, and why.
    for (const child of [a, b]) {
      expect(await child.event("coordinator.connected")).toMatchObject({
        server: `127.0.0.1:${primary.port}`,
        reconnect: false,
        skipped: [`127.0.0.1:${replica.port} is in recovery (a replica)`],
      });
    }

    const synchronous = { mode: "synchronous", synchronousCommit: "on", synchronousStandbyNames: "*", replicas: 1, synchronousReplicas: 1 };
    expect(started.replication).toEqual(synchronous);
    for (const child of [a, b]) {
      expect((await readyz(child)).coordinator).toEqual({ server: `127.0.0.1:${primary.port}`, replication: synchronous });
      expect(child.logged("coordinator.replication_async")).toBe(false);
    }
    const ops = (child: ChildServer) => child.event("server.started").then((e) => String(e.ops));
    const metrics = await (await fetch(`http://${await ops(a)}/metrics`)).text();
    expect(metrics).toContain('lockd_coordinator_replication{mode="synchronous"} 1');
    expect(metrics).toContain('lockd_coordinator_replication{mode="asynchronous"} 0');
    expect((await runCli(["status", "--ops", await ops(b)])).out).toContain(`\ncoordinator 127.0.0.1:${primary.port}, replication synchronous (synchronous_standby_names "*"; 1 of 1 replicas synchronous now)\n`);

    // Without a synchronous standby: an instance started now reports it asynchronous, and warns once, naming the risk and the setting.
    await primary.set("synchronous_standby_names", "");
    {
      await using c = spawn();
      const cStarted = await c.event("server.started");
      expect(cStarted.replication).toEqual({ mode: "asynchronous", synchronousCommit: "on", synchronousStandbyNames: "", replicas: 1, synchronousReplicas: 0 });
      const warning = await c.event("coordinator.replication_async");
      expect(warning.msg).toContain("split brain");
      expect(warning.msg).toContain("synchronous_standby_names");
      expect(warning.msg).toContain("synchronous_mode: true");
      expect((await readyz(c)).coordinator).toMatchObject({ replication: { mode: "asynchronous" } });
      expect((await runCli(["status", "--ops", await ops(c)])).out).toContain(`\ncoordinator 127.0.0.1:${primary.port}, replication asynchronous (1 replica, commits wait for none: a failover can leave two writable primaries)\n`);
      expect(c.events("coordinator.replication_async")).toHaveLength(1);
    }

    const client = new LockClient({ servers: `127.0.0.1:${port}`, reconnectMs: 20_000 });
    {
      const before = await client.acquire("k", { lease: 400 });
      const first = before.token;
      await before.release();

      // The switchover: the primary stops taking writes, the replica is promoted.
      await primary.set("default_transaction_read_only", "on");
      await replica.promote();
      for (const child of [a, b]) {
        const moved = await child.eventWhere("coordinator.connected", (e) => e.reconnect === true, 15_000);
        expect(moved).toMatchObject({ server: `127.0.0.1:${replica.port}` });
        expect(String((moved.skipped as string[])[0] ?? "")).not.toContain(String(replica.port));
      }
      // The row is the same on the promoted replica: grants go on above the tokens given before.
      await until(async () => {
        try {
          const lock = await client.acquire("k", { lease: 400, wait: 5000 });
          expect(lock.token).toBeGreaterThan(first);
          await lock.release();
          return true;
        } catch {
          return false;
        }
      }, 20_000, "a grant after the switchover");
      // Both instances still see the same service: one active, one standby, the same epoch or one later.
      const views = await Promise.all([readyz(a), readyz(b)]);
      expect(views.map((v) => v.role).sort()).toEqual(["active", "standby"]);
      // The promoted replica has no replica of its own: each instance reports the server it moved to, and its mode.
      for (const view of views) expect(view.coordinator).toMatchObject({ server: `127.0.0.1:${replica.port}`, replication: { mode: "none", replicas: 0 } });
    }
  }, 60_000);
});
