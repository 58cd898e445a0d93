/**
 * Failover benchmark: real `lockd serve --coordinator` processes against a
 * throwaway PostgreSQL 15 (test/coordinator/pg.ts).
 *
 * 1. Failover time: an active and a standby share one lock port; a client
 *    holds lock "k" at the active and a second waits for it, both with the
 *    client lease --client-lease (default: a quarter of the coordinator
 *    lease, C/4, the largest that owes no lock-delay). The active is killed
 *    with SIGKILL; the waiter, its connection broken, reconnects every 10 ms
 *    and sends ACQUIRE again (heartbeating at lease/4 while it waits).
 *    Measured from the kill() call to the waiter's ACQUIRED from the new
 *    active (and, for reference, to the new active's "active: listening" log
 *    line arriving). A fresh standby is started for the next round. --rounds
 *    takeovers (default 20) at each of 2 s and 4 s coordinator leases. With
 *    --baseline DIR (another lockd tree, e.g. the build before the
 *    lock-delay: `git archive 9f5de78 | tar -x -C DIR && ln -s $PWD/node_modules DIR/`),
 *    the same rounds run against that build too, alternating round by round
 *    (its own service, in a database of its own), so both see the same machine.
 * 2. Lock-delay after a takeover: the same takeover at a 2 s coordinator
 *    lease with client leases of --delay-leases multiples of it (default
 *    1,5,10; --delay-rounds 8,4,3). The new active holds every name back for
 *    0.8 x M - gap + 0.02 x M (M: the largest client lease, rounded up to one
 *    of eight steps per power of two; gap: the lease the standby waited,
 *    here C, less 0.8 x C), so the waiter is queued (WAITING) and granted by
 *    a push when the delay ends. The delay measured is from the new active's
 *    activation (the time in its "active: listening" line, taken just after
 *    the delay is set) to the waiter's ACQUIRED; the prediction is the
 *    formula computed here, beside the lockDelayMs the server logged.
 * 3. Hot path: claim (connect, ACQUIRE of a free lock, ACQUIRED) and
 *    handover (the owner closes; the queued waiter's ACQUIRED) against
 *    `lockd serve` without and with --coordinator, interleaved in blocks of
 *    10 samples so the machine's drift hits both alike; the ratio of medians.
 * 4. Coordinator statements: index scans on lockd_coordinator (every
 *    statement lockd sends is one) per second, idle and under a claim load,
 *    from PostgreSQL's statistics, for one active and one standby at a 2 s
 *    lease and --token-block 1000.
 * 5. Reclaim through a clean stop (a rolling upgrade step): an active and
 *    a standby with --reclaim-max-lease 10s at a 4 s coordinator lease;
 *    --reclaim-holders holders (default 20: exclusive names, a shared pair,
 *    a semaphore of 3) with 5 s leases, heartbeating at lease/4. SIGTERM of
 *    the active; each holder, told SHUTTING_DOWN with RECLAIM, reconnects
 *    every 10 ms and reclaims with its token; kept = ACQUIRED with the same
 *    token before its deadline (0.8 x lease after the send of its last
 *    answered heartbeat). Beside them a client claims a name nobody held,
 *    reconnecting every 10 ms from the stop: the first fresh grant outside
 *    the published set. --rounds rounds (a new standby each).
 * 6. Hot path with reclaim on and off: claim and handover of 5 s leases
 *    (within the cap: every grant flagged) against two coordinated actives,
 *    one with --reclaim-max-lease 10s and one without, interleaved as in 3.
 *
 * Usage: bun bench/failover.ts [--rounds 20] [--client-lease 0.25] [--baseline DIR]
 *        [--delay-leases 1,5,10] [--delay-rounds 8,4,3] [--samples 300] [--reclaim-holders 20]
 *        [--only failover,delay,hotpath,statements,reclaim,reclaim-hotpath]
 * (--client-lease: a multiple of the coordinator lease, or ms with "ms": 500ms.)
 */
import { existsSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { ChildServer } from "../test/fixtures/ops-child.ts";
import { freePort, freePorts, Postgres, PG_PASSWORD } from "../test/coordinator/pg.ts";
import { WirePeer } from "../test/helpers/wire.ts";
import { encodeAcquire, FLAG_RECLAIM, FrameType } from "../src/protocol/index.ts";
import { summarize, table } from "./lib/stats.ts";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const ROUNDS = Number(args.get("rounds") ?? 20);
const SAMPLES = Number(args.get("samples") ?? 300);
const CLIENT_LEASE = args.get("client-lease") ?? "0.25";
const DELAY_LEASES = (args.get("delay-leases") ?? "1,5,10").split(",").map(Number);
const DELAY_ROUNDS = (args.get("delay-rounds") ?? "8,4,3").split(",").map(Number);
const BASELINE = args.get("baseline");
const BASELINE_MAIN = BASELINE === undefined ? null : join(resolve(BASELINE), "src/cli/main.ts");
if (BASELINE_MAIN !== null && !existsSync(BASELINE_MAIN)) throw new Error(`--baseline: no ${BASELINE_MAIN}`);
const ONLY = new Set((args.get("only") ?? "failover,delay,hotpath,statements,reclaim,reclaim-hotpath").split(","));
const RECLAIM_HOLDERS = Number(args.get("reclaim-holders") ?? 20);
if (DELAY_LEASES.some((x) => !(x > 0)) || DELAY_ROUNDS.some((x) => !(x >= 1))) throw new Error("--delay-leases and --delay-rounds: positive numbers");

/** The client lease for coordinator lease `coordinatorMs` (--client-lease: a multiple, or "NNNms"). */
function clientLeaseFor(coordinatorMs: number): number {
  return CLIENT_LEASE.endsWith("ms") ? Number(CLIENT_LEASE.slice(0, -2)) : Math.round(Number(CLIENT_LEASE) * coordinatorMs);
}

function serve(pg: Postgres | null, port: number, extra: readonly string[] = [], url = pg?.url(), main?: string): ChildServer {
  return ChildServer.spawn(
    ["serve", "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--log-level", "info", ...extra],
    url === undefined ? {} : { LOCKD_COORDINATOR: url },
    main,
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

/** Heartbeat `peer` every lease/4 (a client's schedule, roughly) until the returned function is called. */
function keepAlive(peer: WirePeer, leaseMs: number): () => void {
  const timer = setInterval(() => {
    if (!peer.isClosed) peer.heartbeat();
  }, Math.max(10, leaseMs / 4));
  return () => clearInterval(timer);
}

// --- the lock-delay's formula, written out here (docs/how-it-works.md section 10), to check the server against ---

/** A lease as the server records it: rounded up to one of eight steps per power of two. */
function recorded(leaseMs: number): number {
  if (leaseMs <= 8) return Math.ceil(leaseMs);
  const step = 2 ** (Math.floor(Math.log2(leaseMs)) - 3);
  return Math.ceil(leaseMs / step) * step;
}

/**
 * The delay after a takeover of an expired row (ms), for a chain whose every client lease is `clientLeaseMs`:
 * M = the larger of C/4 (every term starts with it durable) and the recorded client lease (a grant above C/4
 * raises it); gap = the lease the standby waited (C: the same lease) - 0.8 x C.
 */
function predictedDelay(coordinatorMs: number, clientLeaseMs: number): number {
  const quarter = Math.floor(coordinatorMs / 4);
  const m = clientLeaseMs <= quarter ? quarter : Math.max(quarter, recorded(clientLeaseMs));
  const wait = 0.8 * m - (coordinatorMs - 0.8 * coordinatorMs);
  return wait <= 0 ? 0 : Math.ceil(wait + 0.02 * m);
}

// --- takeovers -----------------------------------------------------------------------------

interface Round {
  /** kill() to the waiter's ACQUIRED from the new active (ms). */
  readonly grant: number;
  /** kill() to the new active's "active: listening" line arriving here (ms). */
  readonly listening: number;
  /** kill() to the time written in that line (the activation, on the same clock; ms). */
  readonly activated: number;
  /** The activation to the waiter's ACQUIRED (ms): the lock-delay, plus the push. */
  readonly delay: number;
  /** lockDelayMs in the activation line (0: none logged). */
  readonly loggedDelay: number;
  /** Whether the waiter's claim at the new active was first answered WAITING (it was held back). */
  readonly queued: boolean;
  /** The holder's ACQUIRE to its ACQUIRED at the active (ms): includes a raise when its lease is a new largest. */
  readonly holderGrant: number;
}

/** One service's active, its port and options: a new standby per round, which becomes the next active. */
class Chain {
  private active: ChildServer | null = null;
  private constructor(
    readonly label: string,
    readonly port: number,
    readonly coordinatorMs: number,
    readonly clientLeaseMs: number,
    private readonly url: string,
    private readonly main: string | undefined,
  ) {}

  private get extra(): string[] {
    return ["--service", `bench-${this.label}-${this.coordinatorMs}-${this.clientLeaseMs}-${process.pid}`, "--coordinator-lease", `${this.coordinatorMs}ms`];
  }

  static async start(label: string, url: string, main: string | undefined, coordinatorMs: number, clientLeaseMs: number): Promise<Chain> {
    const chain = new Chain(label, await freePort(), coordinatorMs, clientLeaseMs, url, main);
    chain.active = serve(null, chain.port, chain.extra, url, main);
    await chain.active.line("active: listening", 30_000);
    return chain;
  }

  /** One SIGKILL takeover. */
  async round(): Promise<Round> {
    const lease = this.clientLeaseMs;
    const expected = predictedDelay(this.coordinatorMs, lease);
    const active = this.active!;
    const standby = serve(null, this.port, this.extra, this.url, this.main);
    this.active = standby; // from here on, disposing the chain stops the standby too
    watchArrivals(standby, "active: listening");
    const stops: (() => void)[] = [];
    const peers: WirePeer[] = [];
    try {
      if ((await standby.line("lockd started", 30_000)).role !== "standby") throw new Error("the new instance is not a standby");
      const holder = await WirePeer.connect(this.port);
      peers.push(holder);
      const asked = performance.now();
      holder.acquire("k", lease);
      // The active may still be in its own lock-delay (none is left after the last round's grant, but be sure).
      const held = await holder.until(() => holder.frames.find((f) => f.type !== FrameType.WAITING), expected + 10_000, "the holder's grant");
      if (held.type !== FrameType.ACQUIRED) throw new Error(`the holder was not granted: ${holder.describe()}`);
      const holderGrant = held.at - asked;
      stops.push(keepAlive(holder, lease));
      const waiter = await WirePeer.connect(this.port);
      peers.push(waiter);
      waiter.acquire("k", lease);
      if ((await waiter.frame(0)).type !== FrameType.WAITING) throw new Error("the waiter was not queued");
      stops.push(keepAlive(waiter, lease));
      const killedAt = performance.now();
      const killedWall = Date.now();
      active.proc.kill("SIGKILL");
      await waiter.closed(10_000);
      // Reconnect every 10 ms until the new active answers the claim with ACQUIRED (at once, or by a push after WAITING).
      let grantedAt = 0;
      let queued = false;
      while (grantedAt === 0) {
        const retry = await connectRetrying(this.port, 4 * this.coordinatorMs + 10_000);
        peers.push(retry);
        retry.acquire("k", lease);
        const stop = keepAlive(retry, lease);
        const frame = await retry.until(
          () => retry.frames.find((f) => f.type !== FrameType.WAITING) ?? (retry.isClosed ? ("closed" as const) : undefined),
          expected + 10_000,
          "an answer",
        );
        stop();
        if (retry.frames[0]?.type === FrameType.WAITING) queued = true;
        if (frame !== "closed" && frame.type === FrameType.ACQUIRED) grantedAt = frame.at;
        else if (frame !== "closed") throw new Error(`the claim at the new active failed: ${retry.describe()}`);
        retry.end();
        if (grantedAt === 0) await Bun.sleep(10);
      }
      const line = await standby.line("active: listening", 10_000);
      const activatedWall = Date.parse(String(line.time));
      const grantedWall = killedWall + (grantedAt - killedAt);
      for (const stop of stops) stop();
      holder.terminate();
      await active.exited;
      await active[Symbol.asyncDispose]();
      return {
        grant: grantedAt - killedAt,
        listening: (await arrivalOf(standby, "active: listening")) - killedAt,
        activated: activatedWall - killedWall,
        delay: grantedWall - activatedWall,
        loggedDelay: Number(line.lockDelayMs ?? 0),
        queued,
        holderGrant,
      };
    } finally {
      for (const stop of stops) stop();
      for (const peer of peers) peer.terminate();
      await active[Symbol.asyncDispose]();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.active?.[Symbol.asyncDispose]();
  }
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

async function claimOnce(t: Target, leaseMs = 60_000): Promise<number> {
  const started = performance.now();
  const peer = await WirePeer.connect(t.port);
  peer.acquire(`claim-${++nameSerial}`, leaseMs);
  const frame = await peer.frame(0);
  const elapsed = frame.at - started;
  peer.end();
  await peer.closed();
  return elapsed;
}

async function handoverOnce(t: Target, leaseMs = 60_000): Promise<number> {
  const name = `handover-${++nameSerial}`;
  const owner = await WirePeer.connect(t.port);
  owner.acquire(name, leaseMs);
  await owner.frame(0);
  const waiter = await WirePeer.connect(t.port);
  waiter.acquire(name, leaseMs);
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

// --- reclaim through a clean stop of the active ----------------------------------------

interface HolderSpec {
  readonly name: string;
  readonly limit: number;
  readonly shared: boolean;
}

/** The holders of a round: exclusive names, one shared pair, one semaphore of 3 (as many as fit in `n`). */
function holderSpecs(n: number, round: number): HolderSpec[] {
  const out: HolderSpec[] = [];
  // Names of their own per round: the last round's are still held back by its grace at the new active.
  for (let i = 0; out.length < n; i++) {
    if (i === 0) out.push({ name: `rw-${round}`, limit: 1, shared: true }, { name: `rw-${round}`, limit: 1, shared: true });
    else if (i === 1) out.push(...[0, 1, 2].map(() => ({ name: `pool-${round}`, limit: 3, shared: false })));
    else out.push({ name: `x-${round}-${i}`, limit: 1, shared: false });
  }
  return out.slice(0, n);
}

/** A holder with its heartbeats' send times (its deadline is 0.8 x lease after the last answered one). */
class Holder {
  readonly sends: number[] = [];
  private timer: ReturnType<typeof setInterval> | null = null;
  constructor(
    readonly spec: HolderSpec,
    readonly peer: WirePeer,
    readonly leaseMs: number,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      if (this.peer.isClosed) return this.stop();
      this.sends.push(performance.now());
      this.peer.heartbeat();
    }, this.leaseMs / 4);
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  get token(): bigint {
    return this.peer.frames[0]!.token!;
  }

  get slot(): number {
    const body = this.peer.frames[0]!.body!;
    return this.spec.limit > 1 ? (body[8]! << 8) | body[9]! : -1;
  }

  /** 0.8 x lease after the send of the last heartbeat answered before the connection ended (or the ACQUIRE's). */
  deadline(acquiredAt: number): number {
    const answers = this.peer.frames.filter((f) => f.type === FrameType.ACQUIRED).map((f) => f.at);
    const last = answers.at(-1) ?? acquiredAt;
    let sent = acquiredAt;
    for (const t of this.sends) if (t <= last) sent = t;
    return sent + 0.8 * this.leaseMs;
  }
}

interface ReclaimRound {
  readonly holders: number;
  readonly kept: number;
  /** stop -> the last holder's reclaim granted (ms). */
  readonly lastReclaim: number;
  /** stop -> the first fresh grant of a name nobody held (ms). */
  readonly freshGrant: number;
  /** stop -> the new active's "active: listening" (ms, arrival here). */
  readonly listening: number;
  /** The new active's lock-delay as it logged it: ms and which names. */
  readonly delay: string;
}

async function reclaimRounds(pg: Postgres): Promise<string> {
  const coordinatorMs = 4000;
  const leaseMs = 5000;
  const port = await freePort();
  const extra = ["--service", `bench-reclaim-${process.pid}`, "--coordinator-lease", `${coordinatorMs}ms`, "--reclaim-max-lease", "10s"];
  let active = serve(pg, port, extra);
  await active.line("active: listening", 30_000);
  const rounds: ReclaimRound[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const standby = serve(pg, port, extra);
      watchArrivals(standby, "active: listening");
      const peers: WirePeer[] = [];
      const holders: Holder[] = [];
      try {
        if ((await standby.line("lockd started", 30_000)).role !== "standby") throw new Error("the new instance is not a standby");
        const acquiredAt = new Map<Holder, number>();
        for (const spec of holderSpecs(RECLAIM_HOLDERS, round)) {
          const peer = await WirePeer.connect(port);
          peers.push(peer);
          peer.acquire(spec.name, leaseMs, { limit: spec.limit, shared: spec.shared });
          const first = await peer.frame(0, 10_000);
          if (first.type !== FrameType.ACQUIRED) throw new Error(`holder ${spec.name} not granted: ${peer.describe()}`);
          const h = new Holder(spec, peer, leaseMs);
          acquiredAt.set(h, first.at);
          h.start();
          holders.push(h);
        }
        const stoppedAt = performance.now();
        active.proc.kill("SIGTERM");
        // A fresh claim of a name nobody held, reconnecting every 10 ms until granted.
        const fresh = (async () => {
          for (;;) {
            const peer = await connectRetrying(port, 30_000);
            peers.push(peer);
            peer.acquire(`fresh-${round}`, leaseMs);
            const f = await peer.until(() => peer.frames[0] ?? (peer.isClosed ? ("closed" as const) : undefined), 10_000, "an answer");
            if (f !== "closed" && f.type === FrameType.ACQUIRED) {
              peer.end();
              return f.at - stoppedAt;
            }
            peer.terminate();
            await Bun.sleep(10);
          }
        })();
        const reclaims = holders.map(async (h) => {
          await h.peer.closed(10_000);
          h.stop();
          const last = h.peer.frames.at(-1)!;
          if (last.type !== FrameType.ERROR || (last.flags & FLAG_RECLAIM) === 0) return null;
          const deadline = h.deadline(acquiredAt.get(h)!);
          while (performance.now() < deadline) {
            let peer: WirePeer;
            try {
              peer = await WirePeer.connect(port);
            } catch {
              await Bun.sleep(10);
              continue;
            }
            peers.push(peer);
            const reclaim = h.spec.limit > 1 ? { token: h.token, slot: h.slot } : { token: h.token };
            peer.write(encodeAcquire({ name: h.spec.name, leaseMs, owner: "bench", try: false, limit: h.spec.limit, shared: h.spec.shared, reclaim }));
            const f = await peer.until(() => peer.frames[0] ?? (peer.isClosed ? ("closed" as const) : undefined), 10_000, "an answer");
            if (f !== "closed" && f.type === FrameType.ACQUIRED && f.token === h.token) return f.at <= deadline ? f.at - stoppedAt : null;
            peer.terminate();
            await Bun.sleep(10);
          }
          return null;
        });
        const results = await Promise.all(reclaims);
        const freshGrant = await fresh;
        const kept = results.filter((r) => r !== null) as number[];
        if (await active.exit(10_000) !== 0) throw new Error("the stopped active did not exit 0");
        const r: ReclaimRound = {
          holders: holders.length,
          kept: kept.length,
          lastReclaim: kept.length === 0 ? NaN : Math.max(...kept),
          freshGrant,
          listening: (await arrivalOf(standby, "active: listening")) - stoppedAt,
          delay: ((line) => (line.lockDelayMs === undefined ? "none" : `${line.lockDelayMs} ms, ${line.lockDelayNames} names`))(await standby.line("active: listening", 10_000)),
        };
        rounds.push(r);
        process.stdout.write(`  reclaim round ${round + 1}/${ROUNDS}: kept ${r.kept}/${r.holders}, stop -> listening ${ms(r.listening)} ms, -> fresh grant ${ms(r.freshGrant)} ms, -> last reclaim ${ms(r.lastReclaim)} ms; the new active's lock-delay: ${r.delay}\n`);
      } finally {
        for (const h of holders) h.stop();
        for (const peer of peers) peer.terminate();
        await active[Symbol.asyncDispose]();
        active = standby;
      }
    }
  } finally {
    await active[Symbol.asyncDispose]();
  }
  const f = summarize(rounds.map((r) => r.freshGrant));
  const l = summarize(rounds.map((r) => r.listening));
  const last = summarize(rounds.map((r) => r.lastReclaim));
  const kept = rounds.reduce((n, r) => n + r.kept, 0);
  const all = rounds.reduce((n, r) => n + r.holders, 0);
  return table(
    ["rounds", "holders kept", "stop -> listening p50 / max", "stop -> fresh grant p50 / p99 / max", "stop -> last reclaim p50 / max", "budget: fresh grant"],
    [[String(rounds.length), `${kept} / ${all}`, `${ms(l.p50)} / ${ms(Math.max(...rounds.map((r) => r.listening)))}`, `${ms(f.p50)} / ${ms(f.p99)} / ${ms(Math.max(...rounds.map((r) => r.freshGrant)))}`, `${ms(last.p50)} / ${ms(Math.max(...rounds.map((r) => r.lastReclaim)))}`, "1500"]],
  );
}

async function reclaimHotPath(pg: Postgres): Promise<string> {
  const [offPort, onPort] = (await freePorts(2)) as [number, number];
  await using off = serve(pg, offPort, ["--service", `bench-hot-off-${process.pid}`, "--coordinator-lease", "4s"]);
  await off.line("active: listening", 30_000);
  await using on = serve(pg, onPort, ["--service", `bench-hot-on-${process.pid}`, "--coordinator-lease", "4s", "--reclaim-max-lease", "10s"]);
  await on.line("active: listening", 30_000);
  const targets: Target[] = [{ name: "off", port: offPort }, { name: "on", port: onPort }];
  const rows: string[][] = [];
  for (const [label, once] of [["claim", claimOnce], ["handover", handoverOnce]] as const) {
    const samples = new Map<string, number[]>(targets.map((t) => [t.name, []]));
    for (let i = 0; i < 30; i++) for (const t of targets) await once(t, 5000); // warm-up (and the raise of a 5 s lease)
    for (let done = 0; done < SAMPLES; done += 10) {
      for (const t of targets) for (let i = 0; i < 10; i++) samples.get(t.name)!.push(await once(t, 5000));
    }
    const p = summarize(samples.get("off")!);
    const h = summarize(samples.get("on")!);
    rows.push([label, (p.p50 * 1000).toFixed(1), (h.p50 * 1000).toFixed(1), (h.p50 / p.p50).toFixed(3), (p.p99 * 1000).toFixed(1), (h.p99 * 1000).toFixed(1)]);
  }
  return table(["µs", "p50 reclaim off", "p50 reclaim on", "ratio", "p99 off", "p99 on"], rows);
}

// --- main ------------------------------------------------------------------------------------

const load = loadavg();
console.log(`failover bench: ${new Date().toISOString()}, load average ${load.map((x) => x.toFixed(2)).join(" ")}`);
await using pg = await Postgres.start();

const ms = (x: number): string => x.toFixed(0);

if (ONLY.has("failover")) {
  let before: Postgres | null = null;
  if (BASELINE_MAIN !== null) {
    // The baseline build knows only its own coordinator schema: a database of its own.
    const admin = pg.client();
    try {
      await admin.unsafe("CREATE DATABASE baseline");
    } finally {
      await admin.close();
    }
    before = pg;
  }
  const results: string[][] = [];
  for (const coordinatorMs of [2000, 4000]) {
    const lease = clientLeaseFor(coordinatorMs);
    const builds: { name: string; chain: Chain; rounds: Round[] }[] = [];
    try {
      builds.push({ name: "this build", chain: await Chain.start("now", pg.url(), undefined, coordinatorMs, lease), rounds: [] });
      if (before !== null) builds.push({ name: "baseline", chain: await Chain.start("base", before.url(PG_PASSWORD, "baseline"), BASELINE_MAIN!, coordinatorMs, lease), rounds: [] });
      for (let round = 0; round < ROUNDS; round++) {
        // Alternate which build goes first, so neither always follows the other's takeover.
        const order = round % 2 === 0 ? builds : [...builds].reverse();
        for (const build of order) {
          const r = await build.chain.round();
          build.rounds.push(r);
          process.stdout.write(`  ${build.name}, coordinator lease ${coordinatorMs} ms, client lease ${lease} ms, round ${round + 1}/${ROUNDS}: kill -> grant ${ms(r.grant)} ms (delay ${ms(r.delay)} ms${r.queued ? ", queued" : ""})\n`);
        }
      }
    } finally {
      for (const build of builds) await build.chain[Symbol.asyncDispose]();
    }
    const base = builds.find((b) => b.name === "baseline");
    const bg = base === undefined ? null : summarize(base.rounds.map((r) => r.grant));
    for (const build of builds) {
      const g = summarize(build.rounds.map((r) => r.grant));
      const l = summarize(build.rounds.map((r) => r.listening));
      const d = summarize(build.rounds.map((r) => r.delay));
      results.push([
        `${coordinatorMs / 1000} s`,
        build.name,
        `${lease}`,
        String(g.n),
        ms(g.p50),
        ms(g.p99),
        bg === null ? "-" : `${(g.p50 / bg.p50).toFixed(3)}x`,
        bg === null ? "-" : `${(g.p99 / bg.p99).toFixed(3)}x`,
        ms(l.p50),
        ms(l.p99),
        `${ms(d.p50)} / ${ms(d.p99)}`,
        String(build.rounds.filter((r) => r.queued).length),
        ms(coordinatorMs + coordinatorMs / 4),
      ]);
    }
  }
  console.log("\nSIGKILL of the active -> first grant to a waiting client (ms)");
  console.log(
    table(
      ["coord. lease", "build", "client lease", "n", "p50 grant", "p99 grant", "p50 / baseline", "p99 / baseline", "p50 listening", "p99 listening", "activation -> grant p50 / p99", "queued", "lease + lease/4"],
      results,
    ),
  );
}

if (ONLY.has("delay")) {
  const coordinatorMs = 2000;
  const rows: string[][] = [];
  for (let i = 0; i < DELAY_LEASES.length; i++) {
    const lease = Math.round(DELAY_LEASES[i]! * coordinatorMs);
    const rounds = DELAY_ROUNDS[Math.min(i, DELAY_ROUNDS.length - 1)]!;
    const expected = predictedDelay(coordinatorMs, lease);
    await using chain = await Chain.start("delay", pg.url(), undefined, coordinatorMs, lease);
    const got: Round[] = [];
    for (let round = 0; round < rounds; round++) {
      const r = await chain.round();
      got.push(r);
      process.stdout.write(`  client lease ${lease} ms, round ${round + 1}/${rounds}: kill -> activation ${ms(r.activated)} ms, activation -> grant ${ms(r.delay)} ms (predicted ${expected}, logged ${r.loggedDelay}), holder's grant ${r.holderGrant.toFixed(1)} ms\n`);
    }
    const d = summarize(got.map((r) => r.delay));
    const a = summarize(got.map((r) => r.activated));
    const g = summarize(got.map((r) => r.grant));
    const over = got.map((r) => r.delay - expected);
    const logged = [...new Set(got.map((r) => r.loggedDelay))].join(", ");
    rows.push([
      `${lease / coordinatorMs}x (${lease / 1000} s)`,
      String(recorded(lease)),
      String(d.n),
      String(expected),
      logged,
      `${ms(d.p50)} / ${ms(Math.min(...got.map((r) => r.delay)))} .. ${ms(Math.max(...got.map((r) => r.delay)))}`,
      `${(d.p50 / expected).toFixed(4)}x`,
      `${ms(Math.min(...over))} .. ${ms(Math.max(...over))}`,
      `${ms(a.p50)}`,
      `${ms(g.p50)} / ${ms(g.p99)}`,
      `${got.filter((r) => r.queued).length}/${got.length}`,
    ]);
  }
  console.log(`\nLock-delay after a SIGKILL takeover, coordinator lease ${coordinatorMs} ms (ms; delay = the new active's activation -> the queued waiter's ACQUIRED)`);
  console.log(
    table(
      ["client lease", "M recorded", "n", "predicted", "logged lockDelayMs", "delay p50 / min .. max", "p50 / predicted", "delay - predicted", "kill -> activation p50", "kill -> grant p50 / p99", "queued"],
      rows,
    ),
  );
}
if (ONLY.has("hotpath")) {
  console.log("\nHot path with and without --coordinator (µs, loopback, same run)");
  console.log(await hotPath(pg));
}
if (ONLY.has("statements")) {
  console.log("\nCoordinator statements (index and table scans of lockd_coordinator), one active + one standby, lease 2 s");
  console.log(await statements(pg));
}
if (ONLY.has("reclaim")) {
  console.log(`\nReclaim through a clean stop of the active (SIGTERM), standby running, coordinator lease 4000 ms, client lease 5000 ms, ${RECLAIM_HOLDERS} holders (ms from the kill() call)`);
  console.log(await reclaimRounds(pg));
}
if (ONLY.has("reclaim-hotpath")) {
  console.log("\nHot path of a coordinated active with reclaim on and off, 5 s leases (µs, loopback, same run)");
  console.log(await reclaimHotPath(pg));
}
console.log(`done; load average ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
