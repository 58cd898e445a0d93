/**
 * Core-only scale run: the sans-I/O Engine (src/core) with a million
 * simulated sessions on a virtual clock, and a EngineOutput that drops every
 * frame. No sockets, so this measures what the core costs per session, per
 * heartbeat and per tick, and nothing of Bun's networking.
 *
 * 1. Memory per session: JS heap after a full GC, before and after opening
 *    the sessions (each with its own lock, so each is an owner with its own
 *    ACQUIRED reply frame: the most a session costs the core), and again
 *    after they all leave.
 * 2. A heartbeat (engine.frame) against a floor: the least any server does
 *    per heartbeat (store a time, hand a reply to the transport).
 * 3. Steady state: every session heartbeating every lease/4 of virtual time,
 *    with a tick every virtual ms, as the server's timer would run it.
 * 4. The wheel's work per tick follows the entries due, not the total: the
 *    cost of the tick at which 1,000 sessions expire, with 10^3 and then
 *    10^6 other live sessions whose deadlines are far away.
 *
 * Usage: bun bench/core-scale.ts [--sessions 1000000]
 */
import { heapStats } from "bun:jsc";
import { Engine, type Session, type EngineOutput } from "../src/core/index.ts";
import { ErrorCode, FrameType, HEARTBEAT_FRAME, encodeAcquire } from "../src/protocol/index.ts";
import { pct, sorted, table } from "./lib/stats.ts";

const argIndex = process.argv.indexOf("--sessions");
const N = argIndex > 0 ? Number(process.argv[argIndex + 1]) : 1_000_000;

class DropTransport implements EngineOutput<number> {
  sent = 0;
  closed = 0;
  send(): void {
    this.sent++;
  }
  close(): void {
    this.closed++;
  }
}

function heap(): number {
  Bun.gc(true);
  return heapStats().heapSize;
}

function acquire(engine: Engine<number>, conn: number, name: string, leaseMs: number, now: number): Session<number> {
  const session = engine.open(conn, now)!;
  const frame = encodeAcquire({ name, leaseMs, owner: "", try: false });
  engine.frame(session, FrameType.ACQUIRE, frame, 4, frame.length - 4, now);
  return session;
}

const rows: string[][] = [];
const transport = new DropTransport();
let now = 0;
const engine = new Engine<number>(transport, { ioTimeoutMs: 5000 }, now);

// 1. Memory per session.
const LEASE = 1000;
const heap0 = heap();
const sessions: Session<number>[] = new Array(N);
const t0 = performance.now();
for (let i = 0; i < N; i++) sessions[i] = acquire(engine, i, `lock/${i}`, LEASE, now);
const openMs = performance.now() - t0;
const heap1 = heap();
// The array of handles is the bench's, not the engine's: 8 bytes a session.
const perSession = (heap1 - heap0 - N * 8) / N;
rows.push(["JS heap per session (session + lock + name + reply frame)", `${perSession.toFixed(0)} B`, "budget 1 KiB (design 4; there incl. Bun's socket)"]);
rows.push(["open + ACQUIRE, per session", `${((openMs / N) * 1e6).toFixed(0)} ns`, `${N} sessions in ${(openMs / 1000).toFixed(2)} s`]);

// 2. A heartbeat against its floor, over every session, several passes.
const hb = HEARTBEAT_FRAME;
const floorTimes: number[] = [];
const hbTimes: number[] = [];
for (let pass = 0; pass < 5; pass++) {
  now += 1;
  let t = performance.now();
  for (let i = 0; i < N; i++) {
    const s = sessions[i]!;
    s.lastSeen = now; // the floor: store the time and hand a reply to the transport
    transport.send();
  }
  floorTimes.push(((performance.now() - t) / N) * 1e6);
  t = performance.now();
  for (let i = 0; i < N; i++) engine.frame(sessions[i]!, FrameType.HEARTBEAT, hb, 4, 0, now);
  hbTimes.push(((performance.now() - t) / N) * 1e6);
}
const hbFloor = pct(sorted(floorTimes), 50);
const hbCost = pct(sorted(hbTimes), 50);
rows.push(["heartbeat (engine.frame), median of 5 passes", `${hbCost.toFixed(1)} ns`, `floor ${hbFloor.toFixed(1)} ns (store + send): ${(hbCost / hbFloor).toFixed(2)}x`]);

// 3. Steady state: heartbeats every LEASE/4 (spread evenly), a tick every ms, 2 s of virtual time.
{
  const interval = LEASE / 4;
  const perMs = N / interval;
  let tickMs = 0;
  let beatMs = 0;
  let ticks = 0;
  const refiled0 = engine.wheel.refiled;
  const ended0 = engine.stats.ends[ErrorCode.LEASE_EXPIRED]!;
  for (let ms = 0; ms < 2000; ms++) {
    now += 1;
    const from = Math.floor((ms % interval) * perMs);
    const to = Math.floor(((ms % interval) + 1) * perMs);
    let t = performance.now();
    for (let i = from; i < to; i++) engine.frame(sessions[i]!, FrameType.HEARTBEAT, hb, 4, 0, now);
    beatMs += performance.now() - t;
    t = performance.now();
    engine.tick(now);
    tickMs += performance.now() - t;
    ticks++;
  }
  const refiles = engine.wheel.refiled - refiled0;
  const expired = engine.stats.ends[ErrorCode.LEASE_EXPIRED]! - ended0;
  if (expired !== 0) throw new Error(`${expired} sessions expired while heartbeating`);
  rows.push([
    `steady state: ${N} sessions, lease ${LEASE} ms, heartbeat every ${interval} ms`,
    `${((tickMs / ticks) * 1000).toFixed(0)} us per 1 ms tick`,
    `${(refiles / ticks).toFixed(0)} refiles per tick; heartbeats ${((beatMs / (perMs * ticks)) * 1e6).toFixed(0)} ns each; 0 expired; the core's whole load ${(((tickMs + beatMs) / ticks) * 100).toFixed(1)}% of a core`,
  ]);
}

// 1b. Memory returns when the sessions leave.
const closeT = performance.now();
for (let i = 0; i < N; i++) engine.closed(sessions[i]!, now);
const closeMs = performance.now() - closeT;
sessions.length = 0;
const heap2 = heap();
rows.push(["close (peer gone), per session", `${((closeMs / N) * 1e6).toFixed(0)} ns`, `live sessions after: ${engine.sessions.size}, locks: ${engine.locks.size}`]);
rows.push(["JS heap after all left, vs before", `${((heap2 - heap0) / 1024 / 1024).toFixed(1)} MiB`, `was ${((heap1 - heap0) / 1024 / 1024).toFixed(0)} MiB at ${N} sessions`]);

// 4. Work per tick follows the due entries, not the total.
interface TickCost {
  tickUs: number;
  emptyUs: number;
  cascaded: number;
  handled: number;
}

/** With `background` live far-deadline sessions, the median cost of the tick at which each of `dues` sessions expire. */
function dueTicks(background: number, dues: readonly number[], repeats: number): TickCost[] {
  const t = new DropTransport();
  let clock = 0;
  const e = new Engine<number>(t, { ioTimeoutMs: 1e9 }, clock);
  for (let i = 0; i < background; i++) acquire(e, i, `far/${i}`, 1e9, clock); // far deadlines
  let next = background;
  return dues.map((due) => {
    const tickTimes: number[] = [];
    const emptyTimes: number[] = [];
    let cascaded = 0;
    let handled = 0;
    for (let r = 0; r < repeats; r++) {
      const expiresAt = clock + 100;
      for (let i = 0; i < due; i++) acquire(e, next++, `due/${next}`, 100, clock);
      e.tick(expiresAt - 1); // everything before the due tick (cascades included)
      let s = performance.now();
      e.tick(expiresAt - 0.5); // a tick with nothing due
      emptyTimes.push((performance.now() - s) * 1000);
      const c0 = e.wheel.cascaded;
      const r0 = e.wheel.refiled;
      const ended0 = e.stats.ends[ErrorCode.LEASE_EXPIRED]!;
      s = performance.now();
      e.tick(expiresAt);
      tickTimes.push((performance.now() - s) * 1000);
      cascaded += e.wheel.cascaded - c0;
      handled += e.stats.ends[ErrorCode.LEASE_EXPIRED]! - ended0 + e.wheel.refiled - r0;
      if (e.stats.ends[ErrorCode.LEASE_EXPIRED]! - ended0 !== due) throw new Error(`expected ${due} expiries at the due tick`);
      clock = expiresAt + 37; // off the 256-tick cascade grid so each repeat meets a different slot
      e.tick(clock);
    }
    return { tickUs: pct(sorted(tickTimes), 50), emptyUs: pct(sorted(emptyTimes), 50), cascaded: cascaded / repeats, handled: handled / repeats };
  });
}
const DUES = [100, 1000, 10_000] as const;
const small = dueTicks(1_000, DUES, 15);
const large = dueTicks(N, DUES, 15);
for (let i = 0; i < DUES.length; i++) {
  for (const [label, cost] of [["10^3", small[i]!], [N.toExponential(0), large[i]!]] as const) {
    rows.push([
      `tick with ${DUES[i]} expiring, ${label} others live`,
      `${cost.tickUs.toFixed(0)} us`,
      `${((cost.tickUs / DUES[i]!) * 1000).toFixed(0)} ns per due entry; entries handed out ${cost.handled.toFixed(0)}, cascaded ${cost.cascaded.toFixed(0)}; empty tick ${cost.emptyUs.toFixed(1)} us`,
    ]);
  }
}

console.log(`\nCore-only scale run (src/core Engine, drop-everything EngineOutput, virtual clock), ${N} sessions\n`);
console.log(table(["measure", "value", "beside it"], rows));
