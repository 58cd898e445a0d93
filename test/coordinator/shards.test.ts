/**
 * Shards with failover, with real processes and a real PostgreSQL: each
 * shard is its own coordinated service (an active and a standby), all on
 * one PostgreSQL, all started with the shard map. A client with the map
 * holds locks on both shards; a SIGKILL of one shard's active moves that
 * shard to its standby (tokens above everything the shard issued, still in
 * the generation) and leaves the other shard alone; a map change rolled in
 * the documented order gives every shard tokens above every token of the
 * generation before; lockd status and force-release given every
 * instance's ops address ask the active, never a standby; and an instance
 * started with another map than its service's active refuses to take over.
 * Coordinator leases are short (2 s). Every wait is for an event, bounded.
 */
import { describe, expect, test } from "bun:test";
import { LockClient } from "../../src/client/index.ts";
import type { Lock } from "../../src/client/lock.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { Placement } from "../../src/shard/placement.ts";
import { GENERATION_UNIT } from "../../src/shard/tokens.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";
import { freePort, freePorts, Postgres, suitePostgres } from "./pg.ts";
import { namesOn } from "../helpers/names-on.ts";
import { refusedConnection } from "../helpers/ports.ts";

const LEASE = 2000;
const GEN = 3;
const UNIT = BigInt(GENERATION_UNIT);

let pg: Postgres;
suitePostgres((started) => (pg = started));

let serial = 0;
/** A service name of its own for each test (one PostgreSQL for the whole file). */
const serviceFor = (shard: string) => `shards-${process.pid}-${++serial}-${shard}`;

const children: ChildServer[] = [];

/** One instance of `service`, serving shard `shard` of `shards` at `generation`. */
function instance(service: string, port: number, shard: string, shards: string, generation: number, env: Record<string, string> = {}): ChildServer {
  const child = ChildServer.spawn([
    "serve",
    "--service", service,
    "--coordinator-lease", `${LEASE}ms`,
    "--listen", `127.0.0.1:${port}`,
    "--ops", "127.0.0.1:0",
    "--shutdown-grace", "0s",
    "--shard", shard,
    "--shards", shards,
    "--shards-generation", String(generation),
  ], { LOCKD_COORDINATOR: pg.url(), ...env });
  children.push(child);
  return child;
}

async function disposeAll(): Promise<void> {
  await Promise.all(children.splice(0).map((child) => child[Symbol.asyncDispose]()));
}

async function opsPort(child: ChildServer): Promise<number> {
  return Number(String((await child.event("server.started")).ops).split(":").pop());
}

async function metrics(child: ChildServer): Promise<string> {
  return await (await fetch(`http://127.0.0.1:${await opsPort(child)}/metrics`)).text();
}

/** Every session end the server counted, by reason (lockd_session_ends_total). */
async function sessionEnds(child: ChildServer): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const match of (await metrics(child)).matchAll(/^lockd_session_ends_total\{reason="([a-z_]+)"\} (\d+)$/gm)) out[match[1]!] = Number(match[2]);
  return out;
}

/** The holder's token of `name` on the server behind `child`'s ops port (null: nobody). */
async function holderToken(child: ChildServer, name: string): Promise<string | null> {
  const answer = await fetch(`http://127.0.0.1:${await opsPort(child)}/v1/locks?name=${encodeURIComponent(name)}`);
  if (answer.status === 404) return null;
  return ((await answer.json()) as { holder: { token: string } | null }).holder?.token ?? null;
}

/** Wait until the ops view shows a waiter on `name` (bounded). */
async function waitForWaiter(child: ChildServer, name: string): Promise<void> {
  const ops = await opsPort(child);
  for (let i = 0; i < 200; i++) {
    const response = await fetch(`http://127.0.0.1:${ops}/v1/locks?name=${encodeURIComponent(name)}`);
    if (response.status === 200 && ((await response.json()) as { waiting: number }).waiting >= 1) return;
    await Bun.sleep(25);
  }
  throw new Error(`no waiter on ${name}`);
}

/** A failover group: the first instance becomes active (it creates the row), the second its standby. */
async function group(service: string, ports: readonly [number, number], shard: string, shards: string, generation: number): Promise<{ active: ChildServer; standby: ChildServer }> {
  const active = instance(service, ports[0], shard, shards, generation);
  expect((await active.event("failover.active")).why).toBe("created");
  const standby = instance(service, ports[1], shard, shards, generation);
  expect((await standby.event("server.started")).role).toBe("standby");
  return { active, standby };
}

const two = new Placement(["alpha", "beta"]);

describe("two shards, each an active and a standby", () => {
  test("tokens carry the generation; WRONG_SHARD harms nothing; a SIGKILL of alpha's active moves alpha to its standby, above every alpha token, and leaves beta alone", async () => {
    try {
      const [a1, a2, b1, b2] = (await freePorts(4)) as [number, number, number, number];
      const alphaService = serviceFor("alpha");
      const betaService = serviceFor("beta");
      const [alpha, beta] = await Promise.all([
        group(alphaService, [a1, a2], "alpha", "alpha,beta", GEN),
        group(betaService, [b1, b2], "beta", "alpha,beta", GEN),
      ]);
      // The startup lines say which shard of which map each instance serves.
      for (const [child, shard] of [[alpha.active, "alpha"], [alpha.standby, "alpha"], [beta.active, "beta"], [beta.standby, "beta"]] as const) {
        expect(await child.event("server.started")).toMatchObject({ shard, shards: "alpha,beta", shardsGeneration: GEN });
      }
      expect(BigInt((await alpha.active.event("server.started")).tokensFrom) / UNIT).toBe(BigInt(GEN));
      expect(BigInt((await alpha.active.event("failover.active")).tokensFrom) / UNIT).toBe(BigInt(GEN));
      const map = `gen=${GEN};alpha=127.0.0.1:${a1},127.0.0.1:${a2};beta=127.0.0.1:${b1},127.0.0.1:${b2}`;
      const client = new LockClient({ servers: map, reconnectMs: 20_000 });
      const onAlpha = namesOn(two, "alpha", 4);
      const onBeta = namesOn(two, "beta", 4);

      // Grants on both shards: in generation GEN, rising on each shard.
      const alphaTokens: bigint[] = [];
      const betaTokens: bigint[] = [];
      for (const [names, tokens] of [[onAlpha, alphaTokens], [onBeta, betaTokens]] as const) {
        for (const name of names.slice(1)) {
          const lock = await client.acquire(name, { lease: 5000 });
          tokens.push(lock.token);
          await lock.release();
        }
      }
      for (const tokens of [alphaTokens, betaTokens]) {
        for (let i = 0; i < tokens.length; i++) {
          expect(tokens[i]! / UNIT).toBe(BigInt(GEN));
          if (i > 0) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
        }
      }

      // Holders on both shards, and a waiter behind alpha's holder.
      const alphaHolder = await client.acquire(onAlpha[0]!, { lease: 5000, owner: "alpha-holder" });
      alphaTokens.push(alphaHolder.token);
      const betaHolder = await client.acquire(onBeta[0]!, { lease: 5000, owner: "beta-holder" });
      expect(await holderToken(beta.active, onBeta[0]!)).toBe(String(betaHolder.token));

      // A name sent to the wrong shard's active: WRONG_SHARD, and nothing else changes.
      for (const [port, name, self, owner] of [[a1, onBeta[1]!, "alpha", "beta"], [b1, onAlpha[1]!, "beta", "alpha"]] as const) {
        const peer = await WirePeer.claim(port, name);
        expect(peer.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.WRONG_SHARD });
        expect(peer.frames[0]!.message).toContain(`this server is shard ${self} of alpha,beta (generation ${GEN}), where this lock belongs to shard ${owner}`);
        await peer.closed();
      }
      expect(await holderToken(alpha.active, onBeta[1]!)).toBeNull();
      expect(await holderToken(beta.active, onAlpha[1]!)).toBeNull();
      expect(await holderToken(alpha.active, onAlpha[0]!)).toBe(String(alphaHolder.token));
      expect(await holderToken(beta.active, onBeta[0]!)).toBe(String(betaHolder.token));
      expect(alphaHolder.signal.aborted || betaHolder.signal.aborted).toBe(false);

      const waiter = client.acquire(onAlpha[0]!, { lease: 5000, wait: 20_000, owner: "alpha-waiter" });
      await waitForWaiter(alpha.active, onAlpha[0]!);
      const betaEndsBefore = await sessionEnds(beta.active);

      // SIGKILL alpha's active: its standby takes over within the coordinator lease's reach.
      alpha.active.proc.kill("SIGKILL");
      const took = await alpha.standby.event("failover.active", 15_000);
      expect(took.why).toBe("expired");
      expect(took.epoch).toBe(2);
      expect(took.unchangedMs).toBeGreaterThanOrEqual(LEASE);
      // The claim moved to the new active: above every token alpha issued, still in generation GEN.
      const granted = await waiter;
      // The log names the tokens as clients see them (with the generation), not the coordinator's counter.
      expect(BigInt(took.tokensFrom)).toBeLessThanOrEqual(granted.token);
      for (const token of alphaTokens) expect(BigInt(took.tokensFrom)).toBeGreaterThan(token);
      expect(await holderToken(alpha.standby, onAlpha[0]!)).toBe(String(granted.token));
      for (const token of alphaTokens) expect(granted.token).toBeGreaterThan(token);
      expect(granted.token / UNIT).toBe(BigInt(GEN));
      expect(alphaHolder.signal.aborted).toBe(true);
      const fresh = await client.acquire(onAlpha[1]!, { lease: 5000 });
      expect(fresh.token).toBeGreaterThan(granted.token);
      expect(fresh.token / UNIT).toBe(BigInt(GEN));
      // Still a shard of the map: the new active refuses beta's names too.
      const wrong = await WirePeer.claim(a2, onBeta[2]!);
      expect(wrong.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.WRONG_SHARD });

      // Beta was not disturbed: its holder keeps its lock and token, no session of beta ended, same term.
      expect(betaHolder.signal.aborted).toBe(false);
      expect(await holderToken(beta.active, onBeta[0]!)).toBe(String(betaHolder.token));
      expect(await sessionEnds(beta.active)).toEqual(betaEndsBefore);
      expect(beta.active.logged("failover.stepping_down")).toBe(false);
      expect(beta.standby.logged("failover.active")).toBe(false);
      // And beta keeps granting in the generation, above its own earlier tokens.
      const betaNext = await client.acquire(onBeta[1]!, { lease: 5000 });
      for (const token of betaTokens) expect(betaNext.token).toBeGreaterThan(token);
      expect(betaNext.token / UNIT).toBe(BigInt(GEN));

      // The killed instance comes back as alpha's standby. lockd status with every instance's ops
      // address, standbys first: it asks each shard's active, never a standby's (empty) view.
      const back = instance(alphaService, a1, "alpha", "alpha,beta", GEN);
      expect((await back.event("server.started")).role).toBe("standby");
      const ops = `alpha=127.0.0.1:${await opsPort(back)},127.0.0.1:${await opsPort(alpha.standby)};beta=127.0.0.1:${await opsPort(beta.standby)},127.0.0.1:${await opsPort(beta.active)}`;
      for (const [name, token] of [[onAlpha[0]!, granted.token], [onBeta[0]!, betaHolder.token]] as const) {
        const one = await runCli(["status", "--ops", ops, name]);
        expect({ code: one.code, err: one.err }).toEqual({ code: 0, err: "" });
        expect(one.out).toContain(String(token));
        expect(one.out).not.toContain("free");
      }
      const all = await runCli(["status", "--ops", ops]);
      expect(all.code).toBe(0);
      expect(all.out).toContain(`service ${alphaService}: active, epoch 2`);
      expect(all.out).toContain(`service ${betaService}: active, epoch 1`);
      expect(all.out).toContain(String(granted.token));
      expect(all.out).toContain(String(betaHolder.token));
      // Only standbys answer (alpha's list: its standby and an address nothing listens on): an error
      // naming them and the active the standby sees, where to find it; never a "free".
      const seen = (await readyz(back)).body;
      expect(seen.activeOps).toBe(`127.0.0.1:${await opsPort(alpha.standby)}`);
      const none = await runCli(["status", "--ops", `alpha=127.0.0.1:${await opsPort(back)},127.0.0.1:${await freePort()};beta=127.0.0.1:${await opsPort(beta.active)}`, onAlpha[0]!]);
      expect(none.code).toBe(69);
      expect(none.err).toContain("no active instance among the ops servers");
      expect(none.err).toContain(`; the service's active is ${seen.active} at ${seen.activeOps} (add it to shard alpha's addresses in --ops)\n`);
      expect(none.out).not.toContain("free");
      // One address, a standby's, and a lock NAME: the same error (its view would say "free").
      const lone = await runCli(["status", "--ops", `127.0.0.1:${await opsPort(back)}`, onAlpha[0]!]);
      expect(lone.code).toBe(69);
      expect(lone.err).toContain(`a standby (it serves no locks); the service's active is ${seen.active} at ${seen.activeOps} (ask it: --ops ${seen.activeOps})\n`);
      expect(lone.out).not.toContain("free");
      await Promise.all([granted.release(), fresh.release(), betaHolder.release(), betaNext.release()]);
    } finally {
      await disposeAll();
    }
  }, 40_000);

  test("a map change (alpha,beta at generation N to alpha,beta,gamma at N+1) rolled in the documented order: every token of every shard is above every token of generation N", async () => {
    try {
      const [a1, a2, b1, b2, g1] = (await freePorts(5)) as [number, number, number, number, number];
      const services = { alpha: serviceFor("alpha"), beta: serviceFor("beta"), gamma: serviceFor("gamma") };
      const old = "alpha,beta";
      const [alpha, beta] = await Promise.all([
        group(services.alpha, [a1, a2], "alpha", old, GEN),
        group(services.beta, [b1, b2], "beta", old, GEN),
      ]);
      const before = new LockClient({ servers: `gen=${GEN};alpha=127.0.0.1:${a1},127.0.0.1:${a2};beta=127.0.0.1:${b1},127.0.0.1:${b2}` });
      let highest = 0n;
      for (const name of [...namesOn(two, "alpha", 10), ...namesOn(two, "beta", 10)]) {
        const lock = await before.acquire(name, { lease: 5000 });
        if (lock.token > highest) highest = lock.token;
        await lock.release();
      }
      expect(highest / UNIT).toBe(BigInt(GEN));

      // The new map. Within each service: the standby takes the new map first (restarted as a
      // standby), then the active stops cleanly and hands the row to it at once; the old active
      // comes back with the new map as the standby. alpha and beta lose names, so they go first.
      const next = "alpha,beta,gamma";
      const roll = async (service: string, ports: readonly [number, number], shard: string, g: { active: ChildServer; standby: ChildServer }) => {
        g.standby.proc.kill("SIGTERM");
        expect(await g.standby.exit(15_000)).toBe(0);
        const standby = instance(service, ports[1], shard, next, GEN + 1);
        expect((await standby.event("server.started")).role).toBe("standby");
        // Allowed (a higher generation), and said: it will serve another map than the active's.
        const note = (await standby.event("standby.map_differs")).note;
        expect(note).toContain(`this instance serves shard ${shard} of ${next} (map `);
        expect(note).toContain(`generation ${GEN + 1}); the service's active served shard ${shard} of map `);
        expect(note).toContain(`generation ${GEN}; this instance will serve its own map when it takes over`);
        expect((await readyz(standby)).body.refusal).toBeUndefined();
        g.active.proc.kill("SIGTERM");
        expect(await g.active.exit(15_000)).toBe(0);
        expect((await standby.event("failover.active", 15_000)).why).toBe("released");
        const again = instance(service, ports[0], shard, next, GEN + 1);
        expect((await again.event("server.started")).role).toBe("standby");
        return { active: standby, standby: again };
      };
      const alphaNext = await roll(services.alpha, [a1, a2], "alpha", alpha);
      const betaNext = await roll(services.beta, [b1, b2], "beta", beta);
      // gamma gains names: it starts last (its row is new: its counter starts low, its generation is higher).
      const gamma = instance(services.gamma, g1, "gamma", next, GEN + 1);
      expect((await gamma.event("failover.active")).why).toBe("created");

      const three = new Placement(["alpha", "beta", "gamma"]);
      const after = new LockClient({
        servers: `gen=${GEN + 1};alpha=127.0.0.1:${a2},127.0.0.1:${a1};beta=127.0.0.1:${b2},127.0.0.1:${b1};gamma=127.0.0.1:${g1}`,
      });
      const moved = namesOn(two, "alpha", 3, (name) => three.shardOf(name) === "gamma");
      const stayed = [...namesOn(three, "alpha", 3), ...namesOn(three, "beta", 3)];
      const seen = new Set<string>();
      for (const name of [...moved, ...stayed]) {
        const lock = await after.acquire(name, { lease: 5000 });
        seen.add(three.shardOf(name));
        expect(lock.token).toBeGreaterThan(highest);
        expect(lock.token / UNIT).toBe(BigInt(GEN + 1));
        await lock.release();
      }
      expect([...seen].sort()).toEqual(["alpha", "beta", "gamma"]);
      // The moved names are refused by their old shard, which runs the new map.
      const refused = await WirePeer.claim(a2, moved[0]!);
      expect(refused.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.WRONG_SHARD });
      expect(alphaNext.standby.logged("failover.active")).toBe(false);
      expect(betaNext.standby.logged("failover.active")).toBe(false);
    } finally {
      await disposeAll();
    }
  }, 60_000);
});

describe("lockd force-release with every instance's ops address", () => {
  test("the action goes to the active: a standby listed first is passed over (its 'nobody holds it' is not the service's answer)", async () => {
    try {
      const service = serviceFor("alpha");
      const port = await freePort();
      const admin = { LOCKD_ADMIN_TOKEN: "s3cret-admin" };
      const active = instance(service, port, "alpha", "alpha,beta", GEN, admin);
      await active.event("failover.active");
      const standby = instance(service, port, "alpha", "alpha,beta", GEN, admin);
      expect((await standby.event("server.started")).role).toBe("standby");
      const client = new LockClient({ servers: `gen=${GEN};alpha=127.0.0.1:${port};beta=127.0.0.1:1` });
      const [name] = namesOn(two, "alpha", 1);
      const lock = await client.acquire(name!, { lease: 5000 });
      const ops = `127.0.0.1:${await opsPort(standby)},127.0.0.1:${await opsPort(active)}`;
      const released = await runCli(["force-release", "--ops", ops, name!], admin);
      expect({ code: released.code, err: released.err }).toEqual({ code: 0, err: "" });
      expect(released.out).toContain(`released ${JSON.stringify(name)} from session`);
      expect(released.out).toContain(`token ${lock.token}`);
      if (!lock.signal.aborted) await new Promise((resolve) => lock.signal.addEventListener("abort", resolve, { once: true }));
      expect((lock.signal.reason as { serverCode?: number }).serverCode).toBe(ErrorCode.FORCE_RELEASED);
      // Only the standby listed: exit 69 naming it, not "nobody holds it".
      const alone = await runCli(["force-release", "--ops", `${ops.split(",")[0]},${ops.split(",")[0]}`, name!], admin);
      expect(alone.code).toBe(69);
      expect(alone.err).toContain("each is a standby");
      // ... and names the service's active, where to ask.
      expect(alone.err).toContain(`; the service's active is ${(await active.event("server.started")).instance} at 127.0.0.1:${await opsPort(active)} (ask it: --ops 127.0.0.1:${await opsPort(active)})`);
    } finally {
      await disposeAll();
    }
  }, 30_000);
});

async function readyz(child: ChildServer): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`http://127.0.0.1:${await opsPort(child)}/readyz`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

describe("an instance started with another map than its service's active", () => {
  test("a lower --shards-generation: the standby says so at start (log, /readyz, /metrics, lockd status) and does not take the row the active released; an instance with the right map does", async () => {
    try {
      const service = serviceFor("alpha");
      const port = await freePort();
      const active = instance(service, port, "alpha", "alpha,beta", GEN + 1);
      expect((await active.event("failover.active")).why).toBe("created");
      const client = new LockClient({ servers: `gen=${GEN + 1};alpha=127.0.0.1:${port};beta=127.0.0.1:1`, reconnectMs: 20_000 });
      const [name] = namesOn(two, "alpha", 1);
      const first = await client.acquire(name!, { lease: 5000 });
      expect(first.token / UNIT).toBe(BigInt(GEN + 1));
      await first.release();

      // The mistake: a standby left at the old generation.
      const stale = instance(service, port, "alpha", "alpha,beta", GEN);
      expect((await stale.event("server.started")).role).toBe("standby");
      const refused = await stale.event("standby.refusing");
      // Both maps side by side, this instance's with its shard list.
      expect(refused.reason).toContain(`this instance serves shard alpha of alpha,beta (map `);
      expect(refused.reason).toContain(`generation ${GEN}); the service's active served shard alpha of map `);
      expect(refused.reason).toContain(`generation ${GEN + 1}: this instance's tokens would be below tokens already issued (start it with --shards-generation ${GEN + 1} or higher`);
      expect(refused.holder).toEndWith(`shard=alpha gen=${GEN + 1} map=${refused.holder.split("map=")[1]}`);
      const ready = await readyz(stale);
      expect(ready).toMatchObject({ status: 503, body: { role: "standby", refusal: refused.reason } });
      expect((await readyz(active)).body.refusal).toBeUndefined();
      expect(await metrics(stale)).toContain("lockd_coordinator_takeover_refused 1");
      expect(await metrics(active)).toContain("lockd_coordinator_takeover_refused 0");
      const status = await runCli(["status", "--ops", `127.0.0.1:${await opsPort(stale)}`]);
      // The service's epoch and active as the stale standby read them (not its own term's epoch 0).
      expect(ready.body.epoch).toBe(refused.epoch);
      expect(ready.body.active).toBe(refused.holder.split(" ")[0]);
      expect(status.out).toContain(`service ${service}: standby, epoch ${ready.body.epoch}, active ${ready.body.active} at ${ready.body.activeOps} (a standby serves no locks, and refuses to take over: ${refused.reason})`);
      // Over the whole service: the answer is the active's, and the standby that will not take over is said, before it matters.
      const activeAt = `127.0.0.1:${await opsPort(active)}`;
      const staleAt = `127.0.0.1:${await opsPort(stale)}`;
      const both = await runCli(["status", "--ops", `${activeAt},${staleAt}`]);
      expect(both.code).toBe(0);
      expect(both.out).toMatch(new RegExp(`^instances: ${activeAt} active \\(epoch 1, generation ${GEN + 1}\\); ${staleAt} standby \\(epoch \\d+, generation ${GEN}\\) \\(will not take over\\)$`, "m"));
      // One warning for it: the flag to change, not its refusal sentence as well.
      expect(both.err).toBe(
        `lockd status: warning: ${staleAt} is a standby that will not take over: it runs shard alpha of alpha,beta (generation ${GEN}), but the active ${activeAt} runs shard alpha of alpha,beta (generation ${GEN + 1}): restart ${staleAt} with --shards-generation ${GEN + 1}\n`,
      );
      const asJson = JSON.parse((await runCli(["status", "--json", "--ops", `${activeAt},${staleAt}`])).out) as { instances: { address: string; state: string; refusal?: string }[] };
      expect(asJson.instances.map((i) => [i.address, i.state, i.refusal])).toEqual([[activeAt, "active", undefined], [staleAt, "standby", refused.reason]]);

      // A clean stop of the active releases the row, naming its map: the stale standby still refuses it.
      active.proc.kill("SIGTERM");
      expect(await active.exit(15_000)).toBe(0);
      const again = await stale.nthEvent("standby.refusing", 2, 10_000);
      expect(again.holder).toStartWith("(released) shard=alpha");
      expect(stale.logged("failover.active")).toBe(false);
      expect(await refusedConnection(port)).toBe(true);

      // An instance with the right map takes the released row at once; tokens keep rising in the generation.
      const right = instance(service, port, "alpha", "alpha,beta", GEN + 1);
      expect((await right.event("failover.active")).why).toBe("released");
      const next = await client.acquire(name!, { lease: 5000, wait: 10_000 });
      expect(next.token).toBeGreaterThan(first.token);
      expect(next.token / UNIT).toBe(BigInt(GEN + 1));
      await next.release();
      // The stale standby has seen the new active, and refuses it too.
      expect((await stale.nthEvent("standby.refusing", 3, 10_000)).epoch).toBe(2);
      expect(stale.logged("failover.active")).toBe(false);
    } finally {
      await disposeAll();
    }
  }, 40_000);

  test("the same generation with another --shards list: the standby refuses, and after a SIGKILL of the active only an instance with the active's map takes over", async () => {
    try {
      const service = serviceFor("alpha");
      const port = await freePort();
      const active = instance(service, port, "alpha", "alpha,beta", GEN);
      await active.event("failover.active");
      const wrong = instance(service, port, "alpha", "alpha,beta,gamma", GEN);
      const refusal = (await wrong.event("standby.refusing")).reason;
      expect(refusal).toContain("one generation with two maps");
      // lockd status given the right map: the refusal and the flag that fixes the instance, not "fix the map".
      const activeAt = `127.0.0.1:${await opsPort(active)}`;
      const wrongAt = `127.0.0.1:${await opsPort(wrong)}`;
      const status = await runCli(["status", "--ops", `gen=${GEN};alpha=${activeAt},${wrongAt};beta=127.0.0.1:1`, namesOn(two, "alpha", 1)[0]!]);
      expect(status.code).toBe(0);
      // One warning, naming the flag that fixes the instance; no "fix the map" (the map is right), and exit 0.
      expect(status.err).toBe(`lockd status: warning: shard alpha: ${wrongAt} is a standby that will not take over: it runs shard alpha of alpha,beta,gamma (generation ${GEN}), but the active ${activeAt} runs shard alpha of alpha,beta (generation ${GEN}): restart ${wrongAt} with --shards alpha,beta\n`);

      active.proc.kill("SIGKILL");
      await active.exited;
      const right = instance(service, port, "alpha", "alpha,beta", GEN);
      expect((await right.event("server.started")).role).toBe("standby");
      const took = await right.event("failover.active", 15_000);
      expect(took.why).toBe("expired");
      expect(took.epoch).toBe(2);
      // The wrong instance saw the row unchanged for longer than the right one did, and never took it.
      const seen = await wrong.nthEvent("standby.refusing", 2, 10_000);
      expect(seen.epoch).toBe(2);
      expect(wrong.logged("failover.active")).toBe(false);
      expect((await readyz(wrong)).body.refusal).toContain("one generation with two maps");
    } finally {
      await disposeAll();
    }
  }, 40_000);
});

