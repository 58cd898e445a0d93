/**
 * bench:shards: how evenly the placement (src/shard.ts) spreads lock names
 * over 2, 4, 8 and 16 shards, and how many move when one shard is added.
 * Counts, not timings: the figures are the same on any machine.
 *
 *     bun bench/shards.ts [NAMES]     (default 10^6)
 *
 * Each name's weight on shards s0..s16 is computed once (the spec's
 * SHA-256 weight, weightBytes); the shard among the first N is the largest
 * of the first N weights, so every N and N+1 come from the same weights.
 */
import { weightBytes } from "../src/shard.ts";

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
