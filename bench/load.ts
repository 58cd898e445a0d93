/**
 * Load tool: N live lockd sessions from several client processes, all
 * heartbeating on the protocol's schedule, with churn and contention, for a
 * set duration. Reports sessions reached, heartbeats per second, the
 * server's CPU and RSS, its JS heap per session, handover latency under that
 * load, and the expiries the clients did not cause (which must be 0).
 *
 * lockd runs in a child process of its own (bench/lib/server-child.ts); the
 * sessions are spread over `--clients` processes (bench/load-client.ts) so
 * that no process needs more than 20,000 open files. Each client process
 * connects with Bun.connect from the default source (127.0.0.1) while that
 * source holds at most 12,000 of the sessions, and the later processes each
 * from a source address of their own, 127.0.0.2, .3, ... (`--sources
 * mixed`, the default). One source has 28,232 ephemeral ports, but past
 * about 14,000 connections to one destination Linux's connect() scans all
 * even ports first and each connect costs milliseconds of kernel time (see
 * load-client.ts); binding a source needs node:net, which costs the client
 * about twice Bun.connect's CPU per heartbeat, hence the mix. `--sources
 * spread` binds a source in every process; `--sources one` binds none.
 *
 * Usage:
 *   bun bench/load.ts --sessions 19000 --lease 1s --duration 60s
 *       [--clients 6] [--churn 100] [--contention 2] [--io-timeout 5s] [--sources mixed|spread|one]
 *
 * --churn is closes per second (each followed at once by a new claim on the
 * same lock, at the tail of its queue), across all clients; --contention is
 * sessions per lock (1: every session owns its own lock, no handovers).
 */
import { loadavg } from "node:os";
import { Child, coreShare, stopAll } from "./lib/spawn.ts";
import { pct, sorted, table } from "./lib/stats.ts";

const args = parseArgs(process.argv.slice(2));
const SESSIONS = Number(args.sessions ?? 19_000);
const LEASE_MS = duration(args.lease ?? "1s");
const DURATION_MS = duration(args.duration ?? "60s");
const CLIENTS = Number(args.clients ?? 6);
const CHURN = Number(args.churn ?? 100);
const CONTENTION = Number(args.contention ?? 2);
const IO_TIMEOUT_MS = duration(args["io-timeout"] ?? "5s");
const SOURCES = args.sources ?? "mixed";
if (!["mixed", "spread", "one"].includes(SOURCES)) throw new Error(`--sources must be mixed, spread or one`);
/** Sessions from the default source (Bun.connect) at most, in mixed mode: below the even-port cliff. */
const DEFAULT_SOURCE_LIMIT = 12_000;

interface ClientReport {
  counters: Record<string, number>;
  live: number;
  settled: number;
  maxSettled: number;
  handover: { n: number; p50: number; p99: number; samples: number[] };
  claim: { n: number; p50: number; p99: number };
  rtt: { p50: number; p99: number };
  timerLateMax: number;
}

function duration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text);
  if (match === null) throw new Error(`bad duration ${JSON.stringify(text)} (use 500ms, 1s, 2m)`);
  const n = Number(match[1]);
  return match[2] === "ms" ? n : match[2] === "m" ? n * 60_000 : n * 1000;
}

function parseArgs(argv: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i]!;
    if (key === "--") continue;
    if (!key.startsWith("--")) throw new Error(`unexpected argument ${key}`);
    out[key.slice(2)] = argv[++i] ?? "";
  }
  return out;
}

const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
const ms = (value: number) => `${value.toFixed(2)} ms`;

async function main(): Promise<void> {
  const here = (file: string) => new URL(file, import.meta.url).pathname;
  const server = new Child(here("lib/server-child.ts"), [String(IO_TIMEOUT_MS)], "lockd");
  const port = Number((await server.ready()).port);
  const idle = await server.stats(true);

  // Sessions per client, rounded to whole locks so a lock's queue lives in one process.
  const perClient = Math.ceil(SESSIONS / CLIENTS / CONTENTION) * CONTENTION;
  const clients: Child[] = [];
  let assigned = 0;
  let firstLock = 0;
  for (let i = 0; i < CLIENTS && assigned < SESSIONS; i++) {
    const count = Math.min(perClient, SESSIONS - assigned);
    clients.push(
      new Child(
        here("load-client.ts"),
        [String(port), String(count), String(firstLock), String(LEASE_MS), String(CONTENTION), String(CHURN / CLIENTS), sourceFor(i, assigned + count)],
        `load-client-${i}`,
      ),
    );
    assigned += count;
    firstLock += Math.ceil(count / CONTENTION);
  }
  const rampStart = performance.now();
  const readies = await Promise.all(clients.map((c) => c.ready()));
  const rampMs = performance.now() - rampStart;
  const reached = readies.reduce((sum, r) => sum + Number(r.settled), 0);
  console.log(`ramp: ${reached} of ${SESSIONS} sessions answered in ${(rampMs / 1000).toFixed(1)} s`);

  const loaded = await server.stats(true);
  const heapPerSession = (loaded.heap - idle.heap) / Number(loaded.extra.sessions);

  await Promise.all(clients.map((c) => c.request("start")));
  const s0 = await server.stats();
  const c0 = await Promise.all(clients.map((c) => c.stats()));
  const t0 = performance.now();
  let minLive = Infinity;
  // Watch the live count while the run goes on (cheap: one IPC round trip a second).
  while (performance.now() - t0 < DURATION_MS) {
    await Bun.sleep(Math.min(1000, DURATION_MS - (performance.now() - t0)));
    const s = await server.stats();
    minLive = Math.min(minLive, Number(s.extra.sessions));
  }
  const wall = performance.now() - t0;
  const s1 = await server.stats();
  const c1 = await Promise.all(clients.map((c) => c.stats()));
  const reports = await Promise.all(clients.map((c) => c.request<ClientReport>("report")));
  const after = await server.stats(true);

  const sum = (key: string) => reports.reduce((total, r) => total + (r.counters[key] ?? 0), 0);
  const handovers = sorted(reports.flatMap((r) => r.handover.samples));
  const clientCpu = c1.reduce((total, c, i) => total + c.cpuUs - c0[i]!.cpuUs, 0);
  const serverHeartbeats = Number(s1.extra.heartbeats) - Number(s0.extra.heartbeats);
  const serverExpired = Number(s1.extra.leaseExpired) - Number(s0.extra.leaseExpired);
  const rows: string[][] = [
    ["sessions reached (answered, all clients)", `${reached}`, `asked ${SESSIONS}; fewest live on the server during the run: ${minLive}`],
    ["sessions live on the server at the end", `${after.extra.sessions}`, `locks ${after.extra.locks}`],
    ["heartbeats/s (server count)", `${(serverHeartbeats / (wall / 1000)).toFixed(0)}`, `schedule: ${SESSIONS} x 4/lease = ${((SESSIONS * 4000) / LEASE_MS).toFixed(0)}/s before the RTT correction`],
    ["heartbeat RTT p50 / p99 (median over clients)", `${ms(median(reports.map((r) => r.rtt.p50)))} / ${ms(median(reports.map((r) => r.rtt.p99)))}`, ""],
    ["server CPU", coreShare(s1.cpuUs - s0.cpuUs, wall), `of one core; clients together ${coreShare(clientCpu, wall)}; the machine has 2 cores`],
    ["server RSS", mib(s1.rss), `idle ${mib(idle.rss)}`],
    ["server JS heap per session", `${heapPerSession.toFixed(0)} B`, `heap ${mib(idle.heap)} idle -> ${mib(loaded.heap)} at ${loaded.extra.sessions} sessions (after full GC)`],
    ["server JS heap after the run", mib(after.heap), ""],
    ["handover latency p50 / p99 (owner closed -> next waiter's ACQUIRED)", handovers.length > 0 ? `${ms(pct(handovers, 50))} / ${ms(pct(handovers, 99))}` : "-", `${sum("churned")} churn closes, ${reports.reduce((t, r) => t + r.handover.n, 0)} handovers timed`],
    ["claim latency p50 / p99 (connect -> answer)", `${ms(median(reports.map((r) => r.claim.p50)))} / ${ms(median(reports.map((r) => r.claim.p99)))}`, `${sum("claims")} claims`],
    ["EXPIRIES THE CLIENTS DID NOT CAUSE (must be 0)", `${sum("expiredNotCaused")}`, "LEASE_EXPIRED received less than a lease after the session's last send"],
    ["expiries after a whole lease of client silence", `${sum("expiredClientSilent")}`, `client-caused (stalled client); server's LEASE_EXPIRED count in the run: ${serverExpired}, including sessions the clients had already given up`],
    ["other ERRORs / closes without ERROR / connect failures", `${sum("otherErrors")} / ${sum("unexpectedCloses")} / ${sum("connectFailures")}`, "must be 0"],
    ["machine load average (1 min) at the end", loadavg()[0]!.toFixed(2), "2 cores; other engineers' test runs share them"],
    ["client event-loop delay, worst (its timer firing late)", ms(Math.max(...reports.map((r) => r.timerLateMax))), "a loaded client inflates every latency it measures"],
    ["lost confirmations (client gave up: pessimism rule)", `${sum("lostConfirmations")}`, "client-caused; non-zero means the machine could not keep the schedule"],
  ];
  console.log(
    `\nload: ${SESSIONS} sessions, lease ${LEASE_MS} ms, ${(wall / 1000).toFixed(0)} s, ${clients.length} client processes, churn ${CHURN}/s, contention ${CONTENTION}\n`,
  );
  console.log(table(["measure", "value", "beside it"], rows));

  // Memory returns when sessions leave: stop the clients and look again.
  await Promise.all(clients.map((c) => c.stop()));
  for (let waited = 0; waited < 10_000; waited += 100) {
    if (Number((await server.stats()).extra.sessions) === 0) break;
    await Bun.sleep(100);
  }
  const empty = await server.stats(true);
  console.log(`\nafter all clients left: ${empty.extra.sessions} sessions, JS heap ${mib(empty.heap)} (idle before: ${mib(idle.heap)}), RSS ${mib(empty.rss)}`);
  const failed = sum("expiredNotCaused") + sum("otherErrors") + sum("unexpectedCloses");
  if (failed > 0 || reached < SESSIONS) process.exitCode = 1;
}

/** Client i's source address ("" = Bun.connect from the default source), given the sessions assigned up to and including it. */
function sourceFor(i: number, assignedThrough: number): string {
  if (SOURCES === "one" || (SOURCES === "mixed" && assignedThrough <= DEFAULT_SOURCE_LIMIT)) return "";
  return `127.0.0.${2 + i}`;
}

function median(values: number[]): number {
  return pct(sorted(values), 50);
}

try {
  await main();
} finally {
  await stopAll();
}
