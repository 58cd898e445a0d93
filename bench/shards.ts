/**
 * bench:shards: how evenly the placement (src/shard/placement.ts) spreads lock names
 * over 2, 4, 8 and 16 shards, and how many move when one shard is added.
 * Counts, not timings: the figures are the same on any machine.
 *
 *     bun bench/shards.ts [NAMES]     (default 10^6)
 *
 * Then the cost of the server's guard per ACQUIRE (one placement of the
 * name over the shards) as a ratio to decoding that ACQUIRE, both timed in
 * alternating blocks in the same run.
 *
 * Each name's weight on shards s0..s16 is computed once (the spec's
 * SHA-256 weight, weightBytes); the shard among the first N is the largest
 * of the first N weights, so every N and N+1 come from the same weights.
 */
import { Placement, weightBytes } from "../src/shard/placement.ts";
import { HEADER_LENGTH } from "../src/protocol/constants.ts";
import { decodeAcquire, encodeAcquire } from "../src/protocol/frames.ts";

const names = Number(process.argv[2] ?? 1_000_000);
const sizes = [2, 4, 8, 16];
const shards = Array.from({ length: 17 }, (_, i) => `s${i}`);
const counts = new Map(sizes.map((n) => [n, new Array<number>(n).fill(0)]));
const moved = new Map(sizes.map((n) => [n, 0]));
const movedElsewhere = new Map(sizes.map((n) => [n, 0]));

function greater(a: Uint8Array, b: Uint8Array): boolean {
  for (let i = 0; i < 8; i++) if (a[i] !== b[i]) return a[i]! > b[i]!;
  return false;
}

const weights: Uint8Array[] = new Array(17);
for (let k = 0; k < names; k++) {
  const name = `bench/${k.toString(36)}/${(k * 2654435761) >>> 0}`;
  for (let i = 0; i < 17; i++) weights[i] = weightBytes(shards[i]!, name);
  let best = 0;
  const winners: number[] = [0];
  for (let i = 1; i < 17; i++) {
    if (greater(weights[i]!, weights[best]!)) best = i;
    winners.push(best); // winners[i]: the shard among s0..si
  }
  for (const n of sizes) {
    const before = winners[n - 1]!;
    const after = winners[n]!;
    counts.get(n)![before]!++;
    if (after !== before) {
      moved.set(n, moved.get(n)! + 1);
      if (after !== n) movedElsewhere.set(n, movedElsewhere.get(n)! + 1);
    }
  }
}

console.log(`${names} names`);
console.log("| shards | min | mean | max | max/mean | min/mean | moved when one is added | 1/(N+1) | moved to an old shard |");
console.log("|---|---|---|---|---|---|---|---|---|");
for (const n of sizes) {
  const c = counts.get(n)!;
  const mean = names / n;
  const max = Math.max(...c);
  const min = Math.min(...c);
  const m = moved.get(n)!;
  console.log(
    `| ${n} | ${min} | ${mean.toFixed(0)} | ${max} | ${(max / mean).toFixed(4)} | ${(min / mean).toFixed(4)} | ${m} (${((100 * m) / names).toFixed(2)} %) | ${(100 / (n + 1)).toFixed(2)} % | ${movedElsewhere.get(n)} |`,
  );
}

// --- the guard's cost per ACQUIRE, against decodeAcquire in the same run ----------------
const name = "orders/2026/11/30/customer-4711";
const frame = encodeAcquire({ name, leaseMs: 5000, owner: "host-12/pid-4411", try: false });
const body = frame.length - HEADER_LENGTH;
function perCall(fn: () => unknown, calls: number): number {
  const start = performance.now();
  for (let i = 0; i < calls; i++) fn();
  return ((performance.now() - start) * 1e6) / calls; // ns
}
console.log("\n| shards | guard (placement of one name) | decodeAcquire of its ACQUIRE | ratio |");
console.log("|---|---|---|---|");
for (const n of [2, 4, 8, 16]) {
  const placement = new Placement(shards.slice(0, n));
  let guard = 0;
  let decode = 0;
  for (let block = 0; block < 10; block++) {
    decode += perCall(() => decodeAcquire(frame, HEADER_LENGTH, body), 20_000);
    guard += perCall(() => placement.indexOf(name), 20_000);
  }
  console.log(`| ${n} | ${(guard / 10).toFixed(0)} ns | ${(decode / 10).toFixed(0)} ns | ${(guard / decode).toFixed(1)}x |`);
}
