/** Small numeric helpers for bench reports: percentiles, ratios, formatting. */

/** Sorted copy of the samples. */
export function sorted(samples: ArrayLike<number>): Float64Array {
  return Float64Array.from(samples).sort();
}

/** Nearest-rank percentile of already sorted samples; NaN when empty. */
export function pct(sortedSamples: Float64Array, p: number): number {
  const n = sortedSamples.length;
  if (n === 0) return NaN;
  const rank = Math.min(n - 1, Math.max(0, Math.ceil((p / 100) * n) - 1));
  return sortedSamples[rank]!;
}

export interface Summary {
  readonly n: number;
  readonly p50: number;
  readonly p99: number;
  readonly mean: number;
}

export function summarize(samples: ArrayLike<number>): Summary {
  const s = sorted(samples);
  let sum = 0;
  for (let i = 0; i < s.length; i++) sum += s[i]!;
  return { n: s.length, p50: pct(s, 50), p99: pct(s, 99), mean: s.length === 0 ? NaN : sum / s.length };
}

/** Microseconds from milliseconds, one decimal. */
export function us(ms: number): string {
  return (ms * 1000).toFixed(1);
}

export function ratio(value: number, floor: number): string {
  return `${(value / floor).toFixed(2)}x`;
}

/** A fixed-width text table. */
export function table(head: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join("  ");
  return [line(head), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

/** A sample reservoir with a fixed capacity: keeps every k-th value once full (no allocation per sample). */
export class Samples {
  private readonly values: Float64Array;
  private length = 0;
  private stride = 1;
  private seen = 0;

  constructor(capacity = 1 << 16) {
    this.values = new Float64Array(capacity);
  }

  add(value: number): void {
    if (this.seen++ % this.stride !== 0) return;
    if (this.length === this.values.length) {
      // Full: keep every other sample and halve the rate from now on.
      for (let i = 0; i < this.length / 2; i++) this.values[i] = this.values[i * 2]!;
      this.length /= 2;
      this.stride *= 2;
    }
    this.values[this.length++] = value;
  }

  get count(): number {
    return this.seen;
  }

  toArray(): Float64Array {
    return this.values.slice(0, this.length);
  }

  clear(): void {
    this.length = 0;
    this.seen = 0;
    this.stride = 1;
  }
}
