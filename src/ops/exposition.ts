/**
 * Prometheus text exposition format 0.0.4, written by hand: each family is
 * a HELP line, a TYPE line, then its samples, contiguous; label values are
 * escaped (backslash, double quote, newline); histograms are cumulative
 * buckets with `le` ascending, `+Inf` last and equal to `_count`, then
 * `_sum` and `_count`.
 */
import type { HistogramCounts } from "./sources.ts";

export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type MetricType = "counter" | "gauge" | "histogram";
export type Labels = Readonly<Record<string, string>>;

export function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function escapeHelp(text: string): string {
  return text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

function formatLabels(labels: Labels | undefined): string {
  if (labels === undefined) return "";
  const keys = Object.keys(labels);
  if (keys.length === 0) return "";
  return `{${keys.map((k) => `${k}="${escapeLabelValue(labels[k]!)}"`).join(",")}}`;
}

export class Exposition {
  private readonly lines: string[] = [];
  private readonly seen = new Set<string>();

  /** Start a family; its samples must follow before the next family. */
  family(name: string, type: MetricType, help: string): this {
    if (this.seen.has(name)) throw new Error(`metric family ${name} written twice`);
    this.seen.add(name);
    this.lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
    return this;
  }

  sample(name: string, value: number, labels?: Labels): this {
    this.lines.push(`${name}${formatLabels(labels)} ${formatValue(value)}`);
    return this;
  }

  /** A one-sample family. */
  single(name: string, type: "counter" | "gauge", help: string, value: number, labels?: Labels): this {
    return this.family(name, type, help).sample(name, value, labels);
  }

  histogram(name: string, help: string, histogram: HistogramCounts): this {
    this.family(name, "histogram", help);
    let cumulative = 0;
    for (let i = 0; i < histogram.bounds.length; i++) {
      cumulative += histogram.counts[i]!;
      this.sample(`${name}_bucket`, cumulative, { le: formatValue(histogram.bounds[i]!) });
    }
    this.sample(`${name}_bucket`, histogram.count, { le: "+Inf" });
    this.sample(`${name}_sum`, histogram.sum);
    this.sample(`${name}_count`, histogram.count);
    return this;
  }

  text(): string {
    return `${this.lines.join("\n")}\n`;
  }
}
