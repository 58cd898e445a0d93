/**
 * The CLI over a server map: `lockd shard-of`, `lockd run --server MAP`
 * (the claim goes to the name's shard) and `lockd status --ops MAP` (a
 * name on its shard, or every shard), against two real shard processes.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { LockClient } from "../../src/client/client.ts";
import { Placement } from "../../src/shard.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";

const two = new Placement(["alpha", "beta"]);
const servers: ChildServer[] = [];
let lockMap = "";
let opsMap = "";

beforeAll(async () => {
  const ports: { listenPort: number; opsPort: number }[] = [];
  for (const shard of ["alpha", "beta"]) {
    const child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--shard", shard, "--shards", "alpha,beta"]);
    servers.push(child);
    ports.push(await child.addresses());
  }
  lockMap = `alpha=127.0.0.1:${ports[0]!.listenPort};beta=127.0.0.1:${ports[1]!.listenPort}`;
  opsMap = `alpha=127.0.0.1:${ports[0]!.opsPort};beta=127.0.0.1:${ports[1]!.opsPort}`;
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s[Symbol.asyncDispose]()));
});

function nameOn(shard: string): string {
  for (let i = 0; ; i++) if (two.shardOf(`cli/${i}`) === shard) return `cli/${i}`;
}

test("lockd shard-of prints each name's shard, as the client library places it", async () => {
  const names = ["jobs/nightly", "db/migrate", "orders/42", "cron/cleanup"];
  const { code, out } = await runCli(["shard-of", ...names], { LOCKD_SERVER: lockMap });
  expect(code).toBe(0);
  expect(out.trim().split("\n")).toEqual(names.map((n) => two.shardOf(n)));
});

test("lockd run with a map runs COMMAND holding the lock on the name's shard", async () => {
  const name = nameOn("beta");
  const { code, out, err } = await runCli(["run", "--server", lockMap, name, "--", "sh", "-c", 'echo "$LOCKD_TOKEN"']);
  expect(err).toBe("");
  expect(code).toBe(0);
  expect(Number(out.trim())).toBeGreaterThan(0);
});

test("lockd status with a map of ops servers: a name on its shard, and every shard", async () => {
  const onBeta = nameOn("beta");
  const onAlpha = nameOn("alpha");
  const client = new LockClient({ servers: lockMap });
  await using b = await client.acquire(onBeta, { lease: 10_000, owner: "holder-b" });
  await using a = await client.acquire(onAlpha, { lease: 10_000, owner: "holder-a" });
  const one = await runCli(["status", "--ops", opsMap, onBeta]);
  expect(one.code).toBe(0);
  expect(one.out).toContain("shard beta of alpha,beta (generation 0)");
  expect(one.out).toContain("holder-b");
  const all = await runCli(["status", "--ops", opsMap]);
  expect(all.code).toBe(0);
  const alphaPart = all.out.slice(0, all.out.indexOf("shard beta"));
  const betaPart = all.out.slice(all.out.indexOf("shard beta"));
  expect(alphaPart).toContain("shard alpha of alpha,beta (generation 0)");
  expect(alphaPart).toContain(onAlpha);
  expect(alphaPart).not.toContain(onBeta);
  expect(betaPart).toContain(onBeta);
  expect(betaPart).toContain(String(b.token));
  expect(a.token).toBeGreaterThan(0n);
  const json = await runCli(["status", "--json", "--ops", opsMap]);
  expect(json.code).toBe(0);
  const doc = JSON.parse(json.out) as { generation: number; shards: Record<string, { locks: { name: string }[] }> };
  expect(doc.generation).toBe(0);
  expect(doc.shards.alpha!.locks.map((l) => l.name)).toContain(onAlpha);
  expect(doc.shards.beta!.locks.map((l) => l.name)).toEqual([onBeta]);
});
