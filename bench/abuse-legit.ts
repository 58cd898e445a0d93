/**
 * The legitimate side of bench/abuse.ts, in a process of its own, connecting
 * from its own loopback source address (so a per-source limit aimed at the
 * attacker does not count it):
 *
 * - holders: one LockClient (the real client library, src/client) holding
 *   one lock per lease given, heartbeating on the library's own schedule.
 *   Every loss is recorded with its reason (LEASE_EXPIRED from the server,
 *   the client's own 0.8 x lease rule, a close) and the phase it happened
 *   in; the holder then claims its lock again.
 * - prober: at a steady rate (an open loop: a probe is started on time even
 *   if earlier ones have not answered), a fresh connection that sends
 *   ACQUIRE for a lock nobody holds and is timed from connect to ACQUIRED,
 *   and a GET /readyz on a fresh connection, timed to the end of the answer.
 *   A probe that has no answer after the probe timeout counts as a failure
 *   and as a sample at the timeout (a lower bound).
 *
 * Requests (bench IPC): `phase` {name} labels the probes and losses from now
 * on; `settle` waits (bounded) for the probes in flight; `report` returns
 * everything per phase; `stop` releases the holders' locks.
 *
 * Usage: bun bench/abuse-legit.ts <port> <opsPort> <source> <leases,ms> <probesPerSec> <probeTimeoutMs> <lifetimeMs> [serverPid:dataDir]
 */
import type { Socket } from "node:net";
import { LockClient, LockLostError, type Lock } from "../src/client/index.ts";
import { FrameReader, FrameType, encodeAcquire, errorCodeName, type FrameSink } from "../src/protocol/index.ts";
import { ready, serveRequests } from "./lib/child.ts";
import { connectFrom, httpGet, sourceConnector } from "./lib/net-source.ts";
import { exitWithBench } from "./lib/orphan.ts";
import { SERVER_LIMITS } from "./lib/peer.ts";
import { summarize } from "./lib/stats.ts";

const [portArg, opsPortArg, source = "127.0.0.2", leasesArg = "1000,5000", rateArg = "20", timeoutArg = "10000", lifetimeArg = "600000", serverArg = ""] = process.argv.slice(2);
const PORT = Number(portArg);
const OPS_PORT = Number(opsPortArg);
const LEASES = leasesArg.split(",").map(Number);
const PROBES_PER_SEC = Number(rateArg);
const PROBE_TIMEOUT_MS = Number(timeoutArg);
/** Most probes of each kind in flight at once (the open loop's bound). */
const MAX_IN_FLIGHT = 500;

// Bounded lifetime, whatever the parent does.
exitWithBench(Number(lifetimeArg), serverArg);

interface PhaseStats {
  acquire: number[];
  acquireFailures: Record<string, number>;
  readyz: number[];
  readyzFailures: Record<string, number>;
  skipped: number;
  losses: { lease: number; why: string; code: string; heldMs: number }[];
  /** The longest this process's own event loop was late (a 20 ms timer): a stall here is the machine's, not the server's. */
  maxLagMs: number;
}

const phases = new Map<string, PhaseStats>();
let phase = "setup";
const stats = (name: string): PhaseStats => {
  let s = phases.get(name);
  if (s === undefined) phases.set(name, (s = { acquire: [], acquireFailures: {}, readyz: [], readyzFailures: {}, skipped: 0, losses: [], maxLagMs: 0 }));
  return s;
};
const bump = (counts: Record<string, number>, key: string) => (counts[key] = (counts[key] ?? 0) + 1);

// --- holders -------------------------------------------------------------------

let running = true;
const client = new LockClient({ servers: `127.0.0.1:${PORT}`, owner: "abuse-holder", connect: sourceConnector(source) });
const held: (Lock | null)[] = LEASES.map(() => null);
let holdersUp = 0;

async function hold(index: number, leaseMs: number, first: () => void): Promise<void> {
  let firstDone = false;
  for (let claims = 0; running && claims < 10_000; claims++) {
    let lock: Lock;
    try {
      lock = await client.acquire(`abuse/holder/${process.pid}/${index}`, { lease: leaseMs, wait: 60_000 });
    } catch (error) {
      stats(phase).losses.push({ lease: leaseMs, why: "claim failed", code: (error as Error).message, heldMs: 0 });
      await Bun.sleep(100);
      continue;
    }
    held[index] = lock;
    if (!firstDone) {
      firstDone = true;
      first();
    }
    const since = performance.now();
    const reason = await new Promise<unknown>((resolve) => {
      if (lock.signal.aborted) resolve(lock.signal.reason);
      else lock.signal.addEventListener("abort", () => resolve(lock.signal.reason), { once: true });
    });
    held[index] = null;
    if (!running) return;
    const lost = reason instanceof LockLostError ? reason : null;
    if (lost?.why === "released") return;
    const code = lost?.serverCode !== undefined ? errorCodeName(lost.serverCode) : "";
    stats(phase).losses.push({ lease: leaseMs, why: lost?.why ?? String(reason), code, heldMs: performance.now() - since });
  }
}

// --- prober --------------------------------------------------------------------

let acquireInFlight = 0;
let readyzInFlight = 0;
let probeSeq = 0;

class ProbeSink implements FrameSink {
  result: "granted" | string | null = null;
  onFrame(type: number, _flags: number, bytes: Uint8Array, offset: number): boolean {
    if (type === FrameType.ACQUIRED) this.result = "granted";
    else if (type === FrameType.ERROR) this.result = errorCodeName(bytes[offset]!);
    else if (type === FrameType.WAITING) this.result = "WAITING"; // nobody else uses the name: not expected
    return false;
  }
}

function probeAcquire(): void {
  const s = stats(phase);
  if (acquireInFlight >= MAX_IN_FLIGHT) {
    s.skipped++;
    return;
  }
  acquireInFlight++;
  const start = performance.now();
  const frame = encodeAcquire({ name: `abuse/probe/${process.pid}/${probeSeq++}`, leaseMs: 10_000, owner: "abuse-prober", try: false });
  let socket: Socket | null = null;
  let settled = false;
  const settle = (outcome: string) => {
    if (settled) return;
    settled = true;
    acquireInFlight--;
    clearTimeout(timer);
    socket?.destroy();
    if (outcome === "granted") s.acquire.push(performance.now() - start);
    else {
      bump(s.acquireFailures, outcome);
      if (outcome === "timeout") s.acquire.push(PROBE_TIMEOUT_MS);
    }
  };
  const timer = setTimeout(() => settle("timeout"), PROBE_TIMEOUT_MS);
  connectFrom(source, PORT, PROBE_TIMEOUT_MS).then(
    (connected) => {
      socket = connected;
      if (settled) return void connected.destroy();
      const reader = new FrameReader(SERVER_LIMITS);
      const sink = new ProbeSink();
      connected.on("data", (chunk: Buffer) => {
        reader.push(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length), sink);
        if (sink.result !== null) settle(sink.result);
      });
      connected.on("error", (error: Error & { code?: string }) => settle(error.code ?? "socket error"));
      connected.on("close", () => settle("closed without an answer"));
      connected.write(frame);
    },
    (error: Error & { code?: string }) => settle(error.message.startsWith("connect timed out") ? "timeout" : `connect ${error.code ?? error.message}`),
  );
}

function probeReadyz(): void {
  const s = stats(phase);
  if (readyzInFlight >= MAX_IN_FLIGHT) {
    s.skipped++;
    return;
  }
  readyzInFlight++;
  const start = performance.now();
  void httpGet(source, OPS_PORT, "/readyz", PROBE_TIMEOUT_MS).then((result) => {
    readyzInFlight--;
    if (result.status === 200) s.readyz.push(performance.now() - start);
    else {
      bump(s.readyzFailures, result.status === 0 ? result.error ?? "failed" : `HTTP ${result.status}`);
      if (result.error === "timeout") s.readyz.push(PROBE_TIMEOUT_MS);
    }
  });
}

// Open loop on absolute times, so a late timer catches up instead of thinning the probes.
const probeStart = performance.now();
let probesSent = 0;
function probeTick(): void {
  if (!running) return;
  const due = Math.floor(((performance.now() - probeStart) * PROBES_PER_SEC) / 1000);
  // A stall of this process (not the server's) would release a burst: cap it.
  for (let n = 0; probesSent < due && n < 50; n++, probesSent++) {
    probeAcquire();
    probeReadyz();
  }
  probesSent = Math.max(probesSent, due - 50);
  setTimeout(probeTick, Math.max(1, probeStart + ((probesSent + 1) * 1000) / PROBES_PER_SEC - performance.now()));
}

// This process's own lateness: a holder that loses its lock while this is
// large may have been kept off the CPU itself (2 shared cores), not kept
// waiting by the server.
const LAG_TICK_MS = 20;
let lagDue = performance.now() + LAG_TICK_MS;
setInterval(() => {
  const now = performance.now();
  const s = stats(phase);
  s.maxLagMs = Math.max(s.maxLagMs, now - lagDue);
  lagDue = now + LAG_TICK_MS;
}, LAG_TICK_MS);

// --- IPC -----------------------------------------------------------------------

function summary(s: PhaseStats) {
  return {
    acquire: summarize(s.acquire),
    acquireFailures: s.acquireFailures,
    readyz: summarize(s.readyz),
    readyzFailures: s.readyzFailures,
    skipped: s.skipped,
    losses: s.losses,
    maxLagMs: s.maxLagMs,
  };
}

serveRequests({
  phase(request) {
    phase = String(request.name);
    stats(phase);
    return { ok: true, inFlight: acquireInFlight + readyzInFlight };
  },
  async settle(request) {
    // Wait (bounded) until every probe started so far has an answer or has timed out.
    const deadline = performance.now() + Number(request.ms ?? PROBE_TIMEOUT_MS + 1000);
    while ((acquireInFlight > 0 || readyzInFlight > 0) && performance.now() < deadline) await Bun.sleep(20);
    return { inFlight: acquireInFlight + readyzInFlight };
  },
  report() {
    return { phases: Object.fromEntries([...phases].map(([name, s]) => [name, summary(s)])), holding: held.filter((l) => l !== null).length };
  },
  async stop() {
    running = false;
    await Promise.all(held.map((lock) => lock?.release()));
    return { ok: true };
  },
});

// Ready once every holder holds its lock (bounded by the claim's wait).
await new Promise<void>((resolve) => {
  if (LEASES.length === 0) resolve();
  LEASES.forEach((lease, i) => void hold(i, lease, () => ++holdersUp === LEASES.length && resolve()));
});
probeTick();
ready({ holders: holdersUp });
