/**
 * Failover with real processes and a real PostgreSQL: two `lockd serve
 * --coordinator` instances, one active and one standby; SIGKILL, SIGSTOP and
 * a clean stop of the active; the coordinator going away; bad configuration.
 * Coordinator leases are short (2 s) so the file runs in seconds. Every wait
 * is for an event (a log line, a frame, a grant), bounded.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { LockClient } from "../../src/client/index.ts";
import { delayFor } from "../../src/core/delay.ts";
import { SCHEMA_VERSION } from "../../src/failover/store.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { FencedResource } from "../faults/fence.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";
import { freePort, freePorts, Postgres, suitePostgres } from "./pg.ts";
import { refusedConnection } from "../helpers/ports.ts";

/** /readyz's shard field on a server started without --shard. */
const NO_SHARD = { name: null, shards: [], generation: 0 };
const LEASE = 2000;
/** /readyz's coordinator field on the one throwaway PostgreSQL (no replica). */
const SINGLE = () => ({ server: `127.0.0.1:${pg.port}`, replication: { mode: "none", synchronousCommit: "on", synchronousStandbyNames: "", replicas: 0, synchronousReplicas: 0 } });

let pg: Postgres;
suitePostgres((started) => (pg = started));

let serial = 0;
const nextService = () => `failover-${process.pid}-${++serial}`;

function instance(service: string, listenPort: number, extra: readonly string[] = [], lease = LEASE, env?: Record<string, string>): ChildServer {
  return ChildServer.spawn([
    "serve",
    "--service", service,
    "--coordinator-lease", `${lease}ms`,
    "--listen", `127.0.0.1:${listenPort}`,
    "--ops", "127.0.0.1:0",
    "--shutdown-grace", "0s",
    ...extra,
  ], env ?? { LOCKD_COORDINATOR: pg.url() });
}

async function opsPort(child: ChildServer): Promise<number> {
  return Number(String((await child.event("server.started")).ops).split(":").pop());
}

async function readyz(port: number): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** Two instances on one lock port: the first active (it creates the row), the second standby. */
async function pair(service: string, port: number, lease = LEASE, env?: Record<string, string>): Promise<{ a: ChildServer; b: ChildServer }> {
  const a = instance(service, port, [], lease, env);
  const started = await a.event("failover.active");
  expect(started.why).toBe("created");
  const b = instance(service, port, [], lease, env);
  expect((await b.event("server.started")).role).toBe("standby");
  return { a, b };
}

describe("two instances", () => {
  test("one active, one standby; SIGKILL the active: the standby takes over and a waiting client (library and lockd run) is granted a higher token", async () => {
    const service = nextService();
    const port = await freePort();
    const { a, b } = await pair(service, port);
    await using _a = a;
    await using _b = b;
    const aStarted = await a.event("server.started");
    expect(aStarted.role).toBe("active");
    const activeId = aStarted.instance as string;
    // The standby shows the service's epoch and its active as it last read the row.
    expect(await b.event("server.started")).toMatchObject({ role: "standby", epoch: 1, active: activeId });
    const standbyOps = await opsPort(b);
    const activeOps = await opsPort(a);
    // The active names its ops address in the row (its --ops as bound: port 0 picked one); the standby shows it.
    const activeAt = `127.0.0.1:${activeOps}`;
    expect((await b.event("server.started")).activeOps).toBe(activeAt);
    expect((await b.event("standby.watching")).activeOps).toBe(activeAt);
    const standby = await readyz(standbyOps);
    expect(standby).toEqual({ status: 503, body: { status: "standby", role: "standby", epoch: 1, active: activeId, activeOps: activeAt, service, shard: NO_SHARD, lockDelay: null, coordinator: SINGLE() } });
    expect(await readyz(activeOps)).toEqual({ status: 200, body: { status: "ready", role: "active", epoch: 1, active: activeId, activeOps: activeAt, service, shard: NO_SHARD, lockDelay: null, coordinator: SINGLE() } });
    // The role in lockd status and /metrics.
    expect((await runCli(["status", "--ops", `127.0.0.1:${activeOps}`])).out).toContain(`service ${service}: active, epoch 1\n`);
    const lone = await runCli(["status", "--ops", `127.0.0.1:${standbyOps}`]);
    expect(lone.out).toBe(`service ${service}: standby, epoch 1, active ${activeId} at 127.0.0.1:${activeOps} (a standby serves no locks: ask the active)\ncoordinator 127.0.0.1:${pg.port}, replication none (no replica connected)\n`);
    // The standby's lock views say it serves none, rather than answer from its empty table
    // (force-release and kick too, once the admin token is accepted: test/ops/not-active.test.ts).
    for (const path of ["/v1/locks", "/v1/locks/k", "/v1/locks?name=k"]) {
      const answer = await fetch(`http://127.0.0.1:${standbyOps}${path}`);
      const body = (await answer.json()) as { error: { code: string; message: string }; role: string; service: string; active: string; activeOps: string };
      expect({ path, status: answer.status, code: body.error.code, role: body.role, service: body.service, active: body.active, activeOps: body.activeOps }).toEqual({
        path,
        status: 503,
        code: "NOT_ACTIVE",
        role: "standby",
        service,
        active: activeId,
        activeOps: activeAt,
      });
      expect(body.error.message).toContain(`(epoch 1): it serves no locks; ask the active instance, ${activeId}, at ${activeAt} (its /readyz answers 200)`);
    }
    const metrics = await (await fetch(`http://127.0.0.1:${activeOps}/metrics`)).text();
    expect(metrics).toContain(`lockd_role{role="active",service="${service}"} 1`);
    expect(metrics).toContain(`lockd_role{role="standby",service="${service}"} 0`);
    expect(metrics).toContain("lockd_coordinator_epoch 1");
    expect(metrics).toMatch(/lockd_coordinator_round_trip_seconds \d/);
    expect(metrics).toContain("lockd_coordinator_step_downs_total 0");
    expect(metrics).toContain("lockd_coordinator_renewals_failed_total 0");

    const client = new LockClient({ servers: `127.0.0.1:${port}`, reconnectMs: 20_000 });
    const holder = await client.acquire("k", { lease: 5000 });
    const issued = [holder.token];
    // Several grants, so "above every token issued" has more than one token to be above.
    for (const name of ["x", "y"]) {
      const lock = await client.acquire(name, { lease: 5000 });
      issued.push(lock.token);
      await lock.release();
    }
    const waiter = client.acquire("k", { lease: 5000, wait: 20_000 });
    await waitForWaiter(await opsPort(a), "k");
    // lockd run waits too, and keeps waiting through the failover within its --wait.
    const run = runCli(["run", "k", "--server", `127.0.0.1:${port}`, "--wait", "20s", "--", "sh", "-c", "echo token=$LOCKD_TOKEN"], {}, 30_000);
    await waitForWaiter(await opsPort(a), "k", 2);

    a.proc.kill("SIGKILL");
    const took = await b.event("failover.active", 15_000);
    expect(took.why).toBe("expired");
    expect(took.epoch).toBe(2);
    // Never early: the standby had seen the row unchanged for a whole lease on its own clock.
    // (How soon after the kill is measured by bench/failover.ts, not asserted here.)
    expect(took.unchangedMs).toBeGreaterThanOrEqual(LEASE);
    const granted = await waiter;
    for (const token of issued) expect(granted.token).toBeGreaterThan(token);
    expect(holder.signal.aborted).toBe(true);
    await granted.release();
    const ran = await run;
    expect({ code: ran.code, err: ran.err }).toEqual({ code: 0, err: expect.any(String) });
    const runToken = BigInt(/token=(\d+)/.exec(ran.out)![1]!);
    for (const token of issued) expect(runToken).toBeGreaterThan(token);
    expect(runToken).not.toBe(granted.token);
    expect((await readyz(standbyOps)).status).toBe(200);
    expect(await (await fetch(`http://127.0.0.1:${standbyOps}/metrics`)).text()).toContain("lockd_coordinator_takeovers_total 1");
  });

  test("SIGSTOP the active past its lease: the standby takes over; on SIGCONT the old active grants nothing and its waiter gets SHUTTING_DOWN", async () => {
    const service = nextService();
    const [portA, portB] = (await freePorts(2)) as [number, number];
    const a = instance(service, portA);
    await using _a = a;
    await a.event("failover.active");
    const b = instance(service, portB);
    await using _b = b;
    expect((await b.event("server.started")).role).toBe("standby");
    using fence = new FencedResource();

    const clientA = new LockClient({ servers: `127.0.0.1:${portA}`, reconnectMs: 0 });
    const holder = await clientA.acquire("k", { lease: 3000 });
    expect(await fence.write(holder.token)).toBe(200);
    const waiter = await WirePeer.claim(portA, "k", 60_000);
    expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);

    a.proc.kill("SIGSTOP");
    try {
      const took = await b.event("failover.active", 15_000);
      expect(took.why).toBe("expired");
      // The new active's tokens are above everything the old one could issue.
      const clientB = new LockClient({ servers: `127.0.0.1:${portB}` });
      const fresh = await clientB.acquire("k", { lease: 5000 });
      expect(fresh.token).toBeGreaterThan(holder.token);
      expect(await fence.write(fresh.token)).toBe(200);
      // While the old active is stopped, its holder lets go: the old active will see the close first thing.
      await holder.release();
      await fresh.release();
    } finally {
      a.proc.kill("SIGCONT");
    }
    const down = await a.event("failover.stepping_down", 15_000);
    expect(down.reason).toMatch(/no renewal confirmed|taken/);
    await waiter.closed(15_000);
    const frames = waiter.frames.map((f) => f.type);
    expect(frames).not.toContain(FrameType.ACQUIRED);
    expect(waiter.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN });
    // Whatever the old active did on waking, the guarded resource only ever saw rising tokens.
    expect(fence.writes.every((w) => w.accepted)).toBe(true);
    // The old active is a standby now: no listener, /readyz 503.
    const ops = await opsPort(a);
    expect(await readyz(ops)).toMatchObject({ status: 503, body: { role: "standby" } });
    expect(await (await fetch(`http://127.0.0.1:${ops}/metrics`)).text()).toContain("lockd_coordinator_step_downs_total 1");
    expect(await refusedConnection(portA)).toBe(true);
  });

  test("a clean stop of the active hands over at once: names not held at the stop are granted at once, a held one after its holder's deadline", async () => {
    const service = nextService();
    const port = await freePort();
    // The standby reads every lease/4 and takes a released row at its next read, not a lease later.
    // These two read the URL (with its password) from a file.
    const file = join(pg.dir, `url-${service}`);
    writeFileSync(file, `${pg.url()}\n`);
    const { a, b } = await pair(service, port, 4000, { LOCKD_COORDINATOR_FILE: file });
    expect((await a.event("server.started")).coordinatorFrom).toBe("LOCKD_COORDINATOR_FILE");
    expect((await a.event("server.started")).coordinator).not.toContain("secret");
    await using _a = a;
    await using _b = b;
    const client = new LockClient({ servers: `127.0.0.1:${port}`, reconnectMs: 20_000 });
    const first = await client.acquire("k", { lease: 5000 });
    const token = first.token;
    a.proc.kill("SIGTERM");
    expect(await a.exit(15_000)).toBe(0);
    expect(a.events("failover.released")[0]?.published).toBe(1);
    const took = await b.event("failover.active", 15_000);
    expect(took.why).toBe("released");
    const since = performance.now();
    // A name nobody held at the stop: at once (the handover stays one reconnect).
    const other = await client.acquire("other", { lease: 5000, wait: 15_000, try: true });
    expect(other.token).toBeGreaterThan(token);
    await other.release();
    // "k" was held: its holder, had it been cut off, would believe until 0.8 x 5 s after the stop.
    const asked = performance.now();
    const delay = (await readyz(await opsPort(b))).body.lockDelay as { names: number; remainingMs: number; everyName: boolean } | null;
    expect(delay).toMatchObject({ names: 1, everyName: false, why: "released" });
    expect(delay!.remainingMs).toBeLessThanOrEqual(delayFor(5000));
    const next = await client.acquire("k", { lease: 5000, wait: 15_000 });
    // Not before the delay the ops server showed has run out (it ends no earlier than `asked` + remainingMs).
    expect(performance.now()).toBeGreaterThanOrEqual(asked + delay!.remainingMs - 2);
    expect(performance.now() - since).toBeLessThan(15_000);
    expect(next.token).toBeGreaterThan(token);
    await next.release();
  });
});

describe("the active's ops address (ops= in the row)", () => {
  test("--advertise-ops is the address the active names; the standby that takes over after a clean stop names its own bound one", async () => {
    const service = nextService();
    const port = await freePort();
    const a = instance(service, port, ["--advertise-ops", "lockd-a.example:7701"], 4000);
    await using _a = a;
    expect((await a.event("failover.active")).advertisedOps).toBe("lockd-a.example:7701");
    const b = instance(service, port, [], 4000);
    await using _b = b;
    expect(await b.event("server.started")).toMatchObject({ role: "standby", activeOps: "lockd-a.example:7701" });
    const bOps = await opsPort(b);
    expect((await readyz(bOps)).body).toMatchObject({ role: "standby", active: (await a.event("server.started")).instance, activeOps: "lockd-a.example:7701" });
    expect((await readyz(await opsPort(a))).body).toMatchObject({ role: "active", activeOps: "lockd-a.example:7701" });
    a.proc.kill("SIGTERM");
    expect(await a.exit(15_000)).toBe(0);
    expect((await b.event("failover.active", 15_000)).advertisedOps).toBe(`127.0.0.1:${bOps}`);
    expect((await readyz(bOps)).body).toMatchObject({ status: "ready", role: "active", activeOps: `127.0.0.1:${bOps}` });
  });
});

describe("bad configuration: one line, a non-zero exit", () => {
  const serve = (url: string, extra: readonly string[] = []) =>
    runCli(["serve", "--coordinator", url, "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", ...extra], { LOCKD_DATA_DIR: pg.dir + "/nodata" });

  test("an unreachable coordinator", async () => {
    const port = await freePort();
    const { code, err } = await serve(`postgres://lockd:secret@127.0.0.1:${port}/postgres`);
    expect(code).toBe(69);
    expect(err.trim().split("\n")).toHaveLength(1);
    expect(err).toContain("cannot reach the coordinator");
    expect(err).not.toContain("secret");
  });

  test("a wrong password", async () => {
    const { code, err } = await serve(pg.url("nope"));
    expect(code).toBe(69);
    expect(err.trim().split("\n")).toHaveLength(1);
    expect(err).toContain("refused the login");
  });

  test("a URL that is not PostgreSQL", async () => {
    const { code, err } = await serve("mysql://root:pw@127.0.0.1:3306/lockd");
    expect(code).toBe(64);
    expect(err.trim().split("\n")).toHaveLength(1);
    expect(err).toContain("not a PostgreSQL URL");
  });

  test("tables of another schema version", async () => {
    const { code, err } = await serve(await pg.databaseAtSchema(`schema_${process.pid}`, SCHEMA_VERSION + 1));
    expect(code).toBe(65);
    expect(err.trim().split("\n")).toHaveLength(1);
    expect(err).toContain(`schema version ${SCHEMA_VERSION + 1}`);
  });

  test("an --advertise-ops too long for the coordinator row", async () => {
    const long = `${"a".repeat(60)}.${"b".repeat(60)}.example`;
    const { code, err } = await serve(pg.url(), ["--advertise-ops", `${long}:7701`]);
    expect(code).toBe(64);
    expect(err.trim().split("\n")).toHaveLength(1);
    expect(err).toContain(`--advertise-ops: "${long}:7701" is longer than 100 characters`);
  });

  test("both --coordinator and --coordinator-file", async () => {
    const { code, err } = await serve(pg.url(), ["--coordinator-file", "/nonexistent"]);
    expect(code).toBe(64);
    expect(err).toContain("--coordinator and --coordinator-file are both set");
  });
});

// Last: it stops the shared PostgreSQL.
describe("the coordinator goes away", () => {
  test("the active steps down (no renewal confirmed for 0.8 x lease), its sessions get SHUTTING_DOWN, the standby does not take over; back when PostgreSQL is", async () => {
    const service = nextService();
    const port = await freePort();
    const { a, b } = await pair(service, port);
    await using _a = a;
    await using _b = b;
    // A lease long enough to outlast the step-down (the peer does not heartbeat), short enough that the
    // takeover's lock-delay (0.8 x the largest lease, less 0.2 x the coordinator lease) fits the test.
    const peer = await WirePeer.claim(port, "k", 6_000);
    expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);

    await pg.stop();
    try {
      const down = await a.event("failover.stepping_down", 15_000);
      expect(down.reason).toContain("no renewal confirmed");
      await peer.closed(10_000);
      expect(peer.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN });
      expect(await refusedConnection(port)).toBe(true);
      // Neither instance is active while the coordinator is gone.
      expect(b.logged("failover.active")).toBe(false);
    } finally {
      await pg.start();
    }
    // With the coordinator back, one of them takes the (unchanged) row after a lease.
    const winner = await Promise.any([a.nthEvent("failover.active", 2, 20_000).then(() => a), b.nthEvent("failover.active", 1, 20_000).then(() => b)]);
    const client = new LockClient({ servers: `127.0.0.1:${port}`, reconnectMs: 20_000 });
    const lock = await client.acquire("k", { lease: 5000, wait: 15_000 });
    expect(lock.token).toBeGreaterThan(BigInt(peer.frames[0]!.token!));
    await lock.release();
    expect(winner === a || winner === b).toBe(true);
  });
});

/**
 * Wait until the ops view shows `atLeast` waiters on `name`, polling (the server
 * is another process), bounded by time: a waiter that is a fresh `lockd run`
 * process may take seconds to start on a loaded machine.
 */
async function waitForWaiter(ops: number, name: string, atLeast = 1, ms = 20_000): Promise<void> {
  const deadline = performance.now() + ms;
  let waiting = 0;
  while (performance.now() < deadline) {
    const response = await fetch(`http://127.0.0.1:${ops}/v1/locks?name=${encodeURIComponent(name)}`);
    if (response.status === 200) waiting = ((await response.json()) as { waiting: number }).waiting;
    if (waiting >= atLeast) return;
    await Bun.sleep(25);
  }
  throw new Error(`${waiting} waiters on ${name} after ${ms} ms, want ${atLeast}`);
}

