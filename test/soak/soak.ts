// Soak: a `lockd serve` child process and several client processes with
// thousands of sessions churning through contended locks, while the
// supervisor SIGKILLs a client process now and then (its holders vanish)
// and SIGSTOPs another for a few seconds (its sessions stop heartbeating,
// like a long GC pause). An external checker reads every grant and hold end
// the clients log and checks single ownership and token order; the
// supervisor samples the server's RSS and open fds and, once every client
// has gone, checks that the fds are back to where they started.
//
//   npm run soak -- [--minutes 3] [--sessions 2000] [--workers 4] [--locks N] [--fault-every 15] [--json FILE]
//
// Bounded: it stops itself after --minutes (plus at most 30 s to shut down)
// and kills every process it started, also on SIGINT/SIGTERM. Exit 0 when
// the checker saw no violation, RSS stayed flat and no fd leaked; 1 if not.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { Subprocess } from "bun";
import { ChildServer } from "../fixtures/ops-child.ts";
import { Checker, TOLERANCE_MS } from "./checker.ts";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "3" },
    sessions: { type: "string", default: "2000" },
    workers: { type: "string", default: "4" },
    locks: { type: "string" },
    "fault-every": { type: "string", default: "15" },
    json: { type: "string" },
  },
});
const MINUTES = Number(values.minutes);
const SESSIONS = Number(values.sessions);
const WORKERS = Number(values.workers);
const LOCKS = Number(values.locks ?? Math.max(1, Math.round(SESSIONS / 10)));
const FAULT_EVERY_MS = Number(values["fault-every"]) * 1000;
if (!(MINUTES > 0 && SESSIONS >= WORKERS && WORKERS >= 1 && LOCKS >= 1 && FAULT_EVERY_MS >= 1000)) {
  console.error("soak: need --minutes > 0, --workers >= 1, --sessions >= workers, --locks >= 1, --fault-every >= 1 (seconds)");
  process.exit(64);
}
const RUN_MS = MINUTES * 60_000;
const SAMPLE_MS = 5000;
const WARMUP_MS = Math.max(30_000, RUN_MS / 5);
/** RSS growth after warm-up that still counts as flat. */
const RSS_FLAT = 0.05;
const WORKER = `${import.meta.dir}/worker.ts`;

const epochNow = (): number => performance.timeOrigin + performance.now();
const log = (text: string): void => console.log(`[soak ${((performance.now() - startedAt) / 1000).toFixed(0).padStart(4)} s] ${text}`);

interface Worker {
  readonly tag: string;
  readonly proc: Subprocess<"ignore", "pipe", "inherit">;
  readonly done: Promise<void>;
  stopped: boolean;
  failures: Record<string, number>;
}

const checker = new Checker();
const workers = new Map<number, Worker>(); // slot -> the worker in it
const retired: Worker[] = [];
const counts = { grants: 0, ends: {} as Record<string, number>, kills: 0, stalls: 0 };
const failures: Record<string, number> = {};
const samples: { t: number; rssKiB: number; fds: number }[] = [];
let generation = 0;
const startedAt = performance.now();

function spawnWorker(slot: number, port: number): void {
  const tag = `w${slot}g${generation++}`;
  const sessions = Math.floor(SESSIONS / WORKERS) + (slot < SESSIONS % WORKERS ? 1 : 0);
  const proc = Bun.spawn([process.execPath, WORKER, String(port), String(sessions), String(LOCKS), tag], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
  const worker: Worker = { tag, proc, stopped: false, failures: {}, done: Promise.resolve() };
  (worker as { done: Promise<void> }).done = (async () => {
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of proc.stdout) {
      pending += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = JSON.parse(pending.slice(0, nl));
        pending = pending.slice(nl + 1);
        checker.line(line);
        if (line.k === "g") counts.grants++;
        else if (line.k === "e") counts.ends[line.w] = (counts.ends[line.w] ?? 0) + 1;
        else if (line.k === "c") for (const [code, n] of Object.entries(line.c as Record<string, number>)) failures[code] = (failures[code] ?? 0) + n;
      }
    }
    await proc.exited;
  })();
  workers.set(slot, worker);
}

function sample(pid: number): { rssKiB: number; fds: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  return { rssKiB, fds: readdirSync(`/proc/${pid}/fd`).length };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

const pick = <T>(items: T[]): T | undefined => items[Math.floor(Math.random() * items.length)];

const server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--io-timeout", "5s"]);
const timers: ReturnType<typeof setTimeout>[] = [];
let cleaning: Promise<void> | null = null;
async function cleanUp(): Promise<void> {
  for (const t of timers) clearTimeout(t);
  for (const w of [...workers.values(), ...retired]) {
    w.proc.kill("SIGCONT");
    w.proc.kill("SIGKILL");
  }
  await Promise.all([...workers.values(), ...retired].map((w) => w.proc.exited));
  await server[Symbol.asyncDispose]();
}
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    cleaning ??= cleanUp();
    void cleaning.then(() => process.exit(130));
  });
}

let exitCode = 1;
try {
  const { listenPort } = await server.addresses();
  const pid = server.proc.pid;
  const baseline = sample(pid);
  log(`server pid ${pid} on 127.0.0.1:${listenPort}; ${SESSIONS} sessions in ${WORKERS} processes over ${LOCKS} locks for ${MINUTES} min; baseline RSS ${baseline.rssKiB} KiB, ${baseline.fds} fds`);
  for (let slot = 0; slot < WORKERS; slot++) spawnWorker(slot, listenPort);

  // Faults: every --fault-every seconds kill one client process (and start a
  // fresh one in its place); halfway between, stop another for 1.5-5 s
  // (skipped while it would leave no process running).
  const kill = (): void => {
    const slot = pick([...workers.entries()].filter(([, w]) => !w.stopped).map(([s]) => s));
    if (slot !== undefined) {
      const victim = workers.get(slot)!;
      checker.killed(victim.tag, epochNow());
      victim.proc.kill("SIGKILL");
      retired.push(victim);
      counts.kills++;
      spawnWorker(slot, listenPort);
    }
    timers.push(setTimeout(kill, FAULT_EVERY_MS));
  };
  const stall = (): void => {
    // Never the last running process: the next kill must find one (a stopped one is left to its stall), so a run of
    // N fault periods has N kills and at least every other period's stall, whatever the draws.
    const running = [...workers.values()].filter((w) => !w.stopped);
    const victim = running.length > 1 || workers.size === 1 ? pick(running) : undefined;
    if (victim !== undefined) {
      const ms = 1500 + Math.random() * 3500;
      victim.stopped = true;
      victim.proc.kill("SIGSTOP");
      const stoppedAt = epochNow(); // after the signal: the process is stopped by now
      counts.stalls++;
      timers.push(setTimeout(() => {
        checker.stalled(victim.tag, stoppedAt, epochNow()); // before SIGCONT: still stopped then
        victim.proc.kill("SIGCONT");
        victim.stopped = false;
      }, ms));
    }
    timers.push(setTimeout(stall, FAULT_EVERY_MS));
  };
  timers.push(setTimeout(kill, FAULT_EVERY_MS), setTimeout(stall, FAULT_EVERY_MS / 2));

  while (performance.now() - startedAt < RUN_MS) {
    await Bun.sleep(Math.min(SAMPLE_MS, RUN_MS - (performance.now() - startedAt)));
    if (server.exitCode !== null) throw new Error(`the lockd server (pid ${pid}) exited with code ${server.exitCode} during the soak; its last log lines: ${JSON.stringify(server.lines.slice(-5))} ${server.raw.slice(-5).join("\n")}`);
    const s = sample(pid);
    samples.push({ t: performance.now() - startedAt, ...s });
    if (samples.length % 6 === 0) log(`RSS ${s.rssKiB} KiB, ${s.fds} fds, ${counts.grants} grants, ${counts.kills} kills, ${counts.stalls} stalls`);
  }

  // Stop: no more faults; resume anything stopped; ask every client to finish (they release), bounded.
  for (const t of timers) clearTimeout(t);
  for (const w of workers.values()) {
    w.proc.kill("SIGCONT");
    w.proc.kill("SIGTERM");
  }
  const finishing = Promise.all([...workers.values()].map((w) => w.done));
  const forced = await Promise.race([finishing.then(() => false), Bun.sleep(20_000).then(() => true)]);
  if (forced) for (const w of workers.values()) w.proc.kill("SIGKILL");
  await Promise.all([...workers.values(), ...retired].map((w) => w.done));

  // Every client is gone: the server's fds must come back to the baseline.
  const fdDeadline = performance.now() + 10_000;
  let after = sample(pid);
  while (after.fds > baseline.fds && performance.now() < fdDeadline) {
    await Bun.sleep(100);
    after = sample(pid);
  }

  const verdict = checker.verdict();
  const settled = samples.filter((s) => s.t >= WARMUP_MS);
  const third = Math.max(1, Math.floor(settled.length / 3));
  const rssEarly = median(settled.slice(0, third).map((s) => s.rssKiB));
  const rssLate = median(settled.slice(-third).map((s) => s.rssKiB));
  const rssGrowth = (rssLate - rssEarly) / rssEarly;
  const rssMax = Math.max(...settled.map((s) => s.rssKiB));
  const fdMax = Math.max(...samples.map((s) => s.fds));
  const minutes = (performance.now() - startedAt) / 60_000;
  const report = {
    minutes: Number(minutes.toFixed(2)),
    sessions: SESSIONS,
    workers: WORKERS,
    locks: LOCKS,
    grants: counts.grants,
    grantsPerSecond: Math.round(counts.grants / (minutes * 60)),
    holdEnds: counts.ends,
    failedClaims: failures,
    kills: counts.kills,
    stalls: counts.stalls,
    checker: verdict,
    toleranceMs: TOLERANCE_MS,
    rss: { baselineKiB: baseline.rssKiB, afterWarmupKiB: rssEarly, endKiB: rssLate, maxAfterWarmupKiB: rssMax, growth: Number((rssGrowth * 100).toFixed(2)) },
    fds: { baseline: baseline.fds, maxDuringRun: fdMax, afterClientsLeft: after.fds },
    samples,
  };
  if (values.json !== undefined) writeFileSync(values.json, JSON.stringify(report, null, 2));
  const violations = verdict.duplicateTokens + verdict.overlaps + verdict.tokenOrder + verdict.endedBeforeStart + verdict.unended;
  const flat = settled.length === 0 || Math.abs(rssGrowth) <= RSS_FLAT;
  const noLeak = after.fds <= baseline.fds;
  const { samples: _, ...summary } = report;
  console.log(JSON.stringify(summary, null, 2));
  log(`checker: ${verdict.holds} holds on ${verdict.locks} locks, ${violations} violations (${verdict.overlapsWithinTolerance} overlaps under ${TOLERANCE_MS} ms clock tolerance)`);
  const rssLine = settled.length === 0
    ? `RSS n/a (the run is shorter than the ${WARMUP_MS / 1000} s warm-up)`
    : `RSS after warm-up ${rssEarly} KiB -> ${rssLate} KiB (${(rssGrowth * 100).toFixed(2)} %), ${flat ? "flat" : "NOT FLAT"}`;
  log(`${rssLine}; fds ${baseline.fds} -> ${after.fds} after the clients left, ${noLeak ? "no leak" : "LEAK"}`);
  exitCode = violations === 0 && flat && noLeak ? 0 : 1;
  log(exitCode === 0 ? "PASS" : "FAIL");
} catch (error) {
  console.error("soak failed:", error);
} finally {
  cleaning ??= cleanUp();
  await cleaning;
}
process.exit(exitCode);
