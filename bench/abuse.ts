/**
 * Abuse bench: what one misbehaving peer costs everyone else.
 *
 * For each attack (bench/lib/abuse-options.ts lists them; bench/abuse-attacker.ts
 * carries them out) a fresh `lockd serve` child starts on 127.0.0.1 (port 0),
 * and, each in its own process:
 *
 * - legit (bench/abuse-legit.ts): holders on the real client library, one
 *   per --leases entry, and a prober timing fresh ACQUIREs and GET /readyz
 *   at a steady rate, from source address 127.0.0.2;
 * - crowd (bench/abuse-crowd.ts, attacks d, e, i, m and n): thousands of
 *   idle sessions holding locks (in n: waiting for one lock), from 127.0.1.x;
 * - the attacker, from 127.0.0.1.
 * This process reads the server's /metrics from 127.0.0.3. The server runs
 * with bench/lib/loop-lag-preload.ts preloaded, which reports how late its
 * event loop ran (a 10 ms timer) and its CPU time every 250 ms on stderr.
 *
 * The prober runs --rest at rest (setup done, attacker connected but idle),
 * then during --duration of attack, then --after; the server's RSS is read
 * from /proc/PID/status before, during (peak of 4 samples a second) and
 * after. Every process is killed at the end of its attack, on error, and on
 * Ctrl-C/SIGTERM; the children also exit on their own when this process goes
 * or after a bounded lifetime. Only 127.0.0.1 is ever connected to.
 *
 * Output: progress on stderr; on stdout the machine's conditions and one
 * markdown table row per attack (ready to paste into docs/reliability.md).
 * Exit 1 when a legitimate holder lost its lock during an attack, 2 on
 * a usage or tool error.
 */
import { readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { ATTACKS, USAGE, UsageError, parseAbuseArgs, type AbuseOptions, type AttackId } from "./lib/abuse-options.ts";
import { LockdServe, stopAllServers } from "./lib/lockd-serve.ts";
import { httpGet } from "./lib/net-source.ts";
import { Child, stopAll } from "./lib/spawn.ts";
import type { Summary } from "./lib/stats.ts";

const here = (file: string) => new URL(file, import.meta.url).pathname;
const LEGIT_SOURCE = "127.0.0.2";
/** The bench's own /metrics reads. */
const BENCH_SOURCE = "127.0.0.3";
const err = (line: string) => process.stderr.write(`${line}\n`);

interface PhaseReport {
  acquire: Summary;
  acquireFailures: Record<string, number>;
  readyz: Summary;
  readyzFailures: Record<string, number>;
  skipped: number;
  losses: { lease: number; why: string; code: string; heldMs: number }[];
  /** How late the legit process's own event loop ran at worst (its own 20 ms timer). */
  maxLagMs: number;
}

interface AttackResult {
  id: AttackId;
  rest: PhaseReport;
  attack: PhaseReport;
  after: PhaseReport;
  setup: PhaseReport | undefined;
  rss: { before: number; peak: number; after: number };
  fds: { before: number; peak: number };
  /** Server CPU during the attack, as a share of one core. */
  cpu: number;
  attacker: { counters: Record<string, number>; open: number; wallMs: number };
  serverExit: number | null;
  crowd: string;
  /** The server's counters from the attack's start to the end of --after (its /metrics). */
  server: ServerCounters;
  /** Listen-queue overflows on this machine during the attack (all processes). */
  overflows: number;
  /** The server's worst event-loop lateness during the attack and --after, and its CPU in that 250 ms window. */
  serverLag: { maxLagMs: number; cpuMs: number } | null;
}

interface ServerCounters {
  leaseExpired: number;
  opened: number;
  granted: number;
  heartbeats: number;
  /** Sessions the server ended with PROTOCOL_ERROR (pipelining, in a, b, c, j). */
  protocolErrors: number;
  /** Ops connections refused at --ops-max-connections (0 from a server without the limit). */
  opsRefused: number;
}

const COUNTERS: Record<keyof ServerCounters, RegExp> = {
  leaseExpired: /^lockd_session_ends_total\{reason="lease_expired"\} (\d+)$/m,
  opened: /^lockd_sessions_opened_total (\d+)$/m,
  granted: /^lockd_acquisitions_total\{path="immediate"\} (\d+)$/m,
  heartbeats: /^lockd_heartbeats_total (\d+)$/m,
  protocolErrors: /^lockd_session_ends_total\{reason="protocol_error"\} (\d+)$/m,
  opsRefused: /^lockd_ops_connections_refused_total (\d+)$/m,
};
const NO_COUNTERS: ServerCounters = { leaseExpired: NaN, opened: NaN, granted: NaN, heartbeats: NaN, protocolErrors: NaN, opsRefused: NaN };

/**
 * The server's own counters, from /metrics; up to three tries of 10 s (after
 * attack d the server may still be answering the scrapes it had already
 * accepted). NaN for any it did not answer.
 */
async function serverCounters(opsPort: number): Promise<ServerCounters> {
  for (let attempt = 0; attempt < 3; attempt++) {
    // A fresh connection each time (none stays open in a pool during the attack), from a source of its own.
    const answer = await httpGet(BENCH_SOURCE, opsPort, "/metrics", 10_000, true);
    if (answer.status === 200 && answer.text !== undefined) {
      const text = answer.text;
      // A counter this server does not have (opsRefused before the ops limit existed) reads 0.
      const read = (key: keyof ServerCounters) => Number(COUNTERS[key].exec(text)?.[1] ?? (key === "opsRefused" ? 0 : Number.NaN));
      const counters = { ...NO_COUNTERS };
      for (const key of Object.keys(COUNTERS) as (keyof ServerCounters)[]) counters[key] = read(key);
      return counters;
    }
  }
  return { ...NO_COUNTERS };
}

/**
 * SYNs the kernel dropped because a listen queue was full (TcpExt
 * ListenOverflows in /proc/net/netstat): machine-wide, so other processes'
 * count too, but a flood of connects shows here. A client whose SYN is
 * dropped retries after 1 s (Linux's first SYN retransmission), which is
 * what a p99 of about 1000 ms during a connection flood is. NaN where
 * unreadable.
 */
function listenOverflows(): number {
  try {
    const lines = readFileSync("/proc/net/netstat", "utf8").split("\n");
    for (let i = 0; i + 1 < lines.length; i += 2) {
      if (!lines[i]!.startsWith("TcpExt:")) continue;
      const names = lines[i]!.split(/\s+/);
      const values = lines[i + 1]!.split(/\s+/);
      const at = names.indexOf("ListenOverflows");
      return at < 0 ? Number.NaN : Number(values[at]);
    }
  } catch {}
  return Number.NaN;
}

let cleaning: Promise<void> | null = null;
async function cleanUp(): Promise<void> {
  cleaning ??= Promise.all([stopAll(), stopAllServers()]).then(() => {});
  await cleaning;
}
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    err(`\n${signal}: stopping every process this bench started`);
    void cleanUp().then(() => process.exit(130));
  });
}

/** The attacker's `concurrency` argument: what each attack has many of. */
function concurrencyOf(id: AttackId, options: AbuseOptions): number {
  switch (id) {
    case "d":
      return options.scrapers;
    case "m":
      return options.stuck;
    case "e":
    case "i":
      return options.listers;
    case "j":
    case "l":
      return options.pipeliners;
    case "n":
      return options.viewers;
    case "o":
      return options.keepalive;
    case "p":
      return options.expirers;
    default:
      return options.churners;
  }
}

async function runAttack(id: AttackId, options: AbuseOptions): Promise<AttackResult> {
  const floods = id === "f" || id === "g" || id === "k";
  const lifetime = String(options.restMs + options.durationMs + options.afterMs + options.probeTimeoutMs + 180_000);
  const { server, port, opsPort, ignored } = await LockdServe.start({ args: options.serverArgs, ulimit: floods ? options.ulimit : 0, ulimitHard: floods ? options.ulimitHard : 0 });
  for (const flag of ignored) if (!ignoredOptions.includes(flag)) ignoredOptions.push(flag);
  // The children kill this server if the bench dies without doing so (bench/lib/orphan.ts).
  const guard = `${server.pid}:${server.dataDir}`;
  try {
    const legit = new Child(
      here("abuse-legit.ts"),
      [String(port), String(opsPort), LEGIT_SOURCE, options.leasesMs.join(","), String(options.probeRate), String(options.probeTimeoutMs), lifetime, guard],
      "legit",
    );
    await legit.ready();
    let crowd = "";
    let crowdPid = 0;
    const bigNames = id === "e" || id === "i" || id === "m";
    const queue = id === "n";
    if (id === "d" || bigNames || queue) {
      const count = id === "d" ? options.sessions : queue ? options.waiters + 1 : options.locks;
      const t0 = performance.now();
      const child = new Child(here("abuse-crowd.ts"), [String(port), String(count), queue ? "queue" : bigNames ? "512" : "24", String(options.perSource), lifetime, guard], "crowd");
      crowdPid = child.pid;
      const info = await child.ready();
      const what = queue ? `1 holder and ${Number(info.granted) - 1} waiters on one lock (256-byte owners)` : `${info.granted} sessions open${bigNames ? " (512-byte names)" : ""}`;
      crowd = `${what}${Number(info.failed) > 0 ? `, ${info.failed} refused` : ""}`;
      err(`  ${id}: crowd of ${info.granted} sessions in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    const attacker = new Child(
      here("abuse-attacker.ts"),
      [id, String(port), String(opsPort), lifetime, String(concurrencyOf(id, options)), String(options.flood), guard],
      `attacker-${id}`,
    );
    await attacker.ready();
    err(`  ${id}: pids server ${server.pid}, legit ${legit.pid}, attacker ${attacker.pid}${crowdPid > 0 ? `, crowd ${crowdPid}` : ""}`);

    await legit.request("phase", { name: "rest" });
    await Bun.sleep(options.restMs);
    const counters0 = await serverCounters(opsPort);
    const before = { rss: server.rss(), fds: server.fds() };
    const peak = { ...before };
    const sampler = setInterval(() => {
      peak.rss = Math.max(peak.rss, server.rss() || 0);
      peak.fds = Math.max(peak.fds, server.fds() || 0);
    }, 250);
    await legit.request("phase", { name: "attack" });
    const cpu0 = server.cpuSeconds();
    const overflows0 = listenOverflows();
    const lagFrom = server.lines.length;
    const t0 = performance.now();
    err(`  ${id}: attacking for ${options.durationMs / 1000} s`);
    let report: AttackResult["attacker"];
    try {
      report = await Promise.race([
        attacker.request<AttackResult["attacker"]>("run", { durationMs: options.durationMs }),
        Bun.sleep(options.durationMs + 30_000).then(() => ({ counters: { "attacker did not report": 1 }, open: 0, wallMs: NaN })),
      ]);
    } finally {
      clearInterval(sampler);
    }
    const cpu = (server.cpuSeconds() - cpu0) / ((performance.now() - t0) / 1000);
    const overflows = listenOverflows() - overflows0;
    await legit.request("phase", { name: "after" });
    await attacker.stop();
    await Bun.sleep(options.afterMs);
    await legit.request("settle", { ms: options.probeTimeoutMs + 2000 });
    const after = server.rss();
    const serverLag = server.loopLag(lagFrom);
    const counters1 = await serverCounters(opsPort);
    const delta = (key: keyof ServerCounters) => counters1[key] - counters0[key];
    const phases = (await legit.request<{ phases: Record<string, PhaseReport> }>("report")).phases;
    return {
      id,
      rest: phases.rest!,
      attack: phases.attack!,
      after: phases.after!,
      setup: phases.setup,
      rss: { before: before.rss, peak: peak.rss, after },
      fds: { before: before.fds, peak: peak.fds },
      cpu,
      attacker: report,
      serverExit: server.exitCode,
      crowd,
      overflows,
      serverLag,
      server: Object.fromEntries((Object.keys(COUNTERS) as (keyof ServerCounters)[]).map((key) => [key, delta(key)])) as unknown as ServerCounters,
    };
  } finally {
    await stopAll();
    await server.stop();
  }
}

// --- formatting ---------------------------------------------------------------------

const mib = (bytes: number) => (Number.isFinite(bytes) ? (bytes / 1024 / 1024).toFixed(0) : "?");
const size = (bytes: number) => (bytes >= 10 * 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(0)} MiB` : bytes >= 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(0)} KiB`);
const num = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "?");

function ms(value: number, timeoutMs: number): string {
  if (!Number.isFinite(value)) return "-";
  const text = value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
  return value >= timeoutMs ? `≥${text}` : text;
}

/** "rest → attack ms (ratio×)" */
function versus(rest: number, during: number, timeoutMs: number): string {
  const ratio = during / rest;
  const r = !Number.isFinite(ratio) ? "?" : ratio >= 100 ? ratio.toFixed(0) : ratio.toFixed(1);
  return `${ms(rest, timeoutMs)} → ${ms(during, timeoutMs)} ms (${r}×)`;
}

function failures(counts: Record<string, number>, skipped = 0): string {
  const parts = Object.entries(counts).map(([what, n]) => `${n} ${what}`);
  if (skipped > 0) parts.push(`${skipped} not sent`);
  return parts.length === 0 ? "0" : parts.join(", ");
}

/**
 * The percentiles are of the probes that were answered (and of timeouts, at
 * the timeout): when refusals were fast, say how few answers they stand on.
 */
function answeredOnly(attack: PhaseReport): string {
  const refused = (counts: Record<string, number>, summary: Summary) => Object.values(counts).reduce((a, b) => a + b, 0) > 0 && summary.n < 100;
  const parts: string[] = [];
  if (refused(attack.acquireFailures, attack.acquire)) parts.push(`ACQUIRE p50/p99 of ${attack.acquire.n} answered`);
  if (refused(attack.readyzFailures, attack.readyz)) parts.push(`/readyz p50/p99 of ${attack.readyz.n} answered`);
  return parts.length === 0 ? "" : ` (${parts.join("; ")})`;
}

function attackerView(result: AttackResult): string {
  const c = result.attacker.counters;
  const n = (key: string) => c[key] ?? 0;
  const errors = Object.entries(c)
    .filter(([k]) => k.startsWith("ERROR ") || k.startsWith("connect failed") || k.startsWith("HTTP ") || k === "attacker did not report")
    .map(([k, v]) => `${k.replace("ERROR ", "")} ${num(v)}`)
    .join(", ");
  const sent = `${size(n("bytes sent"))} of heartbeats sent`;
  const cut = n("connections cut");
  const meanCut = cut > 0 ? `${(n("ms until cut (sum)") / cut / 1000).toFixed(2)} s` : "";
  const seconds = result.attacker.wallMs / 1000;
  // The server's own counts over the same time (every client's, the attacker's by far the most).
  const heartbeats = `server answered ${num(result.server.heartbeats)} heartbeats`;
  const sessions = `server opened ${num(result.server.opened)} sessions, granted ${num(result.server.granted)}`;
  const protocolErrors = `server ended ${num(result.server.protocolErrors)} sessions with PROTOCOL_ERROR`;
  const opsRefused = result.server.opsRefused > 0 ? `; server refused ${num(result.server.opsRefused)} ops connections at its limit` : "";
  switch (result.id) {
    case "a":
      return `${sent}, ${num(n("replies"))} replies read; ${cut > 0 ? `cut after ${meanCut}` : "never cut"}${errors ? `; ${errors}` : ""}; ${heartbeats}; ${protocolErrors}`;
    case "b":
      // Not reading, the attacker sees the server's close only when a write fails: the server's count says when it cut.
      return `${sent}; ${cut > 0 ? `cut after ${meanCut}` : "the attacker saw no cut"}; ${heartbeats}; ${protocolErrors}`;
    case "c":
      return `${num(n("connects"))} connections, cut after ${meanCut || "-"} on average (as the attacker saw it); ${sent}; ${heartbeats}; ${protocolErrors}`;
    case "j":
      return `${num(n("connects"))} connections (${(n("connects") / seconds).toFixed(0)}/s), cut after ${meanCut || "-"} on average; ${sent}${errors ? `; ${errors}` : ""}; ${heartbeats}; ${protocolErrors}`;
    case "d":
    case "e":
      return `${num(n("answers"))} answers (${(n("answers") / seconds).toFixed(0)}/s), ${size(n("bytes read"))} read${errors ? `; ${errors}` : ""}${opsRefused}; ${result.crowd}`;
    case "i":
      return `${num(n("tables paged"))} whole tables paged (${num(n("answers"))} pages, ${(n("answers") / seconds).toFixed(0)}/s), ${size(n("bytes read"))} read${errors ? `; ${errors}` : ""}${opsRefused}; ${result.crowd}`;
    case "f":
    case "g":
    case "k":
      return `${num(n("most open at once"))} open at most, ${num(n("connects"))} opened, ${num(n("closed by the server"))} closed by the server${errors ? `; ${errors}` : ""}; server fds ${num(result.fds.before)} → ${num(result.fds.peak)}${result.id === "g" ? `; ${sessions}` : opsRefused}`;
    case "l":
      return `${num(n("connects"))} connections, ${num(n("answers"))} answers read (${(n("answers") / seconds).toFixed(0)}/s), ${size(n("bytes sent"))} of requests sent${errors ? `; ${errors}` : ""}`;
    case "m":
      return `${num(n("most open at once"))} connections left unread at most (${num(n("connects"))} opened, ${num(n("closed by the server"))} closed by the server); server fds ${num(result.fds.before)} → ${num(result.fds.peak)}${errors ? `; ${errors}` : ""}; ${result.crowd}`;
    case "h":
      return `${num(n("connects"))} connections (${(n("connects") / seconds).toFixed(0)}/s), each closed right after its ACQUIRE${errors ? `; ${errors}` : ""}; ${sessions}`;
    case "n":
      return `${num(n("answers"))} answers (${(n("answers") / seconds).toFixed(0)}/s), ${size(n("bytes read"))} read, ${num(n("connects"))} connections, ${num(n("closed by the server"))} closed by the server${errors ? `; ${errors}` : ""}; ${result.crowd}`;
    case "o":
      return `${num(n("most open at once"))} kept open at most (${num(n("connects"))} opened, ${num(n("closed by the server"))} closed by the server), ${num(n("answers"))} answers${errors ? `; ${errors}` : ""}`;
    case "p": {
      const first = c["first LEASE_EXPIRED after the end (ms)"];
      const last = c["last LEASE_EXPIRED after the end (ms)"];
      const spread = first === undefined || last === undefined ? "no LEASE_EXPIRED read" : `read ${first} to ${last} ms after the leases' common end`;
      const others = errors.split(", ").filter((e) => e !== "" && !e.startsWith("LEASE_EXPIRED ")).join(", ");
      return `${num(n("sessions opened"))} sessions opened by ${(n("opened by (ms into the attack)") / 1000).toFixed(1)} s, their leases all ending ${(n("leases end at (ms into the attack)") / 1000).toFixed(1)} s into the attack; LEASE_EXPIRED ${num(n("ERROR LEASE_EXPIRED"))} (${spread})${others ? `; ${others}` : ""}; ${sessions}`;
    }
  }
}

/** Holds the legitimate holders lost during the attack or --after, and the cell that says so. */
function losses(result: AttackResult): { lost: number; text: string } {
  const all = [...result.attack.losses, ...result.after.losses];
  const held = all.filter((l) => l.why !== "claim failed");
  const reclaims = all.length - held.length;
  const byLease = new Map<string, number>();
  for (const l of held) {
    const key = `${l.lease / 1000} s lease ${l.code || l.why}`;
    byLease.set(key, (byLease.get(key) ?? 0) + 1);
  }
  const detail = [...byLease].map(([k, v]) => `${v}× ${k}`);
  if (reclaims > 0) detail.push(`then ${reclaims} re-claims failed`);
  // In p the attacker's own sessions expire: the ones it was told of are not the holders'.
  const expired = result.server.leaseExpired - (result.id === "p" ? (result.attacker.counters["ERROR LEASE_EXPIRED"] ?? 0) : 0);
  if (expired !== 0) detail.push(`server sent LEASE_EXPIRED ${Number.isNaN(expired) ? "? times (no /metrics)" : `${expired}×`}${result.id === "p" ? " besides the attacker's" : ""}`);
  // Anything here fails the run: a lost hold, a failed re-claim, or an expiry the server counted.
  return { lost: held.length + reclaims + (expired > 0 ? expired : 0), text: detail.length === 0 ? "0" : `**${held.length}** (${detail.join("; ")})` };
}

function row(result: AttackResult, options: AbuseOptions): string {
  const t = options.probeTimeoutMs;
  const { rest, attack } = result;
  const cells = [
    `${result.id}: ${ATTACKS[result.id]}`,
    losses(result).text,
    versus(rest.acquire.p50, attack.acquire.p50, t),
    versus(rest.acquire.p99, attack.acquire.p99, t),
    versus(rest.readyz.p50, attack.readyz.p50, t),
    versus(rest.readyz.p99, attack.readyz.p99, t),
    `${failures(attack.acquireFailures, attack.skipped)} / ${failures(attack.readyzFailures)}${answeredOnly(attack)}`,
    Number.isFinite(result.cpu) ? `${(result.cpu * 100).toFixed(0)} %` : "?",
    `${mib(result.rss.before)} → ${mib(result.rss.peak)} → ${mib(result.rss.after)}`,
    attackerView(result) +
      (result.serverLag === null ? "" : `; server's loop late by up to ${result.serverLag.maxLagMs} ms (its CPU in that 250 ms: ${result.serverLag.cpuMs} ms)`) +
      `; the holders' and prober's own loop late by up to ${Math.round(Math.max(result.attack.maxLagMs, result.after.maxLagMs))} ms` + (result.overflows > 0 ? `; listen-queue overflows on the machine: ${num(result.overflows)}` : "") + (result.serverExit !== null ? `; **server exited (${result.serverExit})**` : ""),
  ];
  return `| ${cells.map((c) => c.replace(/\|/g, "\\|")).join(" | ")} |`;
}

const HEAD = [
  "attack",
  "legit holds lost (must be 0)",
  "fresh ACQUIRE p50: rest → attack",
  "fresh ACQUIRE p99",
  "/readyz p50",
  "/readyz p99",
  "probe failures (ACQUIRE / readyz)",
  "server CPU (of one core)",
  "server RSS MiB: before → peak → after",
  "attacker's view",
];

const ignoredOptions: string[] = [];

async function main(): Promise<number> {
  let options: AbuseOptions | null;
  try {
    options = parseAbuseArgs(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    err(`bench:abuse: ${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (options === null) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const load0 = loadavg();
  const started = new Date();
  err(`bench:abuse: attacks ${options.only.join(",")}, ${options.durationMs / 1000} s each after ${options.restMs / 1000} s at rest`);
  const results: AttackResult[] = [];
  const rows: string[] = [];
  let failed = 0;
  for (const id of options.only) {
    err(`attack ${id}: ${ATTACKS[id]}`);
    let result: AttackResult;
    try {
      result = await runAttack(id, options);
    } catch (error) {
      // One attack that cannot run (its setup failed) does not stop the others; its row says why.
      if (cleaning !== null) throw error;
      const message = (error as Error).message.split("\n")[0]!.slice(0, 300);
      err(`  ${id}: FAILED: ${(error as Error).stack ?? error}`);
      failed++;
      rows.push(`| ${id}: ${ATTACKS[id]} | **the bench could not run this attack**: ${message.replace(/\|/g, "\\|")} |${" |".repeat(HEAD.length - 2)}`);
      continue;
    }
    results.push(result);
    rows.push(row(result, options));
    err(rows.at(-1)!);
  }
  const load1 = loadavg();

  const out: string[] = [];
  out.push(
    `Machine: ${availableParallelism()} cores (server, attacker, prober and crowd share them); load average ${load0.map((l) => l.toFixed(2)).join(", ")} at the start, ${load1.map((l) => l.toFixed(2)).join(", ")} at the end; Bun ${Bun.version}; ${started.toISOString().slice(0, 16)}Z.`,
  );
  const limit = options.ulimit === 0 ? "inherited" : options.ulimitHard === 0 ? String(options.ulimit) : `soft ${options.ulimit}, hard ${options.ulimitHard}`;
  out.push(
    `Run: \`npm run bench:abuse${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}\`; each attack ${options.durationMs / 1000} s against ${options.restMs / 1000} s at rest on the same server; holders with leases ${options.leasesMs.map((l) => `${l / 1000} s`).join(", ")}; ${options.probeRate} probes/s, timeout ${options.probeTimeoutMs / 1000} s; server open-file limit ${limit} in f, g and k.`,
  );
  out.push(`Server options: ${options.serverArgs.length === 0 ? "defaults" : `\`${options.serverArgs.join(" ")}\``}${ignoredOptions.length > 0 ? `; NOT KNOWN to this server, so run without: ${ignoredOptions.join(", ")}` : ""}.`);
  const setupLosses = results.flatMap((r) => [...(r.setup?.losses ?? []), ...r.rest.losses].map((l) => `${r.id}: ${l.lease / 1000} s lease ${l.code || l.why}`));
  if (setupLosses.length > 0) out.push(`Losses before an attack began (setup or rest; not in the table): ${setupLosses.join("; ")}.`);
  out.push("");
  out.push(`| ${HEAD.join(" | ")} |`);
  out.push(`|${HEAD.map(() => "---").join("|")}|`);
  out.push(...rows);
  process.stdout.write(`\n${out.join("\n")}\n`);
  if (failed > 0) return 2;
  return results.some((r) => losses(r).lost > 0) ? 1 : 0;
}

let code = 2;
try {
  code = await main();
} catch (error) {
  // After a signal, the requests to the killed children fail: that is not news.
  if (cleaning === null) err(`bench:abuse: ${(error as Error).stack ?? error}`);
  code = 2;
} finally {
  await cleanUp();
}
process.exit(code);
