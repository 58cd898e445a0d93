/**
 * What the operator's page (/ui) costs the event loop every lock session
 * shares, against the /v1/locks listing over the same lock table.
 *
 * One process: a sans-I/O Engine holding --locks locks (every tenth with
 * three waiters), a real OpsServer on 127.0.0.1:0 over it (default limits:
 * scanSlice 16,384), and a heartbeating peer: a loopback TCP connection
 * that keeps one 4-byte frame in flight to an echo on the same loop as fast
 * as it comes back (a closed loop). Every session's conn is the echo's
 * server-side socket, so the views read a real Bun socket's address as they
 * do in lockd serve.
 *
 * Each round, in turn (each case starts more than the board's interval
 * after the last board request, so every board case builds a new snapshot):
 *
 * - listing (the baseline): GET /v1/locks, the first page of 1000 locks;
 * - board: GET /ui/v1/board?sort=wait&dir=desc&limit=500, one page polling;
 * - board x8: eight GET /ui/v1/board with different queries at once (eight
 *   pages open with different filters share one snapshot but build eight
 *   views).
 *
 * For each: the time until every answer arrived, and the longest round trip
 * the heartbeating peer saw meanwhile (the longest stall of the loop: a lock
 * session's heartbeat waits as long). Reported per case as the median and
 * the worst over the rounds, and as ratios to the listing of the same run.
 * "quiet" is the peer alone, for scale.
 *
 * Usage: bun bench/ops-ui.ts [--locks 100000] [--rounds 6]
 */
import type { Socket } from "bun";
import { Engine, SessionState, type EngineOutput } from "../src/core/index.ts";
import { FrameType, encodeAcquire } from "../src/protocol/index.ts";
import { Logger } from "../src/log/logger.ts";
import { AdminAuth } from "../src/ops/admin.ts";
import type { Conn } from "../src/server/conn.ts";
import { OpsServer } from "../src/ops/server.ts";
import { EngineLocks } from "../src/server/locks.ts";
import { pct, sorted, table } from "./lib/stats.ts";

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}
const LOCKS = arg("--locks", 100_000);
const ROUNDS = arg("--rounds", 6);
const err = (line: string) => process.stderr.write(`${line}\n`);

// The heartbeating peer: an echo and a client on one loopback connection.
let echoSide: Socket<undefined> | null = null;
const listener = Bun.listen({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    open(socket) {
      echoSide = socket;
    },
    data(socket, chunk) {
      socket.write(chunk);
    },
  },
});
const FRAME = new Uint8Array([FrameType.HEARTBEAT, 0, 0, 0]);
let sentAt = 0;
/** The longest round trip since the last reset. */
let worst = 0;
const client = await Bun.connect({
  hostname: "127.0.0.1",
  port: listener.port,
  socket: {
    data(socket) {
      const now = performance.now();
      worst = Math.max(worst, now - sentAt);
      sentAt = now;
      socket.write(FRAME);
    },
  },
});
while (echoSide === null) await new Promise((r) => setImmediate(r));

// The lock table.
class DropTransport implements EngineOutput<Conn> {
  send(): void {}
  close(): void {}
}
const engine = new Engine<Conn>(new DropTransport(), { ioTimeoutMs: 5000 }, performance.now());
const conn = { socket: echoSide } as unknown as Conn;
function acquire(name: string, owner: string): void {
  const now = performance.now();
  const session = engine.open(conn, now)!;
  const frame = encodeAcquire({ name, leaseMs: 3_600_000, owner, try: false });
  engine.frame(session, FrameType.ACQUIRE, frame, 4, frame.length - 4, now);
}
for (let i = 0; i < LOCKS; i++) {
  const name = `svc-${i % 97}/shard-${i}/leader`;
  acquire(name, `worker-${i}`);
  if (i % 10 === 0) for (let w = 0; w < 3; w++) acquire(name, `standby-${i}-${w}`);
}

const ops = new OpsServer({
  hostname: "127.0.0.1",
  port: 0,
  locks: new EngineLocks(engine),
  auth: new AdminAuth(null),
  log: new Logger("error", () => {}),
  version: "bench",
  isReady: () => true,
});
const base = `http://127.0.0.1:${ops.port}`;

async function get(path: string): Promise<number> {
  const response = await fetch(base + path);
  const bytes = (await response.arrayBuffer()).byteLength;
  if (response.status !== 200) throw new Error(`${path}: ${response.status}`);
  return bytes;
}

const CASES: Record<string, string[]> = {
  listing: ["/v1/locks"],
  board: ["/ui/v1/board?sort=wait&dir=desc&limit=500"],
  "board x8": [
    "/ui/v1/board?sort=wait&dir=desc&limit=500",
    "/ui/v1/board?sort=name&limit=500",
    "/ui/v1/board?sort=held&dir=desc&limit=200",
    "/ui/v1/board?sort=waiting&dir=desc&limit=500",
    "/ui/v1/board?prefix=svc-1&limit=500",
    "/ui/v1/board?prefix=svc-2&sort=held&limit=500",
    "/ui/v1/board?prefix=svc-3&sort=name&dir=desc&limit=500",
    "/ui/v1/board?prefix=svc-9&sort=waiting&limit=500",
  ],
};

const results = new Map<string, { stall: number[]; total: number[] }>();
for (const name of ["quiet", ...Object.keys(CASES)]) results.set(name, { stall: [], total: [] });

async function settle(ms: number): Promise<void> {
  Bun.gc(true);
  await Bun.sleep(ms);
}

// The peer starts; one warm-up of each case, unrecorded.
sentAt = performance.now();
client.write(FRAME);
for (const paths of Object.values(CASES)) {
  await Promise.all(paths.map(get));
  await settle(1100);
}

err(`${LOCKS} locks, ${engine.stats.states[SessionState.WAITING]} waiting; ${ROUNDS} rounds`);
for (let round = 0; round < ROUNDS; round++) {
  worst = 0;
  const quietStart = performance.now();
  await Bun.sleep(200);
  results.get("quiet")!.stall.push(worst);
  results.get("quiet")!.total.push(performance.now() - quietStart);
  for (const [name, paths] of Object.entries(CASES)) {
    await settle(1100);
    worst = 0;
    const start = performance.now();
    await Promise.all(paths.map(get));
    const r = results.get(name)!;
    r.total.push(performance.now() - start);
    r.stall.push(worst);
  }
  err(`round ${round + 1}: ${[...results].map(([n, r]) => `${n} ${r.stall.at(-1)!.toFixed(1)}/${r.total.at(-1)!.toFixed(1)} ms`).join(", ")}`);
}

const median = (values: number[]) => pct(sorted(values), 50);
const worstOf = (values: number[]) => Math.max(...values);
const base0 = results.get("listing")!;
const rows = [...results].map(([name, r]) => [
  name,
  median(r.stall).toFixed(1),
  worstOf(r.stall).toFixed(1),
  median(r.total).toFixed(1),
  name === "quiet" ? "-" : `${(median(r.stall) / median(base0.stall)).toFixed(2)}x`,
  name === "quiet" ? "-" : `${(median(r.total) / median(base0.total)).toFixed(2)}x`,
]);
console.log(`${LOCKS} locks (${engine.stats.states[SessionState.WAITING]} waiters), ${ROUNDS} rounds, Bun ${Bun.version}`);
console.log(table(["case", "stall p50 ms", "stall max ms", "answered p50 ms", "stall / listing", "answered / listing"], rows));

client.end();
await ops.stop();
listener.stop(true);
process.exit(0);
