/**
 * The cost of the raise (the lock-delay's durable largest lease, issue 25):
 * a grant whose lease is above the largest lease already durable waits for
 * that lease to be made durable first; a grant whose lease is covered does
 * not. Two servers, real `lockd serve` child processes on 127.0.0.1:
 *
 * - data-dir: a single server on a data directory (ext4 here, the bench
 *   machine's disk): the raise is one synchronous write of <data-dir>/leases
 *   (temp file, fsync, rename, fsync of the directory) on the grant path.
 * - coordinator: the active of a failover group on a throwaway PostgreSQL
 *   (test/coordinator/pg.ts: fsync=off, so a statement's commit costs no
 *   disk flush; commits stay synchronous): the raise is one UPDATE ... RETURNING
 *   round trip, and the grant is answered when it lands.
 *
 * Each sample is one claim on a connection opened beforehand (untimed):
 * ACQUIRE of a free name to ACQUIRED. Each pair is a *raise* (a lease one
 * recorded step above the durable one: leases are recorded rounded up to
 * eight steps per power of two) and a *covered* grant (the lease just raised,
 * or the one raised before: durable), in alternating order. A server takes about 180 raises in its life (1 s to 2^32 ms), so
 * a fresh one (new data directory, new service row) is started every --batch
 * raises. For scale, the bare operation is timed from this process in the
 * same loop: writeLeases() into a directory on the same filesystem, and the
 * same UPDATE ... GREATEST ... RETURNING on a table of its own.
 *
 * Bursts (--bursts per server, after its pairs): --burst claims
 * sent at once, each with a lease of a new recorded step of its own, in a
 * shuffled order, against as many claims of leases already durable: the
 * first send to the last ACQUIRED. A data directory writes once per claim
 * that raises (in arrival order); a coordinated active has one raise in
 * flight at a time and asks for the largest lease waiting when it lands.
 *
 * Usage: bun bench/lease-raise.ts [--samples 300] [--batch 100] [--burst 16] [--bursts 4]
 *        [--only data-dir,coordinator] [--coordinator-lease 4s]
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { ChildServer } from "../test/fixtures/ops-child.ts";
import { freePort, Postgres } from "../test/coordinator/pg.ts";
import { WirePeer } from "../test/helpers/wire.ts";
import { FrameType, MAX_LEASE_MS } from "../src/protocol/index.ts";
import { writeLeases } from "../src/tokens/leases.ts";
import { summarize, table } from "./lib/stats.ts";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const SAMPLES = Number(args.get("samples") ?? 300);
const BATCH = Number(args.get("batch") ?? 100);
const ONLY = new Set((args.get("only") ?? "data-dir,coordinator").split(","));
const COORDINATOR_LEASE = args.get("coordinator-lease") ?? "4s";
const BURST = Number(args.get("burst") ?? 16);
const BURSTS = Number(args.get("bursts") ?? 4);
if (!(SAMPLES >= 1) || !(BATCH >= 1) || BATCH > 120 || !(BURST >= 1) || !(BURSTS >= 0)) throw new Error("--samples >= 1, --batch 1..120, --burst >= 1, --bursts >= 0");

/** A lease as the server records it: rounded up to one of eight steps per power of two (core/delay.ts roundLease). */
function recorded(leaseMs: number): number {
  if (leaseMs <= 8) return Math.ceil(leaseMs);
  const step = 2 ** (Math.floor(Math.log2(leaseMs)) - 3);
  return Math.ceil(leaseMs / step) * step;
}

let serial = 0;

/** One claim of a fresh name with `leaseMs`: ACQUIRE to ACQUIRED (ms), on a connection opened before. */
async function grantOnce(port: number, leaseMs: number): Promise<number> {
  const peer = await WirePeer.connect(port);
  try {
    await Bun.sleep(1);
    const asked = performance.now();
    peer.acquire(`raise-${++serial}`, leaseMs);
    const frame = await peer.frame(0, 10_000);
    if (frame.type !== FrameType.ACQUIRED) throw new Error(`not granted: ${peer.describe()}`);
    return frame.at - asked;
  } finally {
    peer.end();
    await peer.closed();
  }
}

interface Mode {
  readonly name: string;
  /** Start a fresh server; its port and a check, after the batch, of the largest lease it holds durably. */
  start(batch: number): Promise<{ port: number; durable: () => Promise<number>; stop: () => Promise<void> }>;
  /** The bare operation, timed in this process (ms). */
  floor(i: number): Promise<number>;
  readonly floorName: string;
  close(): Promise<void>;
}

function serve(port: number, extra: readonly string[], env: Record<string, string> = {}): ChildServer {
  return ChildServer.spawn(["serve", "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--log-level", "info", ...extra], env);
}

function dataDirMode(): Mode {
  const scratch = mkdtempSync(join(tmpdir(), "lockd-raise-floor-"));
  return {
    name: "data-dir (single server)",
    floorName: "writeLeases() here: write, fsync, rename, fsync dir",
    async start() {
      const port = await freePort();
      const server = serve(port, []);
      await server.line("lockd listening", 30_000);
      return {
        port,
        durable: async () => {
          const text = readFileSync(join(server.dataDir, "leases"), "utf8");
          return Number(JSON.parse(/^lockd-leases v1 (.*) crc=/s.exec(text)![1]!).maxLeaseMs);
        },
        stop: () => server[Symbol.asyncDispose](),
      };
    },
    async floor(i) {
      const started = performance.now();
      writeLeases(scratch, { maxLeaseMs: i, carryLeaseMs: 0, clean: false, held: null });
      return performance.now() - started;
    },
    async close() {
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}

async function coordinatorMode(pg: Postgres): Promise<Mode> {
  const sql = pg.client();
  await sql.unsafe("CREATE TABLE bench_raise (id INT PRIMARY KEY, v BIGINT NOT NULL)");
  await sql.unsafe("INSERT INTO bench_raise VALUES (1, 0)");
  return {
    name: `coordinator (active, lease ${COORDINATOR_LEASE})`,
    floorName: "UPDATE ... GREATEST ... RETURNING from here",
    async start(batch) {
      const port = await freePort();
      const service = `bench-raise-${process.pid}-${batch}`;
      const server = serve(port, ["--service", service, "--coordinator-lease", COORDINATOR_LEASE], { LOCKD_COORDINATOR: pg.url() });
      await server.line("active: listening", 30_000);
      return {
        port,
        durable: async () => {
          const rows = (await sql.unsafe("SELECT lease_max_ms FROM lockd_coordinator WHERE service = $1", [service])) as { lease_max_ms: string }[];
          return Number(rows[0]?.lease_max_ms ?? NaN);
        },
        stop: () => server[Symbol.asyncDispose](),
      };
    },
    async floor(i) {
      const started = performance.now();
      await sql.unsafe("UPDATE bench_raise SET v = GREATEST(v, $1) WHERE id = 1 RETURNING v", [i]);
      return performance.now() - started;
    },
    async close() {
      await sql.close();
    },
  };
}

async function measure(mode: Mode): Promise<{ pairs: string[]; bursts: string[] }> {
  const raise: number[] = [];
  const covered: number[] = [];
  const burstRaise: number[] = [];
  const burstCovered: number[] = [];
  const floor: number[] = [];
  for (let batch = 0; raise.length < SAMPLES; batch++) {
    const server = await mode.start(batch);
    try {
      // Warm-up: the first token block, the connection path, and a first raise to 1024 ms (1000 rounded up).
      for (let i = 0; i < 20; i++) await grantOnce(server.port, 1000);
      for (let i = 0; i < 10; i++) await mode.floor(i);
      let lease = 1100;
      let last = 0;
      const n = Math.min(BATCH, SAMPLES - raise.length);
      for (let i = 0; i < n; i++) {
        // Alternate the order (covered first: a grant of the last raised lease, durable already), so that
        // neither kind always follows the other (a grant just after an fsync or a statement may pay for it).
        if (i % 2 === 0) {
          raise.push(await grantOnce(server.port, lease));
          covered.push(await grantOnce(server.port, lease));
        } else {
          covered.push(await grantOnce(server.port, last));
          raise.push(await grantOnce(server.port, lease));
        }
        floor.push(await mode.floor(lease));
        await Bun.sleep(2);
        last = lease;
        lease = recorded(lease) + 1; // the next recorded step: not covered
      }
      let durable = await server.durable();
      if (durable !== recorded(last)) throw new Error(`${mode.name}: durable largest lease ${durable}, expected ${recorded(last)}`);
      process.stdout.write(`  ${mode.name}, batch ${batch + 1}: ${n} raises, leases 1100 .. ${last} ms, durable ${durable} ms\n`);
      // Bursts: BURST claims sent at once, each with a lease of its own new recorded step (shuffled), against
      // BURST claims of leases already durable; alternating which goes first.
      let coveredLeases = Array.from({ length: BURST }, () => last);
      for (let b = 0; b < BURSTS; b++) {
        const fresh: number[] = [];
        for (let i = 0; i < BURST; i++) {
          fresh.push(lease);
          lease = recorded(lease) + 1;
        }
        if (recorded(fresh[fresh.length - 1]!) > MAX_LEASE_MS) break;
        shuffle(fresh);
        if (b % 2 === 0) {
          burstRaise.push(await burstOnce(server.port, fresh));
          burstCovered.push(await burstOnce(server.port, fresh));
        } else {
          burstCovered.push(await burstOnce(server.port, coveredLeases));
          burstRaise.push(await burstOnce(server.port, fresh));
        }
        coveredLeases = fresh;
        await Bun.sleep(2);
      }
      durable = await server.durable();
      process.stdout.write(`  ${mode.name}, batch ${batch + 1}: ${burstRaise.length} bursts so far of ${BURST} new leases, durable ${durable} ms\n`);
    } finally {
      await server.stop();
    }
  }
  const r = summarize(raise);
  const c = summarize(covered);
  const f = summarize(floor);
  const us = (ms: number): string => (ms * 1000).toFixed(0);
  const br = summarize(burstRaise);
  const bc = summarize(burstCovered);
  return {
    pairs: [mode.name, String(r.n), us(c.p50), us(c.p99), us(r.p50), us(r.p99), `${(r.p50 / c.p50).toFixed(2)}x`, `${(r.p99 / c.p99).toFixed(2)}x`, us(r.p50 - c.p50), `${us(f.p50)} / ${us(f.p99)}`, mode.floorName],
    bursts: [mode.name, String(br.n), us(bc.p50), us(br.p50), `${(br.p50 / bc.p50).toFixed(2)}x`, us(Math.max(...burstCovered)), us(Math.max(...burstRaise))],
  };
}

function shuffle(xs: number[]): void {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
}

/** Claims of fresh names, one per lease, sent at once on connections opened before: the first send to the last ACQUIRED (ms). */
async function burstOnce(port: number, leases: readonly number[]): Promise<number> {
  const peers = await Promise.all(leases.map(() => WirePeer.connect(port)));
  try {
    await Bun.sleep(1);
    const asked = performance.now();
    peers.forEach((peer, i) => peer.acquire(`burst-${++serial}`, leases[i]!));
    let last = 0;
    for (const peer of peers) {
      const frame = await peer.frame(0, 10_000);
      if (frame.type !== FrameType.ACQUIRED) throw new Error(`not granted: ${peer.describe()}`);
      if (frame.at > last) last = frame.at;
    }
    return last - asked;
  } finally {
    for (const peer of peers) peer.end();
    await Promise.all(peers.map((peer) => peer.closed()));
  }
}

const load = loadavg();
console.log(`lease-raise bench: ${new Date().toISOString()}, load average ${load.map((x) => x.toFixed(2)).join(" ")}`);
const rows: string[][] = [];
const bursts: string[][] = [];
if (ONLY.has("data-dir")) {
  const mode = dataDirMode();
  try {
    const got = await measure(mode);
    rows.push(got.pairs);
    bursts.push(got.bursts);
  } finally {
    await mode.close();
  }
}
if (ONLY.has("coordinator")) {
  await using pg = await Postgres.start();
  const mode = await coordinatorMode(pg);
  try {
    const got = await measure(mode);
    rows.push(got.pairs);
    bursts.push(got.bursts);
  } finally {
    await mode.close();
  }
}
console.log("\nACQUIRE -> ACQUIRED (µs, loopback): a grant whose lease raises the durable largest lease vs a covered grant of the same lease, interleaved");
console.log(table(["server", "pairs", "covered p50", "covered p99", "raise p50", "raise p99", "p50 ratio", "p99 ratio", "raise - covered p50", "bare op p50 / p99", "bare op"], rows));
console.log(`\nBursts of ${BURST} claims sent at once (µs, first ACQUIRE -> last ACQUIRED): each with a new largest lease (shuffled) vs leases already durable`);
console.log(table(["server", "bursts", "covered p50", "new leases p50", "ratio", "covered max", "new leases max"], bursts));
console.log(`done; load average ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
