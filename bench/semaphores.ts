/**
 * bench/semaphores.ts (`npm run bench:semaphores`): what semaphores and shared
 * claims cost, and that the exclusive path did not get slower, over loopback
 * in one run. Set up as bench/sockets.ts is (see its header): every server is
 * a child process of its own (bench/lib/server-child.ts, or the bare relay
 * bench/floor/relay.ts), the client side is bench/lib/peer.ts for all, each
 * sample's setup is untimed, an idle gap (20 ms: the server's CPU goes idle;
 * 1 ms: hot) comes before the timed close, and the sides alternate in blocks
 * of 10 samples (the first side of each round rotating) so the machine's
 * drift hits all of them alike.
 *
 * 1. exclusive: handover (FIN, RST) and claim p50 of this build against the
 *    build given by `--baseline DIR` (another lockd tree: its own
 *    bench/lib/server-child.ts, so its own src/) and against the bare relay.
 *    The bytes on the wire are the same for both builds (an exclusive claim
 *    carries no LIMIT option). Every side gets fresh processes every
 *    --epoch samples (default 100), started in a rotating order and warmed
 *    up by 500 untimed claims and handovers (no idle gap); with a
 *    baseline, a second process of this build runs as a fourth side, so the
 *    run shows its own noise (this/this again) beside this/baseline.
 * 1b. engine: the same exclusive claim and handover in the engine alone
 *    (src/core of each tree, loaded side by side into this process; virtual
 *    clock, output dropped), in batches the trees take in turn: the code
 *    that changed, without the loopback's noise; and this build's semaphore
 *    handover and shared batches the same way (each close must grant within
 *    the call: one loop turn of the server).
 * 2. semaphore: a name with limit N (--limit, default 4) has N holders and
 *    one waiter; one holder closes (FIN) and the waiter's ACQUIRED is timed,
 *    against an exclusive handover on the same server, interleaved.
 * 3. shared: an exclusive holder and k shared waiters (k from --batches,
 *    default 1,10,100); the holder closes (FIN), and the time to the first
 *    and to the last waiter's ACQUIRED is taken; an exclusive handover on the
 *    same server is interleaved as the reference.
 * 4. memory: bench/core-scale.ts of this tree and of the baseline tree, run
 *    in turn (A B B A ...), the JS heap per session of each, and the ratio.
 *
 * Setup checks the semantics it relies on (N holders at once and the next
 * one WAITING; every shared waiter of a batch granted), so a server that
 * treated the claims as exclusive would fail the run, not report a figure.
 *
 * Usage: bun bench/semaphores.ts [--baseline DIR] [--samples 300] [--epoch 100] [--batch-samples 100]
 *   [--limit 4] [--batches 1,10,100] [--rounds 2] [--core-sessions 1000000]
 *   [--only exclusive,engine,semaphore,shared,memory]
 */
import type { Subprocess } from "bun";
import { existsSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { encodeAcquire, MAX_LIMIT } from "../src/protocol/index.ts";
import { Peer, PeerState } from "./lib/peer.ts";
import { Child, stopAll } from "./lib/spawn.ts";
import { ratio, summarize, table, us, type Summary } from "./lib/stats.ts";

const HOST = "127.0.0.1";
const BLOCK = 10; // samples per side before switching
const WARMUP = 500; // untimed claims and handovers per side on fresh processes
const SECTIONS = ["exclusive", "engine", "semaphore", "shared", "memory"] as const;
type Section = (typeof SECTIONS)[number];

export interface BenchArgs {
  /** Another lockd tree (the build before the change), or null: no baseline. */
  baseline: string | null;
  samples: number;
  /** Samples per side before the exclusive comparison starts fresh processes. */
  epoch: number;
  batchSamples: number;
  limit: number;
  batches: number[];
  rounds: number;
  coreSessions: number;
  only: Set<Section>;
}

const USAGE =
  "use --baseline DIR, --samples N, --epoch N, --batch-samples N, --limit N, --batches K,K,..., --rounds N, --core-sessions N, --only exclusive,engine,semaphore,shared,memory";

function wholeNumber(flag: string, raw: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(raw);
  if (raw === undefined || raw === "" || !Number.isInteger(n) || n < min || n > max) {
    throw new Error(`${flag} needs a whole number ${min}..${max}, got ${raw === undefined || raw === "" ? "nothing" : raw}`);
  }
  return n;
}

export function parseArgs(argv: readonly string[]): BenchArgs {
  const args: BenchArgs = {
    baseline: null,
    samples: 300,
    epoch: 100,
    batchSamples: 100,
    limit: 4,
    batches: [1, 10, 100],
    rounds: 2,
    coreSessions: 1_000_000,
    only: new Set(SECTIONS),
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = argv[++i];
    switch (flag) {
      case "--baseline":
        if (value === undefined || value === "") throw new Error("--baseline needs a directory (another lockd tree)");
        args.baseline = resolve(value);
        break;
      case "--samples":
        args.samples = wholeNumber(flag, value, BLOCK);
        break;
      case "--epoch":
        args.epoch = wholeNumber(flag, value, BLOCK);
        break;
      case "--batch-samples":
        args.batchSamples = wholeNumber(flag, value, BLOCK);
        break;
      case "--limit":
        args.limit = wholeNumber(flag, value, 2, MAX_LIMIT);
        break;
      case "--batches":
        args.batches = (value ?? "").split(",").map((k) => wholeNumber(flag, k, 1, 1000));
        break;
      case "--rounds":
        args.rounds = wholeNumber(flag, value, 1);
        break;
      case "--core-sessions":
        args.coreSessions = wholeNumber(flag, value, 1000);
        break;
      case "--only": {
        const names = (value ?? "").split(",");
        for (const name of names) {
          if (!(SECTIONS as readonly string[]).includes(name)) throw new Error(`--only: unknown section "${name}" (${SECTIONS.join(", ")})`);
        }
        args.only = new Set(names as Section[]);
        break;
      }
      default:
        throw new Error(`unknown option ${flag} (${USAGE})`);
    }
  }
  return args;
}

interface Target {
  readonly name: string;
  readonly child: Child;
  readonly port: number;
}

async function start(name: string, script: string): Promise<Target> {
  const child = new Child(script, [], name);
  const info = await child.ready();
  return { name, child, port: Number(info.port) };
}

const LEASE_MS = 60_000;

function exclusiveFrame(name: string): Uint8Array {
  return encodeAcquire({ name, leaseMs: LEASE_MS, owner: "bench", try: false });
}

function load(): string {
  return loadavg()
    .map((x) => x.toFixed(2))
    .join(" / ");
}

/**
 * `samples` samples of each side, in blocks of BLOCK, the first side of each
 * round rotating, so that no side always runs right after another.
 */
async function interleave<T>(sides: readonly (() => Promise<T>)[], samples: number): Promise<T[][]> {
  const out: T[][] = sides.map(() => []);
  for (let round = 0; out[0]!.length < samples; round++) {
    for (let j = 0; j < sides.length; j++) {
      const side = (round + j) % sides.length;
      for (let k = 0; k < BLOCK; k++) out[side]!.push(await sides[side]!());
    }
  }
  return out;
}

async function claimant(target: Target, frame: Uint8Array, expect: PeerState): Promise<Peer> {
  const peer = await Peer.connect(HOST, target.port);
  const state = await peer.acquire(frame);
  if (state !== expect) throw new Error(`${target.name}: a claim got state ${state}, expected ${expect} (error code ${peer.errorCode})`);
  return peer;
}

async function closeAll(peers: readonly Peer[]): Promise<void> {
  for (const peer of peers) peer.socket!.end();
  for (const peer of peers) await peer.closed();
}

// --- 1. the exclusive path -----------------------------------------------------

type Close = "FIN" | "RST";

/** Owner and queued waiter set up (untimed), idle, close the owner, time the waiter's ACQUIRED. */
async function exclusiveHandover(target: Target, close: Close, idleMs: number, name: string): Promise<number> {
  const frame = exclusiveFrame(name);
  const holder = await claimant(target, frame, PeerState.OWNER);
  const waiter = await claimant(target, frame, PeerState.WAITING);
  await Bun.sleep(idleMs);
  const t0 = performance.now();
  if (close === "FIN") holder.socket!.end();
  else holder.socket!.terminate();
  const t1 = await waiter.owner();
  if (t1 === 0) throw new Error(`${target.name}: waiter closed before it was granted (error code ${waiter.errorCode})`);
  await closeAll([waiter]);
  await holder.closed();
  return t1 - t0;
}

/** connect + ACQUIRE + ACQUIRED on a free lock; the close is untimed. */
async function claimOnce(target: Target, frame: Uint8Array): Promise<number> {
  const t0 = performance.now();
  const peer = await Peer.connect(HOST, target.port);
  await peer.acquire(frame);
  const t1 = await peer.owner();
  if (t1 === 0) throw new Error(`${target.name}: closed before granted (error code ${peer.errorCode})`);
  await closeAll([peer]);
  return t1 - t0;
}

/** A server of the exclusive comparison: started afresh for every epoch (see `exclusive`). */
interface Side {
  readonly label: string;
  readonly script: string;
  /** The relay has one lock: every sample uses the same name there. */
  readonly relay: boolean;
}

interface Row {
  readonly bench: string;
  /** p50 and p99 per side, in the order of the sides. */
  readonly summaries: readonly Summary[];
}

/** What an epoch's lockd children must report after it: no session ended by anything but its peer. */
async function checkClean(target: Target): Promise<void> {
  const extra = (await target.child.stats()).extra as Record<string, number>;
  for (const key of ["leaseExpired", "ioTimeout", "protocolError", "overloaded"]) {
    if ((extra[key] ?? 0) !== 0) throw new Error(`${target.name}: ${extra[key]} sessions ended by ${key}: ${JSON.stringify(extra)}`);
  }
}

/**
 * Each figure is taken in epochs of `args.epoch` samples per side; every
 * epoch starts a fresh process for every side, in a rotating order, so that
 * no build keeps a lucky (or unlucky) process, core or start position for
 * the whole run: on this machine that, not the code, decides a few per cent.
 */
async function exclusive(args: BenchArgs, sides: readonly Side[]): Promise<Row[]> {
  const rows: Row[] = [];
  let seq = 0;
  let epochs = 0;
  const measure = async (bench: string, sample: (target: Target, name: string) => Promise<number>, samples: number) => {
    const got: number[][] = sides.map(() => []);
    while (got[0]!.length < samples) {
      const targets: Target[] = new Array(sides.length);
      for (let j = 0; j < sides.length; j++) {
        const i = (epochs + j) % sides.length;
        targets[i] = await start(sides[i]!.label, sides[i]!.script);
      }
      epochs++;
      // A fresh process runs cold (the JIT tiers up after thousands of calls): untimed claims and handovers first.
      for (let i = 0; i < sides.length; i++) {
        for (let k = 0; k < WARMUP; k++) {
          const name = sides[i]!.relay ? "x" : `w/${seq++}`;
          await claimOnce(targets[i]!, exclusiveFrame(name));
          await exclusiveHandover(targets[i]!, k % 2 === 0 ? "FIN" : "RST", 0, name);
        }
      }
      const n = Math.min(args.epoch, samples - got[0]!.length);
      const part = await interleave(
        sides.map((side, i) => () => sample(targets[i]!, side.relay ? "x" : `x/${seq++}`)),
        n,
      );
      for (let i = 0; i < sides.length; i++) got[i]!.push(...part[i]!);
      for (let i = 0; i < sides.length; i++) {
        if (!sides[i]!.relay) await checkClean(targets[i]!);
        await targets[i]!.child.stop();
      }
    }
    rows.push({ bench, summaries: got.map((xs) => summarize(xs)) });
  };
  for (const idleMs of [20, 1]) {
    for (const close of ["FIN", "RST"] as const) {
      await measure(`handover, ${close}, idle ${idleMs} ms`, (target, name) => exclusiveHandover(target, close, idleMs, name), args.samples);
    }
  }
  await measure("claim on a free lock incl. connect", (target, name) => claimOnce(target, exclusiveFrame(name)), args.samples * 2);
  return rows;
}

/** Sides: this build, the relay, then (with a baseline) the baseline and this build's second process, the control. */
function exclusiveTable(rows: readonly Row[], sides: readonly Side[]): string {
  const withBase = sides.length > 2;
  const head = ["bench", "this p50", "this p99", "relay p50"];
  if (withBase) head.push("baseline p50", "baseline p99", "this again p50");
  head.push("this/relay");
  if (withBase) head.push("baseline/relay", "this/baseline", "this/this again");
  return table(
    head,
    rows.map((r) => {
      const [ours, relay, base, again] = r.summaries;
      const cells = [r.bench, us(ours!.p50), us(ours!.p99), us(relay!.p50)];
      if (withBase) cells.push(us(base!.p50), us(base!.p99), us(again!.p50));
      cells.push(ratio(ours!.p50, relay!.p50));
      if (withBase) cells.push(ratio(base!.p50, relay!.p50), ratio(ours!.p50, base!.p50), ratio(ours!.p50, again!.p50));
      return cells;
    }),
  );
}

// --- 1b. the same paths in the engine alone (src/core of each tree, one process) ---

/** What this bench needs of a tree's src/core and src/protocol, loaded from that tree. */
interface CoreModule {
  Engine: new (out: { send(conn: number, frame: Uint8Array): void; close(conn: number): void }, options: { ioTimeoutMs: number }, now: number) => CoreEngine;
  encodeAcquire(request: { name: string; leaseMs: number; owner: string; try: boolean; limit?: number; shared?: boolean }): Uint8Array;
  ACQUIRE: number;
  OWNER: number;
}

interface CoreSession {
  readonly state: number;
}

interface CoreEngine {
  open(conn: number, now: number): CoreSession | null;
  frame(session: CoreSession, type: number, bytes: Uint8Array, offset: number, length: number, now: number): boolean;
  closed(session: CoreSession, now: number): void;
}

async function loadCore(tree: string): Promise<CoreModule> {
  const core = await import(join(tree, "src/core/index.ts"));
  const protocol = await import(join(tree, "src/protocol/index.ts"));
  return { Engine: core.Engine, encodeAcquire: protocol.encodeAcquire, ACQUIRE: protocol.FrameType.ACQUIRE, OWNER: core.SessionState.OWNER };
}

const DROP = { send(): void {}, close(): void {} };
const ENGINE_BATCH = 500; // operations timed together (performance.now() is too coarse for one)

/** One engine per tree, and the operations timed on it; every figure is ns per operation over ENGINE_BATCH. */
class CoreBench {
  private readonly engine: CoreEngine;
  private conn = 0;
  private seq = 0;
  private readonly holders: CoreSession[] = new Array(ENGINE_BATCH);
  private readonly waiters: CoreSession[] = new Array(ENGINE_BATCH);
  private readonly extra: CoreSession[] = [];

  constructor(
    readonly label: string,
    private readonly core: CoreModule,
  ) {
    this.engine = new core.Engine(DROP, { ioTimeoutMs: 1e9 }, 0);
  }

  private claim(frame: Uint8Array): CoreSession {
    const session = this.engine.open(this.conn++, 0)!;
    this.engine.frame(session, this.core.ACQUIRE, frame, 4, frame.length - 4, 0);
    return session;
  }

  private frameOf(name: string, limit = 1, shared = false): Uint8Array {
    return this.core.encodeAcquire({ name, leaseMs: LEASE_MS, owner: "bench", try: false, ...(limit > 1 ? { limit } : {}), ...(shared ? { shared } : {}) });
  }

  /** open + ACQUIRE of a free lock, granted at once (the frames are made before the timing). */
  claims(): number {
    const frames = Array.from({ length: ENGINE_BATCH }, () => this.frameOf(`c/${this.seq++}`));
    const t0 = performance.now();
    for (let i = 0; i < ENGINE_BATCH; i++) this.holders[i] = this.claim(frames[i]!);
    const ns = ((performance.now() - t0) / ENGINE_BATCH) * 1e6;
    for (let i = 0; i < ENGINE_BATCH; i++) this.engine.closed(this.holders[i]!, 0);
    return ns;
  }

  /**
   * The holder's close with `others` more holders of a limit-(others + 1)
   * name (0: an exclusive lock) and one waiter: the close, the waiter's
   * promotion and its ACQUIRED handed to the output. Checks the promotion.
   */
  handovers(others: number): number {
    const limit = others + 1;
    for (let i = 0; i < ENGINE_BATCH; i++) {
      const frame = this.frameOf(`h/${this.seq++}`, limit);
      this.holders[i] = this.claim(frame);
      for (let k = 0; k < others; k++) this.extra.push(this.claim(frame));
      this.waiters[i] = this.claim(frame);
    }
    const t0 = performance.now();
    for (let i = 0; i < ENGINE_BATCH; i++) this.engine.closed(this.holders[i]!, 0);
    const ns = ((performance.now() - t0) / ENGINE_BATCH) * 1e6;
    for (let i = 0; i < ENGINE_BATCH; i++) {
      if (this.waiters[i]!.state !== this.core.OWNER) throw new Error(`${this.label}: a waiter was not promoted by the holder's close`);
      this.engine.closed(this.waiters[i]!, 0);
    }
    for (const s of this.extra) this.engine.closed(s, 0);
    this.extra.length = 0;
    return ns;
  }

  /**
   * An exclusive holder and k shared waiters: the holder's close, which must
   * grant all k within the call (one loop turn of the server). ns per close.
   */
  batch(k: number): number {
    const rounds = Math.max(1, Math.floor(ENGINE_BATCH / k));
    for (let i = 0; i < rounds; i++) {
      const name = `b/${this.seq++}`;
      this.holders[i] = this.claim(this.frameOf(name));
      const shared = this.frameOf(name, 1, true);
      for (let j = 0; j < k; j++) this.extra.push(this.claim(shared));
    }
    const t0 = performance.now();
    for (let i = 0; i < rounds; i++) this.engine.closed(this.holders[i]!, 0);
    const ns = ((performance.now() - t0) / rounds) * 1e6;
    for (const s of this.extra) {
      if (s.state !== this.core.OWNER) throw new Error(`${this.label}: a shared waiter was not granted in the holder's close`);
      this.engine.closed(s, 0);
    }
    this.extra.length = 0;
    return ns;
  }
}

/** Median of `batches` batch figures per side, the sides alternating batch by batch (first side rotating). */
function alternate(sides: readonly (() => number)[], batches: number): Summary[] {
  const out: number[][] = sides.map(() => []);
  for (let b = 0; b < batches; b++) {
    for (let j = 0; j < sides.length; j++) {
      const side = (b + j) % sides.length;
      out[side]!.push(sides[side]!());
    }
  }
  return out.map((xs) => summarize(xs));
}

async function engineAlone(args: BenchArgs, here: string): Promise<string[][]> {
  const ours = new CoreBench("this", await loadCore(here));
  const base = args.baseline === null ? null : new CoreBench("baseline", await loadCore(args.baseline));
  const batches = Math.max(20, Math.floor(args.samples / 3));
  const rows: string[][] = [];
  const ns = (x: number) => x.toFixed(0);
  // Warm both up (the JIT) before anything is kept.
  for (let i = 0; i < 20; i++) for (const side of base === null ? [ours] : [ours, base]) side.claims(), side.handovers(0);
  const pair = (bench: string, run: (side: CoreBench) => number) => {
    const [a, b] = alternate(base === null ? [() => run(ours)] : [() => run(ours), () => run(base)], batches);
    rows.push([bench, ns(a!.p50), b === undefined ? "-" : ns(b.p50), b === undefined ? "-" : ratio(a!.p50, b.p50)]);
  };
  pair("exclusive claim (open + ACQUIRE, free lock)", (side) => side.claims());
  pair("exclusive handover (holder's close, waiter promoted)", (side) => side.handovers(0));
  const [ex, sem] = alternate([() => ours.handovers(0), () => ours.handovers(args.limit - 1)], batches);
  rows.push([`semaphore handover, limit ${args.limit} (against this build's exclusive ${ns(ex!.p50)} ns)`, ns(sem!.p50), "-", ratio(sem!.p50, ex!.p50)]);
  for (const k of args.batches) {
    const [b] = alternate([() => ours.batch(k)], batches);
    rows.push([`holder's close granting ${k} shared waiter${k === 1 ? "" : "s"} (${ns(b!.p50 / k)} ns per waiter)`, ns(b!.p50), "-", ratio(b!.p50, ex!.p50)]);
  }
  return rows;
}

// --- 2. semaphore handover -----------------------------------------------------

/**
 * `limit` holders of a limit-N name and one waiter (untimed; each holder must
 * be granted at once and the waiter must queue), idle, one holder closes
 * (FIN), time to the waiter's ACQUIRED.
 */
async function semaphoreHandover(target: Target, limit: number, idleMs: number, name: string): Promise<number> {
  const frame = encodeAcquire({ name, leaseMs: LEASE_MS, owner: "bench", try: false, limit });
  const holders: Peer[] = [];
  for (let i = 0; i < limit; i++) holders.push(await claimant(target, frame, PeerState.OWNER));
  const waiter = await claimant(target, frame, PeerState.WAITING);
  await Bun.sleep(idleMs);
  const leaving = holders[holders.length >> 1]!; // a middle slot: its slot is not the next one anyway
  const t0 = performance.now();
  leaving.socket!.end();
  const t1 = await waiter.owner();
  if (t1 === 0) throw new Error(`${target.name}: semaphore waiter closed before it was granted (error code ${waiter.errorCode})`);
  await closeAll([waiter, ...holders.filter((h) => h !== leaving)]);
  await leaving.closed();
  return t1 - t0;
}

async function semaphore(args: BenchArgs, lockd: Target): Promise<string[][]> {
  const rows: string[][] = [];
  let seq = 0;
  for (const idleMs of [20, 1]) {
    const [ex, sem] = await interleave(
      [() => exclusiveHandover(lockd, "FIN", idleMs, `sx/${seq++}`), () => semaphoreHandover(lockd, args.limit, idleMs, `s/${seq++}`)],
      args.samples,
    );
    const e = summarize(ex!);
    const s = summarize(sem!);
    rows.push([`handover, FIN, idle ${idleMs} ms`, us(e.p50), us(e.p99), us(s.p50), us(s.p99), ratio(s.p50, e.p50), ratio(s.p99, e.p99)]);
  }
  return rows;
}

// --- 3. a batch of shared waiters ------------------------------------------------

interface Batch {
  readonly first: number;
  readonly last: number;
}

/**
 * An exclusive holder and k shared waiters, all queued (untimed); idle; the
 * holder closes (FIN); time to the first and to the last waiter's ACQUIRED.
 * Every waiter must be granted.
 */
async function sharedBatch(target: Target, k: number, idleMs: number, name: string): Promise<Batch> {
  const holder = await claimant(target, exclusiveFrame(name), PeerState.OWNER);
  const shared = encodeAcquire({ name, leaseMs: LEASE_MS, owner: "bench", try: false, shared: true });
  const waiters: Peer[] = [];
  for (let i = 0; i < k; i++) waiters.push(await claimant(target, shared, PeerState.WAITING));
  await Bun.sleep(idleMs);
  const t0 = performance.now();
  holder.socket!.end();
  let first = Infinity;
  let last = 0;
  for (const waiter of waiters) {
    const at = await waiter.owner();
    if (at === 0) throw new Error(`${target.name}: a shared waiter closed before it was granted (error code ${waiter.errorCode})`);
    if (at < first) first = at;
    if (at > last) last = at;
  }
  await closeAll(waiters);
  await holder.closed();
  return { first: first - t0, last: last - t0 };
}

async function shared(args: BenchArgs, lockd: Target): Promise<string[][]> {
  const rows: string[][] = [];
  let seq = 0;
  for (const idleMs of [20, 1]) {
    for (const k of args.batches) {
      const [ex, batch] = await interleave<number | Batch>(
        [() => exclusiveHandover(lockd, "FIN", idleMs, `bx/${seq++}`), () => sharedBatch(lockd, k, idleMs, `b/${seq++}`)],
        args.batchSamples,
      );
      const e = summarize(ex as number[]);
      const first = summarize((batch as Batch[]).map((b) => b.first));
      const last = summarize((batch as Batch[]).map((b) => b.last));
      const perWaiter = k > 1 ? `${us((last.p50 - first.p50) / (k - 1))}` : "-";
      rows.push([
        `k = ${k}, idle ${idleMs} ms`,
        us(e.p50),
        us(first.p50),
        us(first.p99),
        us(last.p50),
        us(last.p99),
        ratio(first.p50, e.p50),
        ratio(last.p50, e.p50),
        perWaiter,
      ]);
    }
  }
  return rows;
}

// --- 4. memory per session (bench/core-scale.ts of each tree) ---------------------

/** The core-scale run in flight, killed by the finally block if the bench is cut short. */
let coreRun: Subprocess | null = null;

async function heapPerSession(tree: string, sessions: number): Promise<number> {
  const script = join(tree, "bench/core-scale.ts");
  const proc = Bun.spawn([process.execPath, script, "--sessions", String(sessions)], { stdout: "pipe", stderr: "pipe" });
  coreRun = proc;
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  coreRun = null;
  if (code !== 0) throw new Error(`${script} exited ${code}: ${err.trim()}`);
  const match = /JS heap per session[^\n]*?\s(\d+) B/.exec(out);
  if (match === null) throw new Error(`${script}: no "JS heap per session" line in its output:\n${out}`);
  return Number(match[1]);
}

async function memory(args: BenchArgs, here: string): Promise<{ rows: string[][]; ratio: string }> {
  const ours: number[] = [];
  const theirs: number[] = [];
  const rows: string[][] = [];
  // A B B A ...: neither tree always runs first.
  for (let round = 0; round < args.rounds; round++) {
    const order = round % 2 === 0 ? ["this", "baseline"] : ["baseline", "this"];
    for (const side of order) {
      const bytes = await heapPerSession(side === "this" ? here : args.baseline!, args.coreSessions);
      (side === "this" ? ours : theirs).push(bytes);
      rows.push([`round ${round + 1}, ${side}`, `${bytes} B`, `load ${load()}`]);
    }
  }
  const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return { rows, ratio: ratio(mean(ours), mean(theirs)) };
}

// --- main ------------------------------------------------------------------------

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const here = join(import.meta.dir, "..");
  if (args.baseline !== null) {
    for (const file of ["bench/lib/server-child.ts", "bench/core-scale.ts", "src/server/index.ts"]) {
      if (!existsSync(join(args.baseline, file))) throw new Error(`--baseline ${args.baseline}: no ${file} there (is it a lockd tree?)`);
    }
  }
  const t0 = performance.now();
  console.log(`bench:semaphores on ${navigator.hardwareConcurrency} cores, ${new Date().toISOString()}; load average (1/5/15 min) at the start: ${load()}`);
  console.log(`this build: ${here}; baseline: ${args.baseline ?? "none (give --baseline DIR)"}`);

  const serverChild = join(here, "bench/lib/server-child.ts");
  if (args.only.has("exclusive")) {
    const sides: Side[] = [
      { label: "lockd", script: serverChild, relay: false },
      { label: "relay", script: join(here, "bench/floor/relay.ts"), relay: true },
    ];
    if (args.baseline !== null) {
      sides.push({ label: "baseline", script: join(args.baseline, "bench/lib/server-child.ts"), relay: false });
      sides.push({ label: "lockd again", script: serverChild, relay: false });
    }
    const rows = await exclusive(args, sides);
    console.log(
      `\n1. The exclusive path, microseconds (${args.samples} samples per side, claims ${args.samples * 2}, fresh processes every ${args.epoch}; relay = bench/floor/relay.ts; "this again" = a second process of this build, the run's own noise); load at the end: ${load()}\n`,
    );
    console.log(exclusiveTable(rows, sides));
    console.log("budgets: this/baseline p50 within 1.05x, this/relay p50 within 1.3x");
  }
  const lockd = await start("lockd", serverChild);
  if (args.only.has("engine")) {
    const rows = await engineAlone(args, here);
    console.log(`\n1b. The same paths in the engine alone (src/core of each tree in this process, virtual clock, output dropped), ns per operation, median of batches of ${ENGINE_BATCH}; load at the end: ${load()}\n`);
    console.log(table(["operation", "this", "baseline", "ratio"], rows));
  }
  if (args.only.has("semaphore")) {
    const rows = await semaphore(args, lockd);
    console.log(`\n2. Semaphore handover (limit ${args.limit}: ${args.limit} holders, one closes, the one waiter promoted) against an exclusive handover, this build, microseconds (${args.samples} samples per side); load at the end: ${load()}\n`);
    console.log(table(["bench", "exclusive p50", "exclusive p99", "semaphore p50", "semaphore p99", "p50 ratio", "p99 ratio"], rows));
    console.log("budget: p50 ratio within 1.1x");
  }
  if (args.only.has("shared")) {
    const rows = await shared(args, lockd);
    console.log(`\n3. k shared waiters granted when the exclusive holder closes (FIN), this build, microseconds from the close (${args.batchSamples} samples per side; exclusive = a one-waiter handover interleaved); load at the end: ${load()}\n`);
    console.log(table(["batch", "exclusive p50", "first p50", "first p99", "last p50", "last p99", "first/excl p50", "last/excl p50", "per extra waiter"], rows));
  }
  const extras = (await lockd.child.stats()).extra;
  await checkClean(lockd);
  await stopAll();

  if (args.only.has("memory")) {
    if (args.baseline === null) console.log("\n4. Memory per session: skipped (no --baseline)");
    else {
      const { rows, ratio: r } = await memory(args, here);
      console.log(`\n4. JS heap per session, bench/core-scale.ts --sessions ${args.coreSessions} of each tree, in turn\n`);
      console.log(table(["run", "heap per session", "load average (1/5/15 min) after"], rows));
      console.log(`this/baseline (means): ${r}; budget within 1.05x`);
    }
  }
  console.log(`\nthe lockd of sections 2 and 3 after them: ${JSON.stringify(extras)}`);
  console.log(`load average (1/5/15 min) at the end: ${load()}; ${((performance.now() - t0) / 1000).toFixed(0)} s in all`);
}

if (import.meta.main) {
  try {
    await main();
  } finally {
    await stopAll();
    const run = coreRun as Subprocess | null;
    if (run !== null) {
      run.kill("SIGKILL");
      await run.exited;
    }
  }
}
