/**
 * `lockd status` given every instance's ops address (src/cli/status.ts),
 * against fake ops servers on 127.0.0.1 that answer /readyz and /v1/locks
 * as an active or a standby does: each address is asked /readyz once per
 * run; the instances line shows each instance's generation and a warning
 * names an instance that runs another map than its active (with the flags
 * that fix it: one warning per instance, also when it refuses to take
 * over); an instance of the shard's service is not blamed on the map given
 * to status (exit 0), another shard's instance is (exit 78, said once); a
 * standby's role line names the active's ops address when its /readyz
 * gives it (activeOps), and does without it (older servers); when only
 * standbys answer the error names the active they see.
 */
import { SHARD_WORDS } from "../../src/cli/words.ts";
import { afterEach, expect, test } from "bun:test";
import { CliError } from "../../src/cli/errors.ts";
import { status } from "../../src/cli/status.ts";
import type { ShardView } from "../../src/ops/views.ts";
import { activeHolder, holderMapOf, ownMapOf, takeoverRefusal } from "../../src/failover/holder.ts";
import { NO_SHARDS as NO_SHARD_SETTINGS } from "../../src/shard/identity.ts";
import { Placement } from "../../src/shard/placement.ts";

interface Fake {
  readonly at: string;
  /** /readyz requests this fake has answered. */
  readyz: number;
}

const servers: ReturnType<typeof Bun.serve>[] = [];

afterEach(() => {
  for (const server of servers.splice(0)) server.stop(true);
});

const NO_SHARDS: ShardView = { name: null, shards: [], generation: 0 };

/**
 * An ops server that is one instance of service "pay": /readyz as lockd's
 * (200 for the active, 503 for a standby, with `extra` fields such as
 * refusal or activeOps), no locks on the active, NOT_ACTIVE on a standby's
 * lock routes.
 */
function fake(role: "active" | "standby", shard: ShardView = NO_SHARDS, extra: Record<string, unknown> = {}): Fake {
  const state = { at: "", readyz: 0 };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(request) {
      const url = new URL(request.url);
      // The role fields every answer of a coordinated instance has (a refusal is /readyz's only).
      const { refusal: _, ...said } = extra;
      const roleFields = { role, epoch: 2, active: "db1/pid-1/9f3a01bc", service: "pay", ...said };
      if (url.pathname === "/readyz") {
        state.readyz++;
        return Response.json({ status: role === "active" ? "ready" : "standby", ...roleFields, shard, ...extra }, { status: role === "active" ? 200 : 503 });
      }
      if (url.pathname !== "/v1/locks") return Response.json({ error: { code: "NOT_FOUND", message: "no route" } }, { status: 404 });
      if (role === "standby") {
        return Response.json({ error: { code: "NOT_ACTIVE", message: "this instance of service pay is a standby (epoch 2): it serves no locks" }, ...roleFields, shard }, { status: 503 });
      }
      const name = url.searchParams.get("name");
      if (name !== null) return Response.json({ error: { code: "NO_SUCH_LOCK", message: `nobody holds or waits for ${JSON.stringify(name)}` }, shard }, { status: 404 });
      return Response.json({ locks: [], total: 0, next: null, truncated: false, sessions: { connected: 0, waiting: 0, owner: 0 }, shard });
    },
  });
  servers.push(server);
  state.at = `127.0.0.1:${server.port}`;
  return state;
}

/** `lockd status ARGV` in this process: its exit code (or the CliError it throws, as main would print it), stdout and stderr. */
async function run(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out = { text: "", write(text: string) { this.text += text; } };
  const err = { text: "", write(text: string) { this.text += text; } };
  try {
    const code = await status(argv, {}, out, err);
    return { code, out: out.text, err: err.text };
  } catch (error) {
    if (!(error instanceof CliError)) throw error;
    return { code: error.exitCode, out: out.text, err: `${err.text}lockd status: ${error.message}\n` };
  }
}

const alpha = (generation: number, shards = ["alpha", "beta"]): ShardView => ({ name: "alpha", shards, generation });

/** A lock name on shard alpha of alpha,beta. */
const onAlpha = ["x", "y", "z", "jobs/a", "jobs/b", "jobs/c", "jobs/d", "jobs/e"].find((n) => new Placement(["alpha", "beta"]).shardOf(n) === "alpha")!;

test("each address is asked /readyz once per run, listing, for NAME, as JSON and over a map", async () => {
  const standby = fake("standby");
  const active = fake("active");
  const fakes = [standby, active];
  const once = async (argv: string[]) => {
    for (const f of fakes) f.readyz = 0;
    const result = await run(argv);
    expect(fakes.map((f) => [f.at, f.readyz])).toEqual(fakes.map((f) => [f.at, 1]));
    return result;
  };
  const list = `${standby.at},${active.at}`;
  const listing = await once(["--ops", list]);
  expect(listing).toEqual({
    code: 0,
    out: `instances: ${standby.at} standby (epoch 2); ${active.at} active (epoch 2)\nservice pay: active, epoch 2\n0 locks; sessions: 0 holding, 0 waiting, 0 connecting\n`,
    err: "",
  });
  const named = await once(["--ops", list, "jobs/nightly"]);
  expect(named.out).toBe(`instances: ${standby.at} standby (epoch 2); ${active.at} active (epoch 2)\njobs/nightly: free (no holder, no waiters)\n`);
  const json = JSON.parse((await once(["--json", "--ops", list])).out) as { instances: { address: string; state: string }[] };
  expect(json.instances.map((i) => [i.address, i.state])).toEqual([[standby.at, "standby"], [active.at, "active"]]);

  // Over a map: alpha's standby and active, beta a lone active.
  const alphaStandby = fake("standby", alpha(3));
  const alphaActive = fake("active", alpha(3));
  const beta = fake("active", { name: "beta", shards: ["alpha", "beta"], generation: 3 });
  fakes.splice(0, 2, alphaStandby, alphaActive, beta);
  const all = await once(["--ops", `gen=3;alpha=${alphaStandby.at},${alphaActive.at};beta=${beta.at}`]);
  expect(all.code).toBe(0);
  expect(all.err).toBe("");
  expect(all.out).toContain(`shard alpha of alpha,beta (generation 3)\ninstances: ${alphaStandby.at} standby (epoch 2, generation 3); ${alphaActive.at} active (epoch 2, generation 3)\nservice pay: active, epoch 2\n`);
});

test("a standby on a lower generation than its active: the instances line shows both, and a warning names it and --shards-generation", async () => {
  const active = fake("active", alpha(4));
  const refusal = "this instance serves shard alpha of alpha,beta (map 76ba5a3b, generation 3); the service's active served shard alpha of map 76ba5a3b, generation 4: ...";
  const stale = fake("standby", alpha(3), { refusal });
  const beta = fake("active", { name: "beta", shards: ["alpha", "beta"], generation: 4 });
  const result = await run(["--ops", `gen=4;alpha=${active.at},${stale.at};beta=${beta.at}`]);
  expect(result.code).toBe(0);
  expect(result.out).toContain(`instances: ${active.at} active (epoch 2, generation 4); ${stale.at} standby (epoch 2, generation 3) (will not take over)\n`);
  // One warning: the flag to change (said by status, from the active's map), not the refusal sentence too.
  expect(result.err).toBe(
    `lockd status: warning: shard alpha: ${stale.at} is a standby that will not take over: it runs shard alpha of alpha,beta (generation 3), but the active ${active.at} runs shard alpha of alpha,beta (generation 4): restart ${stale.at} with --shards-generation 4\n`,
  );
  // --json has each instance's generation.
  const json = JSON.parse((await run(["--json", "--ops", `gen=4;alpha=${active.at},${stale.at};beta=${beta.at}`])).out) as { shards: { alpha: { instances: { address: string; generation: number }[] } } };
  expect(json.shards.alpha.instances.map((i) => [i.address, i.generation])).toEqual([[active.at, 4], [stale.at, 3]]);
});

test("a standby already on the next generation (a map change rolled halfway), as a plain list: said as such", async () => {
  const active = fake("active", alpha(4));
  const next = fake("standby", alpha(5, ["alpha", "beta", "gamma"]));
  const result = await run(["--ops", `${active.at},${next.at}`]);
  expect(result.code).toBe(0);
  expect(result.out).toContain(`\ninstances: ${active.at} active (epoch 2, generation 4); ${next.at} standby (epoch 2, generation 5)\n`);
  expect(result.err).toBe(
    `lockd status: warning: ${next.at} (standby) runs shard alpha of alpha,beta,gamma (generation 5), but the active ${active.at} runs shard alpha of alpha,beta (generation 4): a map change half done (finish it: stop the active cleanly and a standby with the new map takes over), or restart ${next.at} with --shards alpha,beta --shards-generation 4\n`,
  );
});

test("only standbys, on different generations: exit 69, and a warning with what each runs", async () => {
  const one = fake("standby", alpha(3));
  const two = fake("standby", alpha(4));
  const result = await run(["--ops", `${one.at},${two.at}`]);
  expect(result.code).toBe(69);
  expect(result.err).toStartWith(
    `lockd status: warning: the instances do not run one map: ${one.at} (standby) runs shard alpha of alpha,beta (generation 3); ${two.at} (standby) runs shard alpha of alpha,beta (generation 4): start every instance of a service with the same --shard, --shards and --shards-generation\n`,
  );
  expect(result.err).toContain(`lockd status: no active instance among the ops servers ${one.at},${two.at}`);
});

test("instances that agree, without shards: no generation shown and no warning", async () => {
  const active = fake("active");
  const standby = fake("standby");
  const result = await run(["--ops", `${active.at},${standby.at}`]);
  expect(result.err).toBe("");
  expect(result.out).toStartWith(`instances: ${active.at} active (epoch 2); ${standby.at} standby (epoch 2)\n`);
});

test("a standby started with another --shards list than its active: its refusal and the flag, not 'fix the map'; an instance of another shard in the map still is the map's fault", async () => {
  const active = fake("active", alpha(3));
  const refusal = "this instance serves shard alpha of alpha,beta,gamma (map 5eb44ddd, generation 3); the service's active served shard alpha of map 76ba5a3b, generation 3: one generation with two maps ...";
  const wrong = fake("standby", alpha(3, ["alpha", "beta", "gamma"]), { refusal });
  const beta = fake("active", { name: "beta", shards: ["alpha", "beta"], generation: 3 });
  const result = await run(["--ops", `alpha=${active.at},${wrong.at};beta=${beta.at}`]);
  expect(result.code).toBe(0);
  expect(result.err).not.toContain("fix the map");
  expect(result.err).toBe(
    `lockd status: warning: shard alpha: ${wrong.at} is a standby that will not take over: it runs shard alpha of alpha,beta,gamma (generation 3), but the active ${active.at} runs shard alpha of alpha,beta (generation 3): restart ${wrong.at} with --shards alpha,beta\n`,
  );

  // beta's standby (of beta's service) listed under alpha: the map is wrong, and says so, once, as an error (exit 78).
  const betaStandby = fake("standby", { name: "beta", shards: ["alpha", "beta"], generation: 3 }, { service: "pay-beta" });
  const swapped = await run(["--ops", `alpha=${active.at},${betaStandby.at};beta=${beta.at}`]);
  expect(swapped.code).toBe(78);
  expect(swapped.err).toBe(
    `lockd status: shard alpha: the ops server at ${betaStandby.at}: --ops says it is shard alpha of alpha,beta, but the server is shard beta of alpha,beta (generation 3): fix the map (--ops, LOCKD_OPS)\n`,
  );
  // The locks are still shown: the active's answer was checked and is alpha's.
  expect(swapped.out).toContain(`shard alpha of alpha,beta (generation 3)\ninstances: ${active.at} active (epoch 2, generation 3); ${betaStandby.at} standby (epoch 2, generation 3)\nservice pay: active, epoch 2\n`);
  // As a plain list nothing says which it is: a wrong --shard, or another shard's instance.
  const plain = await run(["--ops", `${active.at},${betaStandby.at}`]);
  expect(plain.err).toBe(
    `lockd status: warning: ${betaStandby.at} (standby) runs shard beta of alpha,beta (generation 3), but the active ${active.at} runs shard alpha of alpha,beta (generation 3): restart ${betaStandby.at} with --shard alpha (or, if it is another shard's instance, drop it from --ops)\n`,
  );
});

test("a lone standby's role line names the active's ops address when /readyz gives it (activeOps), and does without it", async () => {
  const withOps = fake("standby", NO_SHARDS, { activeOps: "127.0.0.1:7701" });
  const line = await run(["--ops", withOps.at]);
  expect(line).toEqual({ code: 0, out: "service pay: standby, epoch 2, active db1/pid-1/9f3a01bc at 127.0.0.1:7701 (a standby serves no locks: ask the active)\n", err: "" });
  expect(JSON.parse((await run(["--json", "--ops", withOps.at])).out)).toMatchObject({ role: "standby", active: "db1/pid-1/9f3a01bc", activeOps: "127.0.0.1:7701", locks: null });
  for (const older of [fake("standby"), fake("standby", NO_SHARDS, { activeOps: null })]) {
    const plain = await run(["--ops", older.at]);
    expect(plain.out).toBe("service pay: standby, epoch 2, active db1/pid-1/9f3a01bc (a standby serves no locks: ask the active)\n");
    expect(JSON.parse((await run(["--json", "--ops", older.at])).out)).not.toHaveProperty("activeOps");
  }
});

/** An address nothing listens on: a fake's, stopped (the failover gap: the active is gone). */
function downAddress(): string {
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
  const at = `127.0.0.1:${server.port}`;
  server.stop(true);
  return at;
}

test("only standbys answer, for NAME: the error names the service's active and where to ask it (or just its id, or that none is known)", async () => {
  const standby = fake("standby", NO_SHARDS, { activeOps: "127.0.0.1:7701" });
  expect(await run(["--ops", standby.at, "jobs/nightly"])).toEqual({
    code: 69,
    out: "",
    err: `lockd status: no active instance among the ops servers ${standby.at} (--ops, LOCKD_OPS): ${standby.at}: a standby (it serves no locks); the service's active is db1/pid-1/9f3a01bc at 127.0.0.1:7701 (ask it: --ops 127.0.0.1:7701)\n`,
  });
  // An active that advertises no ops address (or an older lockd): its id only.
  const noOps = fake("standby", NO_SHARDS, { activeOps: null });
  expect((await run(["--ops", noOps.at, "jobs/nightly"])).err).toEndWith(`${noOps.at}: a standby (it serves no locks); the service's active is db1/pid-1/9f3a01bc (it gives no ops address: set --advertise-ops on it)\n`);
  const released = fake("standby", NO_SHARDS, { active: null, activeOps: null });
  expect((await run(["--ops", released.at, "jobs/nightly"])).err).toEndWith("; the standbys see no active (the service's coordinator row is released or absent)\n");
  // Without NAME a lone standby's role line is the answer (exit 0).
  expect((await run(["--ops", standby.at])).code).toBe(0);

  // With a map: where to add it.
  const other = fake("standby", alpha(3), { activeOps: "127.0.0.1:7701" });
  const second = fake("standby", alpha(3), { activeOps: "127.0.0.1:7701" });
  const beta = fake("active", { name: "beta", shards: ["alpha", "beta"], generation: 3 }, { service: "pay-beta" });
  const mapped = await run(["--ops", `alpha=${other.at},${second.at};beta=${beta.at}`]);
  expect(mapped.code).toBe(69);
  expect(mapped.err).toContain(`the service's active is db1/pid-1/9f3a01bc at 127.0.0.1:7701 (add it to shard alpha's addresses in --ops)\n`);
});

test("the failover gap (the active down, a standby naming it): exit 69, saying the named active did not answer", async () => {
  const gone = downAddress();
  const standby = fake("standby", NO_SHARDS, { activeOps: gone });
  for (const argv of [["--ops", `${gone},${standby.at}`, "jobs/nightly"], ["--ops", `${gone},${standby.at}`]]) {
    const result = await run(argv);
    expect(result.code).toBe(69);
    expect(result.err).toContain(`lockd status: warning: ${gone} did not answer: `);
    expect(result.err).toEndWith(
      `${standby.at}: a standby (it serves no locks); the standbys name db1/pid-1/9f3a01bc at ${gone} as the service's active, and it did not answer as the active (a failover under way? a standby takes over once the active's lease runs out: try again; or, if the instances run on several machines, the active advertises a loopback address, which from here names this machine (set --advertise-ops on every instance))\n`,
    );
    // What each instance is, as when the answer is shown.
    expect(result.out).toBe(`instances: ${gone} unreachable; ${standby.at} standby (epoch 2)\n`);
  }
});

/** The refusal of a standby started without --shard, --shards or --shards-generation, as lockd words it (alpha's active at generation 2). */
const unshardedRefusal = takeoverRefusal(ownMapOf(NO_SHARD_SETTINGS), activeHolder("db1/pid-1/9f3a01bc", holderMapOf({ shard: "alpha", shards: ["alpha", "beta"], generation: 2 })), SHARD_WORDS)!;

test("the right map with a standby started without shard flags: one warning naming every flag to add, as with a plain list; exit 0", async () => {
  const a = fake("active", alpha(2));
  const b = fake("standby", alpha(2));
  // Its own refusal names the flags it lacks (the shard list it cannot know: the holder carries only a hash);
  // status, which has the map, names every flag with its value, in one warning.
  expect(unshardedRefusal).toContain("start it with --shard alpha, that generation's --shards list and --shards-generation 2 or higher");
  const c = fake("standby", NO_SHARDS, { refusal: unshardedRefusal });
  const d = fake("standby", alpha(2));
  const e = fake("active", { name: "beta", shards: ["alpha", "beta"], generation: 2 }, { service: "pay-beta" });
  const advice = `${c.at} is a standby that will not take over: it runs no shards (generation 0), but the active ${a.at} runs shard alpha of alpha,beta (generation 2): restart ${c.at} with --shard alpha --shards alpha,beta --shards-generation 2\n`;
  const line = `instances: ${a.at} active (epoch 2, generation 2); ${b.at} standby (epoch 2, generation 2); ${c.at} standby (epoch 2, generation 0) (will not take over); ${d.at} standby (epoch 2, generation 2)\n`;
  const mapped = await run(["--ops", `gen=2;alpha=${a.at},${b.at},${c.at},${d.at};beta=${e.at}`]);
  expect(mapped.err).toBe(`lockd status: warning: shard alpha: ${advice}`);
  expect(mapped.code).toBe(0);
  expect(mapped.out).toContain(`shard alpha of alpha,beta (generation 2)\n${line}`);
  const plain = await run(["--ops", `${a.at},${b.at},${c.at},${d.at}`]);
  expect(plain.err).toBe(`lockd status: warning: ${advice}`);
  expect(plain.out).toContain(`)\n${line}`);

  // A standby of alpha's service started with --shard beta: the instance is wrong, not the map.
  const misnamed = fake("standby", { name: "beta", shards: ["alpha", "beta"], generation: 2 }, { refusal: "... a shard's service must not be taken over by another shard (check --service and --shard)" });
  const wrongShard = await run(["--ops", `gen=2;alpha=${a.at},${misnamed.at};beta=${e.at}`]);
  expect(wrongShard.code).toBe(0);
  expect(wrongShard.err).toBe(
    `lockd status: warning: shard alpha: ${misnamed.at} is a standby that will not take over: it runs shard beta of alpha,beta (generation 2), but the active ${a.at} runs shard alpha of alpha,beta (generation 2): restart ${misnamed.at} with --shard alpha (or, if it is shard beta's instance, with shard beta's --service)\n`,
  );
});

test("a wrong map (shards swapped): exit 78, each 'fix the map' said once, and each shard's instances line as when it is shown", async () => {
  const a = fake("active", alpha(2));
  const b = fake("standby", alpha(2));
  const c = fake("standby", NO_SHARDS, { refusal: unshardedRefusal });
  const e = fake("active", { name: "beta", shards: ["alpha", "beta"], generation: 2 }, { service: "pay-beta" });
  const result = await run(["--ops", `gen=2;alpha=${e.at};beta=${a.at},${b.at},${c.at}`]);
  expect(result.code).toBe(78);
  const fixes = result.err.split("\n").filter((l) => l.includes("fix the map"));
  expect(fixes).toEqual([
    `lockd status: shard alpha: the ops server at ${e.at}: --ops says it is shard alpha of alpha,beta, but the server is shard beta of alpha,beta (generation 2): fix the map (--ops, LOCKD_OPS)`,
    `lockd status: shard beta: the ops server at ${a.at}: --ops says it is shard beta of alpha,beta, but the server is shard alpha of alpha,beta (generation 2): fix the map (--ops, LOCKD_OPS)`,
  ]);
  expect(result.out).toBe(
    `shard alpha of alpha,beta\nlocks not shown (see the error on stderr)\n\n` +
      `shard beta of alpha,beta\ninstances: ${a.at} active (epoch 2, generation 2); ${b.at} standby (epoch 2, generation 2); ${c.at} standby (epoch 2, generation 0) (will not take over)\nlocks not shown (see the error on stderr)\n`,
  );
  // For NAME the same: the instances line, the error once.
  const named = await run(["--ops", `gen=2;alpha=${e.at};beta=${a.at},${b.at},${c.at}`, onAlpha]);
  expect(named.code).toBe(78);
  expect(named.err.split("fix the map").length - 1).toBe(1);
});

test("only standbys answer for NAME, one of them another shard's listed by mistake: the map is wrong (exit 78), and said once", async () => {
  const standby = fake("standby", alpha(2), { activeOps: "127.0.0.1:7701" });
  const betaStandby = fake("standby", { name: "beta", shards: ["alpha", "beta"], generation: 2 }, { service: "pay-beta" });
  const e = fake("active", { name: "beta", shards: ["alpha", "beta"], generation: 2 }, { service: "pay-beta" });
  const result = await run(["--ops", `gen=2;alpha=${standby.at},${betaStandby.at};beta=${e.at}`, onAlpha]);
  expect(result.code).toBe(78);
  expect(result.err.split("fix the map").length - 1).toBe(1);
  expect(result.err).toContain(`lockd status: shard alpha: the ops server at ${betaStandby.at}: --ops says it is shard alpha of alpha,beta, but the server is shard beta`);
  expect(result.err).toContain("lockd status: no active instance among the ops servers");
});
