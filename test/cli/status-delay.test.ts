/**
 * `lockd status` during a lock-delay (src/cli/status.ts): a `lock-delay:`
 * line from the serving instance's /readyz lockDelay (after the role line;
 * before a NAME's answer, also a free one), and `lockDelay` in --json; no
 * line and no field from a lockd whose /readyz says nothing of one. Against
 * fake ops servers on 127.0.0.1, and once against a real `lockd serve
 * --data-dir` whose lease record says its last run did not stop cleanly.
 */
import { afterAll, afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CliError } from "../../src/cli/errors.ts";
import { delayLeft, lockDelayText, status } from "../../src/cli/status.ts";
import { writeLeases } from "../../src/tokens/leases.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";

const servers: ReturnType<typeof Bun.serve>[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.stop(true);
});
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const NO_SHARDS = { name: null, shards: [], generation: 0 };

/**
 * An ops server as lockd's: /readyz with `ready` (its role fields and
 * lockDelay, or none of them: an older lockd), /v1/locks with one held
 * lock "held" (or NOT_ACTIVE for a standby).
 */
function fake(ready: Record<string, unknown>, standby = false): string {
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(request) {
      const url = new URL(request.url);
      if (url.pathname === "/readyz") return Response.json({ status: standby ? "standby" : "ready", shard: NO_SHARDS, ...ready }, { status: standby ? 503 : 200 });
      if (url.pathname !== "/v1/locks") return Response.json({ error: { code: "NOT_FOUND", message: "no route" } }, { status: 404 });
      if (standby) return Response.json({ error: { code: "NOT_ACTIVE", message: "a standby: it serves no locks" }, shard: NO_SHARDS }, { status: 503 });
      const holder = { session: 7, owner: "worker-1", remote: "10.0.0.9:50000", token: "42", heldForMs: 1500, leaseMs: 20_000, silentForMs: 100 };
      const lock = { name: "held", holder, waiters: [], waiting: 0, shard: NO_SHARDS };
      const name = url.searchParams.get("name");
      if (name === "held") return Response.json(lock);
      if (name !== null) return Response.json({ error: { code: "NO_SUCH_LOCK", message: `nobody holds or waits for ${JSON.stringify(name)}` }, shard: NO_SHARDS }, { status: 404 });
      return Response.json({ locks: [lock], total: 1, next: null, truncated: false, sessions: { connected: 0, waiting: 0, owner: 1 }, shard: NO_SHARDS });
    },
  });
  servers.push(server);
  return `127.0.0.1:${server.port}`;
}

async function run(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out = { text: "", write(text: string) { this.text += text; } };
  const err = { text: "", write(text: string) { this.text += text; } };
  try {
    return { code: await status(argv, {}, out, err), out: out.text, err: err.text };
  } catch (error) {
    if (!(error instanceof CliError)) throw error;
    return { code: error.exitCode, out: out.text, err: `${err.text}lockd status: ${error.message}\n` };
  }
}

const TAKEOVER = { why: "takeover", remainingMs: 12_300, names: 0, everyName: true };

test("the line says how long is left and for which names, by why; nothing without a delay", () => {
  expect(lockDelayText(TAKEOVER)).toBe("lock-delay: 12.3 s left, every name (after a takeover: an earlier active's holders may still believe they hold)\n");
  expect(lockDelayText({ why: "restart", remainingMs: 16_400, names: 0, everyName: true })).toBe(
    "lock-delay: 16.4 s left, every name (after a restart from a stop that was not clean: holders from before it may still believe they hold)\n",
  );
  expect(lockDelayText({ why: "released", remainingMs: 75_000, names: 0, everyName: true })).toBe(
    "lock-delay: 1 min 15 s left, every name (after a takeover from a clean stop: an earlier active's holders may still believe they hold)\n",
  );
  expect(lockDelayText({ why: "clean-restart", remainingMs: 4_100, names: 3, everyName: false })).toBe(
    "lock-delay: 4.1 s left, 3 names held at the last clean stop (their holders may still believe they hold them; every other name is granted)\n",
  );
  expect(lockDelayText({ why: "released", remainingMs: 4_100, names: 1, everyName: false })).toBe(
    "lock-delay: 4.1 s left, 1 name held at the earlier active's clean stop (its holder may still believe it holds it; every other name is granted)\n",
  );
  // A why this lockd does not know (a newer server): a plain line, the server's word not repeated.
  expect(lockDelayText({ why: "\u001b[2Jsomething-new", remainingMs: 900, names: 0, everyName: true })).toBe(
    "lock-delay: 0.9 s left, every name (an earlier server's holders may still believe they hold)\n",
  );
  expect(lockDelayText(null)).toBe("");
  expect(lockDelayText(undefined)).toBe("");
  // Tenths, rounded up: never "0.0 s" while some is left; minutes, then hours.
  expect([1, 100, 101, 12_250, 59_999, 60_000, 3_599_001, 3_600_000, 2_951_000].map(delayLeft)).toEqual([
    "0.1 s", "0.1 s", "0.2 s", "12.3 s", "60.0 s", "1 min 0 s", "1 h 0 min", "1 h 0 min", "49 min 11 s",
  ]);
});

test("listing every lock: the line after the role line, and lockDelay in --json; a NAME's answer, held or free, has it too", async () => {
  const at = fake({ role: "active", epoch: 3, active: "db1/pid-1/9f3a01bc", service: "pay", lockDelay: TAKEOVER });
  const text = await run(["--ops", at]);
  expect(text.code).toBe(0);
  const lines = text.out.split("\n");
  expect(lines.slice(0, 3)).toEqual([
    "service pay: active, epoch 3",
    "lock-delay: 12.3 s left, every name (after a takeover: an earlier active's holders may still believe they hold)",
    "1 lock; sessions: 1 holding, 0 waiting, 0 connecting",
  ]);
  const json = await run(["--ops", at, "--json"]);
  expect(json.code).toBe(0);
  expect(JSON.parse(json.out).lockDelay).toEqual(TAKEOVER);
  expect(JSON.parse(json.out).locks[0].name).toBe("held");

  const free = await run(["--ops", at, "jobs/free"]);
  expect(free.out).toBe("lock-delay: 12.3 s left, every name (after a takeover: an earlier active's holders may still believe they hold)\njobs/free: free (no holder, no waiters)\n");
  expect(JSON.parse((await run(["--ops", at, "--json", "jobs/free"])).out)).toEqual({ name: "jobs/free", holder: null, waiters: [], lockDelay: TAKEOVER });
  const held = await run(["--ops", at, "held"]);
  expect(held.out.split("\n")[0]).toStartWith("lock-delay: 12.3 s left, every name");
  expect(held.out.split("\n")[1]).toStartWith("LOCK");
  expect(JSON.parse((await run(["--ops", at, "--json", "held"])).out).lockDelay).toEqual(TAKEOVER);
});

test("no delay running: no line, lockDelay null in --json; a lockd whose /readyz has no lockDelay: no line and no field", async () => {
  const none = fake({ lockDelay: null });
  const text = await run(["--ops", none]);
  expect(text.out).toStartWith("1 lock; sessions:");
  expect(text.out).not.toContain("lock-delay");
  expect(JSON.parse((await run(["--ops", none, "--json"])).out).lockDelay).toBeNull();
  const older = fake({});
  expect((await run(["--ops", older])).out).not.toContain("lock-delay");
  expect("lockDelay" in JSON.parse((await run(["--ops", older, "--json"])).out)).toBe(false);
  expect("lockDelay" in JSON.parse((await run(["--ops", older, "--json", "held"])).out)).toBe(false);
});

test("with a standby listed first, the line is the active's (the instance that served the answer)", async () => {
  const standby = fake({ role: "standby", epoch: 3, active: "db1/pid-1/9f3a01bc", service: "pay", lockDelay: null }, true);
  const published = { why: "released", remainingMs: 8_200, names: 2, everyName: false };
  const active = fake({ role: "active", epoch: 3, active: "db1/pid-1/9f3a01bc", service: "pay", lockDelay: published });
  const text = await run(["--ops", `${standby},${active}`]);
  expect(text.code).toBe(0);
  expect(text.out).toContain("\nlock-delay: 8.2 s left, 2 names held at the earlier active's clean stop (their holders may still believe they hold them; every other name is granted)\n");
  const json = JSON.parse((await run(["--ops", `${standby},${active}`, "--json"])).out);
  expect(json.lockDelay).toEqual(published);
  expect(json.instances.map((i: { state: string }) => i.state)).toEqual(["standby", "active"]);
});

test("a real lockd serve after a run that did not stop cleanly: lockd status prints the line, --json the lockDelay of /readyz", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-status-delay-"));
  dirs.push(dir);
  writeLeases(dir, { maxLeaseMs: 20_000, carryLeaseMs: 0, clean: false, held: null });
  await using server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--data-dir", dir]);
  const start = await server.line("lockd listening", 30_000);
  expect(start.lockDelayMs).toBeGreaterThan(15_000); // 0.82 x 20 s from the start, less the time to the startup line
  expect(start.lockDelayMs).toBeLessThanOrEqual(16_400);
  const ops = String(start.ops);
  const text = await runCli(["status", "--ops", ops]);
  expect(text.code).toBe(0);
  expect(text.out).toMatch(
    /^lock-delay: \d+\.\d s left, every name \(after a restart from a stop that was not clean: holders from before it may still believe they hold\)\n0 locks; sessions: 0 holding, 0 waiting, 0 connecting\n$/,
  );
  const json = await runCli(["status", "--ops", ops, "--json"]);
  expect(json.code).toBe(0);
  const view = JSON.parse(json.out).lockDelay;
  expect(view).toMatchObject({ why: "restart", names: 0, everyName: true });
  expect(view.remainingMs).toBeGreaterThan(0);
  expect(view.remainingMs).toBeLessThanOrEqual(16_400);
}, 60_000);
