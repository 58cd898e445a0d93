/**
 * Micro benchmarks of the hot paths, with mitata. Each figure is printed
 * beside a baseline measured in the same run, and as a ratio to it:
 *
 * - FrameReader on chunk sizes from 1 B to 64 KiB, against a bare loop that
 *   walks the same frames in one piece (the least any frame splitter does).
 * - Encoders and the ACQUIRE decoder, against allocating a Uint8Array of the
 *   same size (the least an allocating encoder does).
 * - The timer wheel at 10^3..10^6 live entries (arm + cancel, an empty tick,
 *   expiring entries), against a binary heap doing the same.
 *
 * Usage: bun bench/micro.ts [--quick]
 */
import { do_not_optimize, measure } from "mitata";
import { TimerWheel, type WheelEntry, type WheelOwner } from "../src/core/wheel.ts";
import {
  CLIENT_FRAMES,
  ErrorCode,
  FLAG_REPLY,
  FrameLimits,
  FrameReader,
  HEARTBEAT_FRAME,
  decodeAcquire,
  encodeAcquire,
  encodeAcquired,
  encodeError,
  writeToken,
  type FrameSink,
} from "../src/protocol/index.ts";
import { DeadlineHeap, type HeapEntry } from "./lib/heap.ts";
import { table } from "./lib/stats.ts";

const QUICK = process.argv.includes("--quick");
const OPTS = QUICK ? { min_cpu_time: 50e6 } : { min_cpu_time: 300e6 };

/** ns per operation (mitata's average), `ops` operations per call. */
async function ns(fn: () => unknown, ops = 1): Promise<number> {
  const stats = await measure(fn, OPTS);
  return stats.avg / ops;
}

function fmt(nsValue: number): string {
  return nsValue < 10 ? nsValue.toFixed(2) : nsValue < 1000 ? nsValue.toFixed(1) : nsValue.toFixed(0);
}

// --- FrameReader ----------------------------------------------------------------

async function reader(): Promise<string[][]> {
  // 64 KiB of client frames: HEARTBEATs with an ACQUIRE every 64 frames, as a server sees them.
  const acquire = encodeAcquire({ name: "jobs/nightly", leaseMs: 5000, owner: "host-12/pid-4411", try: false });
  const stream = new Uint8Array(65536);
  let length = 0;
  let frames = 0;
  while (true) {
    const frame = frames % 64 === 0 ? acquire : HEARTBEAT_FRAME;
    if (length + frame.length > stream.length) break;
    stream.set(frame, length);
    length += frame.length;
    frames++;
  }
  const bytes = stream.subarray(0, length);
  const limits = new FrameLimits(CLIENT_FRAMES);
  let seen = 0;
  const sink: FrameSink = {
    onFrame(type, _flags, _bytes, _offset, bodyLength) {
      seen += type + bodyLength;
      return true;
    },
  };
  // The floor: walk the frames of one whole buffer, no state, no checks.
  const floor = await ns(() => {
    let pos = 0;
    while (pos + 4 <= length) {
      const bodyLength = (bytes[pos + 2]! << 8) | bytes[pos + 3]!;
      sink.onFrame(bytes[pos]!, bytes[pos + 1]!, bytes, pos + 4, bodyLength);
      pos += 4 + bodyLength;
    }
  }, frames);
  const rows: string[][] = [];
  for (const size of [1, 3, 4, 7, 16, 64, 256, 1024, 4096, 16384, 65536]) {
    const chunks: Uint8Array[] = [];
    for (let i = 0; i < length; i += size) chunks.push(bytes.subarray(i, Math.min(length, i + size)));
    const r = new FrameReader(limits);
    const t = await ns(() => {
      for (let i = 0; i < chunks.length; i++) r.push(chunks[i]!, sink);
    }, frames);
    rows.push([`FrameReader, ${size} B chunks`, fmt(floor), fmt(t), (t / floor).toFixed(2) + "x"]);
  }
  do_not_optimize(seen);
  return rows;
}

// --- encoders ---------------------------------------------------------------------

async function encoders(): Promise<string[][]> {
  const request = { name: "jobs/nightly", leaseMs: 5000, owner: "host-12/pid-4411/nightly-report", try: false };
  const acquire = encodeAcquire(request);
  const rows: string[][] = [];
  const alloc = async (n: number) => ns(() => do_not_optimize(new Uint8Array(n)));
  const row = async (name: string, size: number, fn: () => unknown) => {
    const floor = await alloc(size);
    const t = await ns(fn);
    rows.push([name, fmt(floor), fmt(t), (t / floor).toFixed(2) + "x"]);
  };
  await row(`encodeAcquire (${acquire.length} B)`, acquire.length, () => do_not_optimize(encodeAcquire(request)));
  await row("encodeAcquired (12 B, once per grant)", 12, () => do_not_optimize(encodeAcquired(12345, FLAG_REPLY)));
  const push = encodeAcquired(0, 0);
  let token = 1;
  await row("writeToken into the reused push frame", 12, () => writeToken(push, 4, token++));
  await row("encodeError LOCK_BUSY", 17, () => do_not_optimize(encodeError(ErrorCode.LOCK_BUSY, "lock is held")));
  await row(`decodeAcquire (${acquire.length} B, validates and decodes)`, acquire.length, () =>
    do_not_optimize(decodeAcquire(acquire, 4, acquire.length - 4)),
  );
  return rows;
}

// --- timer wheel ----------------------------------------------------------------------

class Entry implements WheelEntry, HeapEntry {
  wheelNext: WheelEntry | null = null;
  wheelPrev: WheelEntry | null = null;
  wheelSlot = -1;
  wheelTick = 0;
  at = 0;
  heapIndex = -1;
}

/** Owner that lets every due entry go (counts them). */
class Expire implements WheelOwner<Entry> {
  count = 0;
  due(): number {
    this.count++;
    return -1;
  }
}

/** Deterministic spread of deadlines (a tiny LCG; Math.random would differ between runs). */
function spread(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 0x1_0000_0000;
  };
}

async function wheel(): Promise<string[][]> {
  const rows: string[][] = [];
  const sizes = QUICK ? [1e3, 1e5] : [1e3, 1e4, 1e5, 1e6];
  for (const n of sizes) {
    // N live entries with deadlines spread over 1..1000 s (leases of long-running holders).
    const random = spread(n);
    const w = new TimerWheel<Entry>(0);
    const h = new DeadlineHeap<Entry>();
    for (let i = 0; i < n; i++) {
      const a = new Entry();
      a.at = 1000 + random() * 999_000;
      w.schedule(a, a.at);
      const b = new Entry();
      b.at = a.at;
      h.push(b);
    }
    const probe = new Entry();
    let k = 0;
    const armW = await ns(() => {
      w.schedule(probe, 1000 + ((k++ * 7919) % 999_000));
      w.remove(probe);
    });
    const armH = await ns(() => {
      probe.at = 1000 + ((k++ * 7919) % 999_000);
      h.push(probe);
      h.remove(probe);
    });
    rows.push([`arm + cancel, ${n.toExponential(0)} live`, fmt(armH), fmt(armW), (armW / armH).toFixed(2) + "x"]);

    // A tick with nothing due: the wheel looks at its bitmap; the heap at its top.
    const owner = new Expire();
    let now = 0;
    const tickW = await ns(() => {
      now += 1;
      if (now >= 999) now = 0; // stay before the first deadline
      w.advance(now, owner);
    });
    const tickH = await ns(() => do_not_optimize(h.peek()!.at <= 0));
    rows.push([`tick, nothing due, ${n.toExponential(0)} live`, fmt(tickH), fmt(tickW), (tickW / tickH).toFixed(2) + "x"]);
  }
  // Expiry: fill N entries due within N ms, then run the clock through all of them.
  for (const n of sizes) {
    const random = spread(n + 1);
    const entries = Array.from({ length: n }, () => new Entry());
    const deadlines = entries.map(() => 1 + random() * n);
    const runW = await ns(() => {
      const w = new TimerWheel<Entry>(0);
      const owner = new Expire();
      for (let i = 0; i < n; i++) w.schedule(entries[i]!, deadlines[i]!);
      w.advance(n + 1, owner);
      if (owner.count !== n) throw new Error("wheel lost entries");
    }, n);
    const runH = await ns(() => {
      const h = new DeadlineHeap<Entry>();
      for (let i = 0; i < n; i++) {
        entries[i]!.at = deadlines[i]!;
        h.push(entries[i]!);
      }
      let count = 0;
      while (h.pop() !== undefined) count++;
      if (count !== n) throw new Error("heap lost entries");
    }, n);
    rows.push([`arm + expire, per entry, ${n.toExponential(0)}`, fmt(runH), fmt(runW), (runW / runH).toFixed(2) + "x"]);
  }
  return rows;
}

console.log(`\nFrameReader: ns per frame (64 KiB of client frames: HEARTBEATs, an ACQUIRE every 64th)\n`);
console.log(table(["bench", "floor: one-piece walk", "FrameReader", "ratio"], await reader()));
console.log(`\nEncoders: ns per call\n`);
console.log(table(["bench", "floor: new Uint8Array(n)", "ns", "ratio"], await encoders()));
console.log(`\nTimer wheel (src/core/wheel.ts): ns per operation\n`);
console.log(table(["bench", "binary heap", "wheel", "ratio"], await wheel()));
