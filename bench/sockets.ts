/**
 * Socket-level benchmarks: lockd against its floors, over loopback, in one run.
 *
 * lockd (bench/lib/server-child.ts), the bare relay (floor/relay.ts) and the
 * echo server (floor/echo.ts) each run in a child process of their own, so
 * server and floor are measured the same way; each reports its own CPU time.
 *
 * The latency benches (handover, claim) use their own sample loop rather than
 * mitata: each sample needs setup that must not be timed (two sessions, one
 * owning and one queued), an idle gap of a set length before the timed close
 * (20 ms lets the server's CPU go idle, as a real waiter's server would be;
 * 1 ms keeps it hot), and the floor and lockd interleaved in small blocks so
 * that the machine's drift (2x within an hour) hits both alike.
 *
 * Usage: bun bench/sockets.ts [--samples 300] [--seconds 3] [--only handover,claim,contended,heartbeat]
 */
import { loadavg } from "node:os";
import { encodeAcquire } from "../src/protocol/index.ts";
import { BENCH_ADMIN_TOKEN } from "./lib/admin-token.ts";
import { Peer, PeerState } from "./lib/peer.ts";
import { Child, coreShare, stopAll } from "./lib/spawn.ts";
import { ratio, summarize, table, us, type Summary } from "./lib/stats.ts";

const HOST = "127.0.0.1";
const args = parseArgs(process.argv.slice(2));
const SAMPLES = Number(args.samples ?? 300);
const SECONDS = Number(args.seconds ?? 3);
const ONLY = new Set((args.only ?? "handover,claim,contended,heartbeat").split(","));
const BLOCK = 10; // samples per side before switching between floor and lockd

interface Target {
  readonly name: string;
  readonly child: Child;
  readonly port: number;
  /** HTTP port for force-release: lockd's ops server, or the relay's bare endpoint. */
  readonly opsPort: number;
}

async function start(name: string, script: string): Promise<Target> {
  const child = new Child(new URL(script, import.meta.url).pathname, [], name);
  const info = await child.ready();
  return { name, child, port: Number(info.port), opsPort: Number(info.opsPort ?? 0) };
}

function acquireFrame(name: string): Uint8Array {
  return encodeAcquire({ name, leaseMs: 60_000, owner: "bench", try: false });
}

// --- handover ----------------------------------------------------------------

const CloseKind = { GRACEFUL: "graceful close (FIN)", RST: "RST (terminate)", SIGKILL: "SIGKILL of the owner's process" } as const;
type CloseKind = (typeof CloseKind)[keyof typeof CloseKind];

const HOLDER = new URL("../test/fixtures/holder.ts", import.meta.url).pathname;

/**
 * The owner in a process of its own (test/fixtures/holder.ts), killed with
 * SIGKILL: the kernel closes its socket. Timed from the kill() call, so the
 * figure includes the kernel's teardown of the process.
 */
async function killedHandoverOnce(target: Target, idleMs: number, name: string, frame: Uint8Array): Promise<number> {
  const holder = Bun.spawn([process.execPath, HOLDER, String(target.port), name], { stdout: "pipe", stderr: "inherit" });
  try {
    const reader = holder.stdout.getReader();
    let text = "";
    while (!text.includes("held")) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`${target.name}: holder exited before it held the lock`);
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    const waiter = await Peer.connect(HOST, target.port);
    const state = await waiter.acquire(frame);
    if (state !== PeerState.WAITING) throw new Error(`${target.name}: waiter got state ${state}, not WAITING`);
    await Bun.sleep(idleMs);
    const t0 = performance.now();
    holder.kill("SIGKILL");
    const t1 = await waiter.owner();
    waiter.socket!.end();
    await waiter.closed();
    if (t1 === 0) throw new Error(`${target.name}: waiter closed before it was granted`);
    return t1 - t0;
  } finally {
    holder.kill("SIGKILL");
    await holder.exited;
  }
}

/** Untimed setup of a handover: an owner of `name`, and a waiter queued behind it. */
async function ownerAndWaiter(target: Target, name: string): Promise<{ holder: Peer; waiter: Peer }> {
  const frame = acquireFrame(name);
  const holder = await Peer.connect(HOST, target.port);
  await holder.acquire(frame);
  await holder.owner();
  const waiter = await Peer.connect(HOST, target.port);
  const state = await waiter.acquire(frame);
  if (state !== PeerState.WAITING) throw new Error(`${target.name}: waiter got state ${state}, not WAITING`);
  return { holder, waiter };
}

/** One handover: owner and waiter set up, idle `idleMs`, then close the owner and time the waiter's ACQUIRED. */
async function handoverOnce(target: Target, kind: CloseKind, idleMs: number, name: string): Promise<number> {
  if (kind === CloseKind.SIGKILL) return killedHandoverOnce(target, idleMs, name, acquireFrame(name));
  const { holder, waiter } = await ownerAndWaiter(target, name);
  await Bun.sleep(idleMs);
  const t0 = performance.now();
  if (kind === CloseKind.GRACEFUL) holder.socket!.end();
  else holder.socket!.terminate();
  const t1 = await waiter.owner();
  waiter.socket!.end();
  await waiter.closed();
  if (t1 === 0) throw new Error(`${target.name}: waiter closed before it was granted`);
  return t1 - t0;
}

/**
 * Force-release handover: an operator ends the owner through the ops HTTP
 * admin endpoint (`POST /v1/locks/force-release?name=`, bearer token), and the
 * waiter's ACQUIRED is timed from the start of the request. lockd's side runs
 * the real OpsServer (routing, auth, JSON answer, engine.forceRelease); the
 * floor's side is the relay's own HTTP endpoint, which cuts the holder and
 * grants the next waiter: one loopback HTTP round trip plus an RST handover.
 */
async function forceReleaseOnce(target: Target, idleMs: number, name: string): Promise<number> {
  const { holder, waiter } = await ownerAndWaiter(target, name);
  await Bun.sleep(idleMs);
  const t0 = performance.now();
  const answer = fetch(`http://${HOST}:${target.opsPort}/v1/locks/force-release?name=${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { authorization: `Bearer ${BENCH_ADMIN_TOKEN}` },
  });
  const t1 = await waiter.owner();
  const response = await answer;
  if (!response.ok) throw new Error(`${target.name}: force-release answered ${response.status}: ${await response.text()}`);
  await response.arrayBuffer();
  await holder.closed();
  waiter.socket!.end();
  await waiter.closed();
  if (t1 === 0) throw new Error(`${target.name}: waiter closed before it was granted`);
  return t1 - t0;
}

async function handover(relay: Target, lockd: Target): Promise<string[][]> {
  const rows: string[][] = [];
  for (const idleMs of [20, 1]) {
    for (const kind of [CloseKind.GRACEFUL, CloseKind.RST, CloseKind.SIGKILL]) {
      const floor: number[] = [];
      const ours: number[] = [];
      let i = 0;
      // A process per SIGKILL sample: fewer of them.
      const samples = kind === CloseKind.SIGKILL ? Math.ceil(SAMPLES / 5) : SAMPLES;
      while (floor.length < samples) {
        for (let k = 0; k < BLOCK; k++) floor.push(await handoverOnce(relay, kind, idleMs, "h"));
        for (let k = 0; k < BLOCK; k++) ours.push(await handoverOnce(lockd, kind, idleMs, `h/${i++}`));
      }
      rows.push(latencyRow(`handover, ${kind}, idle ${idleMs} ms`, summarize(floor), summarize(ours)));
    }
  }
  for (const idleMs of [20, 1]) {
    const floor: number[] = [];
    const ours: number[] = [];
    let i = 0;
    while (floor.length < SAMPLES) {
      for (let k = 0; k < BLOCK; k++) floor.push(await forceReleaseOnce(relay, idleMs, "f"));
      for (let k = 0; k < BLOCK; k++) ours.push(await forceReleaseOnce(lockd, idleMs, `f/${i++}`));
    }
    rows.push(latencyRow(`handover, force-release, idle ${idleMs} ms`, summarize(floor), summarize(ours)));
  }
  return rows;
}

// --- claims --------------------------------------------------------------------

/** connect, ACQUIRE, ACQUIRED: the claim; then close and wait for the close event (not timed). */
async function claimOnce(target: Target, frame: Uint8Array): Promise<number> {
  const t0 = performance.now();
  const peer = await Peer.connect(HOST, target.port);
  await peer.acquire(frame);
  const t1 = await peer.owner();
  peer.socket!.end();
  await peer.closed();
  if (t1 === 0) throw new Error(`${target.name}: closed before granted`);
  return t1 - t0;
}

async function claims(relay: Target, lockd: Target): Promise<string[][]> {
  const floor: number[] = [];
  const ours: number[] = [];
  // A fresh name per claim so the lock is always free, whatever the order of closes.
  let i = 0;
  while (floor.length < SAMPLES * 2) {
    for (let k = 0; k < BLOCK; k++) floor.push(await claimOnce(relay, acquireFrame("c")));
    for (let k = 0; k < BLOCK; k++) ours.push(await claimOnce(lockd, acquireFrame(`c/${i++}`)));
  }
  return [latencyRow("claim on a free lock incl. connect", summarize(floor), summarize(ours))];
}

/** 8 clients cycling on one lock for `SECONDS`: grants per second, and CPU of the server side. */
async function contendedOnce(target: Target): Promise<{ rate: number; cpu: string }> {
  const frame = acquireFrame("contended");
  let grants = 0;
  let stop = false;
  const s0 = await target.child.stats();
  const t0 = performance.now();
  const client = async () => {
    while (!stop) {
      const peer = await Peer.connect(HOST, target.port);
      await peer.acquire(frame);
      if ((await peer.owner()) > 0) grants++;
      peer.socket!.end();
    }
  };
  const clients = Array.from({ length: 8 }, client);
  await Bun.sleep(SECONDS * 1000);
  stop = true;
  const elapsed = performance.now() - t0;
  await Promise.all(clients);
  const s1 = await target.child.stats();
  return { rate: grants / (elapsed / 1000), cpu: coreShare(s1.cpuUs - s0.cpuUs, elapsed) };
}

async function contended(relay: Target, lockd: Target): Promise<string[][]> {
  const rows: string[][] = [];
  for (let round = 1; round <= 2; round++) {
    const floor = await contendedOnce(relay);
    const ours = await contendedOnce(lockd);
    rows.push([
      `contended, 8 clients on one lock, round ${round}`,
      `${floor.rate.toFixed(0)}/s (cpu ${floor.cpu})`,
      `${ours.rate.toFixed(0)}/s (cpu ${ours.cpu})`,
      ratio(ours.rate, floor.rate),
    ]);
  }
  return rows;
}

// --- heartbeats ----------------------------------------------------------------

interface HbResult {
  frames: number;
  seconds: number;
  rttP50: number;
  rttP99: number;
  cpuUs: number;
  wallMs: number;
  closed: number;
}

async function heartbeatOnce(target: Target, sessions: number): Promise<HbResult & { serverCpu: number }> {
  const mode = target.name === "lockd" ? "lockd" : "echo";
  const driver = new Child(new URL("hb-driver.ts", import.meta.url).pathname, [String(target.port), String(sessions), mode], "hb-driver");
  try {
    await driver.ready();
    const s0 = await target.child.stats();
    const result = await driver.request<HbResult>("run", { warmupMs: 500, durationMs: SECONDS * 1000 });
    const s1 = await target.child.stats();
    if (result.closed > 0) throw new Error(`${target.name}: ${result.closed} heartbeat sessions were closed`);
    return { ...result, serverCpu: s1.cpuUs - s0.cpuUs };
  } finally {
    await driver.stop();
  }
}

async function heartbeats(echo: Target, lockd: Target): Promise<string[][]> {
  const rows: string[][] = [];
  for (const sessions of [1, 100, 1000]) {
    for (let round = 1; round <= 2; round++) {
      const floor = await heartbeatOnce(echo, sessions);
      const ours = await heartbeatOnce(lockd, sessions);
      const rate = (r: HbResult) => r.frames / r.seconds;
      const side = (r: HbResult & { serverCpu: number }) =>
        `${rate(r).toFixed(0)}/s rtt ${us(r.rttP50)}/${us(r.rttP99)} us, cpu srv ${coreShare(r.serverCpu, r.wallMs)} cli ${coreShare(r.cpuUs, r.wallMs)}`;
      rows.push([`heartbeats, ${sessions} sessions, round ${round}`, side(floor), side(ours), ratio(rate(ours), rate(floor))]);
    }
  }
  return rows;
}

// --- report --------------------------------------------------------------------

function latencyRow(name: string, floor: Summary, ours: Summary): string[] {
  return [name, us(floor.p50), us(floor.p99), us(ours.p50), us(ours.p99), ratio(ours.p50, floor.p50), ratio(ours.p99, floor.p99)];
}

function parseArgs(argv: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i]!;
    if (key.startsWith("--")) out[key.slice(2)] = argv[++i] ?? "";
  }
  return out;
}

async function main(): Promise<void> {
  const lockd = await start("lockd", "lib/server-child.ts");
  const relay = await start("relay", "floor/relay.ts");
  const echo = await start("echo", "floor/echo.ts");
  const latency: string[][] = [];
  if (ONLY.has("handover")) latency.push(...(await handover(relay, lockd)));
  if (ONLY.has("claim")) latency.push(...(await claims(relay, lockd)));
  if (latency.length > 0) {
    console.log(`\nLatency over loopback, microseconds (${SAMPLES} samples per side; floor = bare relay, bench/floor/relay.ts)\n`);
    console.log(table(["bench", "floor p50", "floor p99", "lockd p50", "lockd p99", "p50 ratio", "p99 ratio"], latency));
  }
  if (ONLY.has("contended")) {
    console.log(`\nContended claims, ${SECONDS} s per side (floor = bare relay)\n`);
    console.log(table(["bench", "floor", "lockd", "ratio"], await contended(relay, lockd)));
  }
  if (ONLY.has("heartbeat")) {
    console.log(`\nHeartbeat round trips, closed loop from a separate driver process, ${SECONDS} s per side (floor = bare echo, bench/floor/echo.ts)`);
    console.log("cpu = share of one core used by the server / by the driver process over the run; the machine has 2 cores\n");
    console.log(table(["bench", "floor: frames/s, rtt p50/p99", "lockd: frames/s, rtt p50/p99", "ratio"], await heartbeats(echo, lockd)));
  }
  console.log(`\nmachine load average (1 min) at the end: ${loadavg()[0]!.toFixed(2)} on 2 cores`);
  const extra = (await lockd.child.stats()).extra;
  console.log(`\nlockd after the run: ${JSON.stringify(extra)}`);
}

try {
  await main();
} finally {
  await stopAll();
}
