/**
 * Failover benchmark: real `lockd serve --coordinator` processes against a
 * throwaway PostgreSQL 15 (test/coordinator/pg.ts).
 *
 * 1. Failover time: an active and a standby share one lock port; a client
 *    holds lock "k" at the active and a second waits for it. The active is
 *    killed with SIGKILL; the waiter, its connection broken, reconnects every
 *    10 ms and sends ACQUIRE again. Measured from the kill() call to the
 *    waiter's ACQUIRED from the new active (and, for reference, to the new
 *    active's "active: listening" log line arriving). A fresh standby is
 *    started for the next round. --rounds takeovers (default 20) at each of
 *    2 s and 4 s coordinator leases.
 * 2. Hot path: claim (connect, ACQUIRE of a free lock, ACQUIRED) and
 *    handover (the owner closes; the queued waiter's ACQUIRED) against
 *    `lockd serve` without and with --coordinator, interleaved in blocks of
 *    10 samples so the machine's drift hits both alike; the ratio of medians.
 * 3. Coordinator statements: index scans on lockd_coordinator (every
 *    statement lockd sends is one) per second, idle and under a claim load,
 *    from PostgreSQL's statistics, for one active and one standby at a 2 s
 *    lease and --token-block 1000.
 *
 * Usage: bun bench/failover.ts [--rounds 20] [--samples 300] [--only failover,hotpath,statements]
 */
import { loadavg } from "node:os";
import { ChildServer } from "../test/fixtures/ops-child.ts";
import { freePort, freePorts, Postgres } from "../test/coordinator/pg.ts";
import { WirePeer } from "../test/helpers/wire.ts";
import { FrameType } from "../src/protocol/index.ts";
import { summarize, table } from "./lib/stats.ts";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const ROUNDS = Number(args.get("rounds") ?? 20);
const SAMPLES = Number(args.get("samples") ?? 300);
const ONLY = new Set((args.get("only") ?? "failover,hotpath,statements").split(","));

function serve(pg: Postgres | null, port: number, extra: readonly string[] = []): ChildServer {
  return ChildServer.spawn(
    ["serve", "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--log-level", "info", ...extra],
    pg === null ? {} : { LOCKD_COORDINATOR: pg.url() },
  );
}

async function connectRetrying(port: number, deadlineMs: number): Promise<WirePeer> {
  const until = performance.now() + deadlineMs;
  for (;;) {
    try {
      return await WirePeer.connect(port);
    } catch (error) {
      if (performance.now() > until) throw error;
      await Bun.sleep(10);
    }
  }
}

/** Kill-to-grant over `rounds` SIGKILL takeovers at one lease. */
async function failover(pg: Postgres, leaseMs: number, rounds: number): Promise<{ grant: number[]; listening: number[] }> {
  const port = await freePort();
  const service = `bench-${leaseMs}-${process.pid}`;
  const extra = ["--service", service, "--coordinator-lease", `${leaseMs}ms`];
  let active = serve(pg, port, extra);
  await active.line("active: listening", 30_000);
  const grant: number[] = [];
  const listening: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      const standby = serve(pg, port, extra);
      watchArrivals(standby, "active: listening");
      if ((await standby.line("lockd started", 30_000)).role !== "standby") throw new Error("the new instance is not a standby");
      const holder = await WirePeer.connect(port);
      holder.acquire("k", 60_000);
      await holder.frame(0);
      const waiter = await WirePeer.connect(port);
      waiter.acquire("k", 60_000);
      if ((await waiter.frame(0)).type !== FrameType.WAITING) throw new Error("the waiter was not queued");
      const killedAt = performance.now();
      active.proc.kill("SIGKILL");
      await waiter.closed(10_000);
      // Reconnect every 10 ms until the new active answers the claim with ACQUIRED.
      let grantedAt = 0;
      while (grantedAt === 0) {
        const retry = await connectRetrying(port, 4 * leaseMs + 10_000);
        retry.acquire("k", 60_000);
        const frame = await retry.until(() => retry.frames[0] ?? (retry.isClosed ? ("closed" as const) : undefined), 10_000, "an answer");
        if (frame !== "closed" && frame.type === FrameType.ACQUIRED) grantedAt = frame.at;
        retry.end();
        if (grantedAt === 0) await Bun.sleep(10);
      }
      grant.push(grantedAt - killedAt);
      listening.push(await arrivalOf(standby, "active: listening") - killedAt);
      holder.terminate();
      await active.exited;
      await active[Symbol.asyncDispose]();
      active = standby;
      process.stdout.write(`  lease ${leaseMs} ms, round ${round + 1}/${rounds}: kill -> grant ${(grantedAt - killedAt).toFixed(0)} ms\n`);
    }
  } finally {
    await active[Symbol.asyncDispose]();
  }
  return { grant, listening };
}

/** When a log line arrived in this process (ChildServer keeps lines, not times: watch for it). */
const arrivals = new WeakMap<ChildServer, Map<string, number>>();
function watchArrivals(child: ChildServer, msg: string): void {
  const map = arrivals.get(child) ?? new Map<string, number>();
  arrivals.set(child, map);
  void child.line(msg, 600_000).then(() => map.set(msg, performance.now()), () => {});
}
async function arrivalOf(child: ChildServer, msg: string): Promise<number> {
  await child.line(msg, 10_000);
  return arrivals.get(child)?.get(msg) ?? performance.now();
}

// --- hot path ------------------------------------------------------------------------

interface Target {
  readonly name: string;
  readonly port: number;
}

let nameSerial = 0;

async function claimOnce(t: Target): Promise<number> {
  const started = performance.now();
  const peer = await WirePeer.connect(t.port);
  peer.acquire(`claim-${++nameSerial}`, 60_000);
  const frame = await peer.frame(0);
  const elapsed = frame.at - started;
  peer.end();
  await peer.closed();
  return elapsed;
}

async function handoverOnce(t: Target): Promise<number> {
  const name = `handover-${++nameSerial}`;
  const owner = await WirePeer.connect(t.port);
  owner.acquire(name, 60_000);
  await owner.frame(0);
  const waiter = await WirePeer.connect(t.port);
  waiter.acquire(name, 60_000);
  await waiter.frame(0);
  await Bun.sleep(2);
  const closedAt = performance.now();
  owner.end();
  const granted = await waiter.frame(1);
  const elapsed = granted.at - closedAt;
  waiter.end();
  await waiter.closed();
  return elapsed;
}

async function hotPath(pg: Postgres): Promise<string> {
  const [plainPort, haPort] = (await freePorts(2)) as [number, number];
  await using plain = serve(null, plainPort);
  await plain.line("lockd listening");
  await using ha = serve(pg, haPort, ["--service", `bench-hot-${process.pid}`, "--coordinator-lease", "4s"]);
  await ha.line("active: listening", 30_000);
  const targets: Target[] = [{ name: "plain", port: plainPort }, { name: "coordinator", port: haPort }];
  const rows: string[][] = [];
  for (const [label, once] of [["claim", claimOnce], ["handover", handoverOnce]] as const) {
    const samples = new Map<string, number[]>(targets.map((t) => [t.name, []]));
    for (let i = 0; i < 30; i++) for (const t of targets) await once(t); // warm-up
    for (let done = 0; done < SAMPLES; done += 10) {
      for (const t of targets) for (let i = 0; i < 10; i++) samples.get(t.name)!.push(await once(t));
    }
    const p = summarize(samples.get("plain")!);
    const h = summarize(samples.get("coordinator")!);
    rows.push([label, (p.p50 * 1000).toFixed(1), (h.p50 * 1000).toFixed(1), (h.p50 / p.p50).toFixed(3), (p.p99 * 1000).toFixed(1), (h.p99 * 1000).toFixed(1)]);
  }
  return table(["µs", "p50 plain", "p50 --coordinator", "ratio", "p99 plain", "p99 --coordinator"], rows);
}

// --- statements per second ------------------------------------------------------------

async function scans(pg: Postgres): Promise<number> {
  const sql = pg.client();
  try {
    await sql.unsafe("SELECT pg_stat_clear_snapshot()");
    const rows = (await sql.unsafe("SELECT coalesce(idx_scan, 0) + coalesce(seq_scan, 0) AS n FROM pg_stat_user_tables WHERE relname = 'lockd_coordinator'")) as { n: string }[];
    return Number(rows[0]?.n ?? 0);
  } finally {
    await sql.close();
  }
}

async function statements(pg: Postgres): Promise<string> {
  const port = await freePort();
  const extra = ["--service", `bench-stmt-${process.pid}`, "--coordinator-lease", "2s", "--token-block", "1000"];
  await using active = serve(pg, port, extra);
  await active.line("active: listening", 30_000);
  await using standby = serve(pg, port, extra);
  await standby.line("lockd started", 30_000);
  const windowMs = 10_000;
  await Bun.sleep(2000); // let statistics of the start settle (PostgreSQL flushes them about once a second)
  const idle0 = await scans(pg);
  await Bun.sleep(windowMs);
  const idle1 = await scans(pg);
  await Bun.sleep(1500);
  const load0 = await scans(pg);
  let grants = 0;
  const until = performance.now() + windowMs;
  const workers = Array.from({ length: 8 }, async () => {
    while (performance.now() < until) {
      await claimOnce({ name: "ha", port });
      grants++;
    }
  });
  await Promise.all(workers);
  await Bun.sleep(1500); // the last statistics flush
  const load1 = await scans(pg);
  const idleRate = (idle1 - idle0) / (windowMs / 1000);
  const loadRate = (load1 - load0) / ((windowMs + 1500) / 1000);
  return (
    table(
      ["", "statements/s", "grants", "renewals + reads (2/s + 2/s)", "token blocks (grants / 1000)", "expected/s"],
      [
        ["idle", idleRate.toFixed(2), "0", "4/s", "0", "4.00"],
        ["claim load", loadRate.toFixed(2), String(grants), "4/s", (grants / 1000).toFixed(1), (4 + grants / 1000 / ((windowMs + 1500) / 1000)).toFixed(2)],
      ],
    ) + "\n"
  );
}

// --- main ------------------------------------------------------------------------------------

const load = loadavg();
console.log(`failover bench: ${new Date().toISOString()}, load average ${load.map((x) => x.toFixed(2)).join(" ")}`);
await using pg = await Postgres.start();

if (ONLY.has("failover")) {
  const results: string[][] = [];
  for (const lease of [2000, 4000]) {
    const patched = await failover(pg, lease, ROUNDS);
    const g = summarize(patched.grant);
    const l = summarize(patched.listening);
    results.push([
      `${lease / 1000} s`,
      String(g.n),
      g.p50.toFixed(0),
      g.p99.toFixed(0),
      l.p50.toFixed(0),
      l.p99.toFixed(0),
      `${(lease + lease / 4).toFixed(0)}`,
    ]);
  }
  console.log("\nSIGKILL of the active -> first grant to a waiting client (ms)");
  console.log(table(["lease", "n", "p50 grant", "p99 grant", "p50 new active listening", "p99 listening", "lease + lease/4"], results));
}
if (ONLY.has("hotpath")) {
  console.log("\nHot path with and without --coordinator (µs, loopback, same run)");
  console.log(await hotPath(pg));
}
if (ONLY.has("statements")) {
  console.log("\nCoordinator statements (index and table scans of lockd_coordinator), one active + one standby, lease 2 s");
  console.log(await statements(pg));
}
console.log(`done; load average ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
