/**
 * The CLI over a server map: `lockd shard-of`, `lockd run --server MAP`
 * (the claim goes to the name's shard) and `lockd status --ops MAP` (a
 * name on its shard, or every shard), against two real shard processes.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { LockClient } from "../../src/client/client.ts";
import { Placement } from "../../src/shard/placement.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";

const two = new Placement(["alpha", "beta"]);
const ADMIN = "shards-cli-admin";
const servers: ChildServer[] = [];
let lockMap = "";
/** The two shards' lock addresses swapped. */
let swappedLocks = "";
let opsMap = "";
/** The two shards' ops addresses swapped: the map's labels are wrong. */
let swappedOps = "";
let plain: ChildServer;
let plainOps = "";

beforeAll(async () => {
  const ports: { listenPort: number; opsPort: number }[] = [];
  for (const shard of ["alpha", "beta"]) {
    const child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--shard", shard, "--shards", "alpha,beta", "--shards-generation", "1"], { LOCKD_ADMIN_TOKEN: ADMIN });
    servers.push(child);
    ports.push(await child.addresses());
  }
  plain = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"]);
  servers.push(plain);
  plainOps = `127.0.0.1:${(await plain.addresses()).opsPort}`;
  lockMap = `alpha=127.0.0.1:${ports[0]!.listenPort};beta=127.0.0.1:${ports[1]!.listenPort}`;
  opsMap = `alpha=127.0.0.1:${ports[0]!.opsPort};beta=127.0.0.1:${ports[1]!.opsPort}`;
  swappedLocks = `gen=1;alpha=127.0.0.1:${ports[1]!.listenPort};beta=127.0.0.1:${ports[0]!.listenPort}`;
  swappedOps = `alpha=127.0.0.1:${ports[1]!.opsPort};beta=127.0.0.1:${ports[0]!.opsPort}`;
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

test("lockd run with the shards' addresses swapped: exit 64, COMMAND never runs, and the line names the address under the wrong shard", async () => {
  const name = nameOn("beta");
  const underBeta = swappedLocks.slice(swappedLocks.indexOf("beta=") + 5); // alpha's server
  const { code, out, err } = await runCli(["run", "--server", swappedLocks, name, "--", "sh", "-c", "echo ran"]);
  expect({ code, out }).toEqual({ code: 64, out: "" });
  expect(err).toBe(
    `lockd run: lock ${JSON.stringify(name)}: the client's map alpha,beta (generation 1) places it on shard beta and sent it to ${underBeta}, ` +
      `but the server there is shard alpha of the same shards and generation: what differs is the addresses: ` +
      `the client's map lists ${underBeta}, a server of shard alpha, under shard beta; fix the map (LOCKD_SERVER) and claim again\n`,
  );
});

test("lockd status with a map of ops servers: a name on its shard, and every shard", async () => {
  const onBeta = nameOn("beta");
  const onAlpha = nameOn("alpha");
  const client = new LockClient({ servers: lockMap });
  await using b = await client.acquire(onBeta, { lease: 10_000, owner: "holder-b" });
  await using a = await client.acquire(onAlpha, { lease: 10_000, owner: "holder-a" });
  const one = await runCli(["status", "--ops", opsMap, onBeta]);
  expect(one.code).toBe(0);
  expect(one.out).toContain("shard beta of alpha,beta (generation 1)");
  expect(one.out).toContain("holder-b");
  const all = await runCli(["status", "--ops", opsMap]);
  expect(all.code).toBe(0);
  const alphaPart = all.out.slice(0, all.out.indexOf("shard beta"));
  const betaPart = all.out.slice(all.out.indexOf("shard beta"));
  expect(alphaPart).toContain("shard alpha of alpha,beta (generation 1)");
  expect(alphaPart).toContain(onAlpha);
  expect(alphaPart).not.toContain(onBeta);
  expect(betaPart).toContain(onBeta);
  expect(betaPart).toContain(String(b.token));
  expect(a.token).toBeGreaterThan(0n);
  const json = await runCli(["status", "--json", "--ops", opsMap]);
  expect(json.code).toBe(0);
  const doc = JSON.parse(json.out) as { generation: number; shards: Record<string, { locks: { name: string }[] }> };
  expect(doc.generation).toBe(1);
  expect(doc.shards.alpha!.locks.map((l) => l.name)).toContain(onAlpha);
  expect(doc.shards.beta!.locks.map((l) => l.name)).toEqual([onBeta]);
});

test("lockd status checks each ops server against the map: swapped addresses are an error, never a free", async () => {
  const onBeta = nameOn("beta");
  const client = new LockClient({ servers: lockMap });
  await using held = await client.acquire(onBeta, { lease: 10_000, owner: "holder-swapped" });
  expect(held.token).toBeGreaterThan(0n);
  const betaOps = swappedOps.slice(swappedOps.indexOf("beta=") + 5);
  const one = await runCli(["status", "--ops", swappedOps, onBeta]);
  expect(one.code).toBe(78);
  expect(one.out).not.toContain("free");
  expect(one.err).toContain(`the ops server at ${betaOps}: --ops says it is shard beta of alpha,beta, but the server is shard alpha of alpha,beta (generation 1)`);
  const all = await runCli(["status", "--ops", swappedOps]);
  expect(all.code).toBe(78);
  expect(all.out).not.toContain("holder-swapped");
  expect(all.err).toContain("--ops says it is shard alpha of alpha,beta, but the server is shard beta");
  const json = await runCli(["status", "--json", "--ops", swappedOps]);
  expect(json.code).toBe(78);
  expect(json.out).not.toContain("holder-swapped");
});

test("lockd status: a map naming a server without shards, and a plain list naming one shard, are errors", async () => {
  const onBeta = nameOn("beta");
  const alphaOps = opsMap.slice(6, opsMap.indexOf(";"));
  const viaMap = await runCli(["status", "--ops", `alpha=${alphaOps};beta=${plainOps}`, onBeta]);
  expect(viaMap.code).toBe(78);
  expect(viaMap.err).toContain(`the ops server at ${plainOps}: --ops says it is shard beta of alpha,beta, but the server is a server without shards`);
  const plainList = await runCli(["status", "--ops", alphaOps, onBeta]);
  expect(plainList.code).toBe(78);
  expect(plainList.err).toContain(`the ops server at ${alphaOps} is shard alpha of alpha,beta (generation 1), and ${JSON.stringify(onBeta)} belongs to shard beta`);
  expect(plainList.out).not.toContain("free");
  const listing = await runCli(["status", "--ops", alphaOps]);
  expect(listing.code).toBe(0);
  expect(listing.out).toStartWith("shard alpha of alpha,beta (generation 1) (only this shard's locks: give --ops every shard's, alpha=HOST:PORT;beta=HOST:PORT)\n");
  // The plain server with a plain list, as ever.
  const plainOk = await runCli(["status", "--ops", plainOps, onBeta]);
  expect(plainOk.code).toBe(0);
  expect(plainOk.out).toContain("free");
});

test("lockd status shows the servers' generation and warns when the map's gen= differs", async () => {
  const all = await runCli(["status", "--ops", `gen=2;${opsMap}`]);
  expect(all.code).toBe(0);
  expect(all.out).toContain("shard alpha of alpha,beta (generation 1)");
  expect(all.err).toContain("--ops says gen=2 but the servers run generation 1");
});

test("lockd force-release with the map of ops servers (as LOCKD_OPS holds it for status) goes to the name's shard; kick asks for one shard", async () => {
  const onBeta = nameOn("beta");
  const client = new LockClient({ servers: lockMap });
  const holder = await client.acquire(onBeta, { lease: 60_000 });
  try {
    const released = await runCli(["force-release", onBeta], { LOCKD_OPS: opsMap, LOCKD_ADMIN_TOKEN: ADMIN });
    expect(released.err).toBe("");
    expect(released.code).toBe(0);
    expect(released.out).toContain(`released ${JSON.stringify(onBeta)}`);
    expect(released.out).toContain(`token ${holder.token}`);
    // The holder hears of it (FORCE_RELEASED): its signal aborts.
    if (!holder.signal.aborted) await new Promise((resolve) => holder.signal.addEventListener("abort", resolve, { once: true }));
    expect(holder.held).toBe(false);
    // Session ids are per server: a map of two shards cannot say which one is meant.
    const kick = await runCli(["kick", "1"], { LOCKD_OPS: opsMap, LOCKD_ADMIN_TOKEN: ADMIN });
    expect(kick.code).toBe(64);
    expect(kick.err).toContain("kick needs the ops servers of one shard");
  } finally {
    await holder.release();
  }
});

test("an admin action asked of the wrong shard is refused (exit 78) and nothing is done; kick with a map of one shard is checked against the server", async () => {
  const onAlpha = nameOn("alpha");
  const alphaOps = opsMap.split(";")[0]!.split("=")[1]!;
  const betaOps = opsMap.split(";")[1]!.split("=")[1]!;
  const client = new LockClient({ servers: lockMap });
  const holder = await client.acquire(onAlpha, { lease: 60_000 });
  const waiting = client.acquire(onAlpha, { lease: 60_000, owner: "kick-me" });
  waiting.catch(() => {}); // it ends kicked, below
  try {
    // The waiter is queued on alpha (its session id is alpha's).
    let waiter: { session: number } | undefined;
    const until = performance.now() + 10_000;
    while (waiter === undefined && performance.now() < until) {
      const view = (await (await fetch(`http://${alphaOps}/v1/locks?name=${encodeURIComponent(onAlpha)}`)).json()) as { waiters?: { session: number }[] };
      waiter = view.waiters?.[0];
      if (waiter === undefined) await Bun.sleep(10); // bounded poll of another process's queue
    }
    expect(waiter).toBeDefined();
    // force-release of alpha's name asked of beta's server: refused, never "nobody holds it".
    const wrong = await runCli(["force-release", "--ops", betaOps, onAlpha], { LOCKD_ADMIN_TOKEN: ADMIN });
    expect(wrong.code).toBe(78);
    expect(wrong.err).toContain(`${JSON.stringify(onAlpha)} belongs to shard alpha of alpha,beta (generation 1); this server is shard beta`);
    expect(holder.held).toBe(true);
    // kick with a map of one shard that names the wrong server: refused by the server, nothing kicked.
    const misnamed = await runCli(["kick", "--ops", `alpha=${betaOps}`, String(waiter!.session)], { LOCKD_ADMIN_TOKEN: ADMIN });
    expect(misnamed.code).toBe(78);
    expect(misnamed.err).toContain("this server is shard beta, not shard alpha");
    const kicked = await runCli(["kick", "--ops", `alpha=${alphaOps}`, String(waiter!.session)], { LOCKD_ADMIN_TOKEN: ADMIN });
    expect(kicked.err).toBe("");
    expect(kicked.code).toBe(0);
    expect(kicked.out).toContain(`kicked session ${waiter!.session} (kick-me)`);
    expect(await waiting.then(() => "granted", (error: { code?: string }) => error.code)).toBe("KICKED");
  } finally {
    await holder.release();
  }
});
