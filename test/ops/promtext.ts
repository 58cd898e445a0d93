/**
 * A strict parser of the Prometheus text exposition format 0.0.4, for
 * tests: it throws on anything `promtool check metrics` would reject (and
 * on a few lint rules it warns about), with the line number.
 *
 * Checked: HELP then TYPE before a family's samples, each family once and
 * its samples contiguous; metric and label names; label value escapes
 * (only \\, \" and \n); values as Go floats (+Inf, -Inf, NaN); counters end
 * in `_total`; histograms have `_bucket` samples with `le`, ascending, the
 * last `+Inf`, cumulative counts non-decreasing, `+Inf` equal to `_count`,
 * and a `_sum` and `_count` per label set; no duplicate series.
 */

export interface Sample {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly value: number;
}

export interface Family {
  readonly name: string;
  readonly type: string;
  readonly help: string;
  readonly samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

function parseValue(text: string, where: string): number {
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return Number.NaN;
  if (!/^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/.test(text)) throw new Error(`${where}: bad value ${JSON.stringify(text)}`);
  return Number(text);
}

/** Labels from `{a="x",b="y"}` starting at `text[0] === "{"`; returns them and the rest. */
function parseLabels(text: string, where: string): { labels: Record<string, string>; rest: string } {
  const labels: Record<string, string> = {};
  let i = 1;
  for (;;) {
    if (text[i] === "}") return { labels, rest: text.slice(i + 1) };
    const nameMatch = /^[^=]*/.exec(text.slice(i))![0];
    if (!LABEL_NAME.test(nameMatch) || nameMatch.startsWith("__")) throw new Error(`${where}: bad label name ${JSON.stringify(nameMatch)}`);
    if (nameMatch in labels) throw new Error(`${where}: label ${nameMatch} twice`);
    i += nameMatch.length;
    if (text[i] !== "=" || text[i + 1] !== '"') throw new Error(`${where}: expected =" after label ${nameMatch}`);
    i += 2;
    let value = "";
    for (;;) {
      const c = text[i];
      if (c === undefined) throw new Error(`${where}: unterminated label value`);
      if (c === "\n") throw new Error(`${where}: raw newline in label value`);
      if (c === '"') break;
      if (c === "\\") {
        const e = text[i + 1];
        if (e === "\\") value += "\\";
        else if (e === '"') value += '"';
        else if (e === "n") value += "\n";
        else throw new Error(`${where}: bad escape \\${e} in label value`);
        i += 2;
        continue;
      }
      value += c;
      i++;
    }
    labels[nameMatch] = value;
    i++;
    if (text[i] === ",") i++;
    else if (text[i] !== "}") throw new Error(`${where}: expected , or } after a label value`);
  }
}

/** The family a sample name belongs to, given the family's type. */
function belongs(family: Family, name: string): boolean {
  if (family.type === "histogram") return name === `${family.name}_bucket` || name === `${family.name}_sum` || name === `${family.name}_count`;
  return name === family.name;
}

export function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith("\n")) throw new Error("the exposition must end with a newline");
  const families = new Map<string, Family>();
  const helps = new Map<string, string>();
  const series = new Set<string>();
  let current: Family | null = null;
  const lines = text.slice(0, -1).split("\n");
  lines.forEach((line, index) => {
    const where = `line ${index + 1}`;
    if (line === "") throw new Error(`${where}: empty line`);
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (m === null) return; // a plain comment
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      if (!METRIC_NAME.test(name)) throw new Error(`${where}: bad metric name ${name}`);
      if (kind === "HELP") {
        if (helps.has(name)) throw new Error(`${where}: second HELP for ${name}`);
        if (!/^(?:[^\\]|\\[\\n])*$/.test(rest)) throw new Error(`${where}: bad escape in HELP`);
        helps.set(name, rest);
        return;
      }
      if (!TYPES.has(rest)) throw new Error(`${where}: unknown type ${rest}`);
      if (families.has(name)) throw new Error(`${where}: second TYPE for ${name}`);
      if (!helps.has(name)) throw new Error(`${where}: TYPE for ${name} without a HELP before it`);
      if (rest === "counter" && !name.endsWith("_total")) throw new Error(`${where}: counter ${name} does not end in _total`);
      current = { name, type: rest, help: helps.get(name)!, samples: [] };
      families.set(name, current);
      return;
    }
    const nameMatch = /^[^{ ]+/.exec(line);
    if (nameMatch === null) throw new Error(`${where}: no metric name`);
    const name = nameMatch[0];
    if (!METRIC_NAME.test(name)) throw new Error(`${where}: bad metric name ${name}`);
    let rest = line.slice(name.length);
    let labels: Record<string, string> = {};
    if (rest.startsWith("{")) ({ labels, rest } = parseLabels(rest, where));
    const parts = rest.split(" ");
    if (parts[0] !== "" || parts.length < 2 || parts.length > 3) throw new Error(`${where}: expected " value [timestamp]"`);
    const value = parseValue(parts[1]!, where);
    const family: Family | null = current;
    if (family === null || !belongs(family, name)) throw new Error(`${where}: sample ${name} outside its family (HELP/TYPE first, samples contiguous)`);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (series.has(key)) throw new Error(`${where}: duplicate series ${key}`);
    series.add(key);
    family.samples.push({ name, labels, value });
  });
  for (const family of families.values()) if (family.type === "histogram") checkHistogram(family);
  return families;
}

function checkHistogram(family: Family): void {
  const groups = new Map<string, { buckets: Sample[]; sum?: number; count?: number }>();
  for (const s of family.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const group = groups.get(key) ?? { buckets: [] };
    groups.set(key, group);
    if (s.name.endsWith("_bucket")) {
      if (le === undefined) throw new Error(`${family.name}: bucket without le`);
      group.buckets.push(s);
    } else if (s.name.endsWith("_sum")) group.sum = s.value;
    else group.count = s.value;
  }
  for (const [key, group] of groups) {
    const where = `${family.name}${key}`;
    if (group.sum === undefined || group.count === undefined) throw new Error(`${where}: missing _sum or _count`);
    if (group.buckets.length === 0) throw new Error(`${where}: no buckets`);
    let lastLe = -Infinity;
    let lastCount = 0;
    for (const b of group.buckets) {
      const le = parseValue(b.labels.le!, where);
      if (!(le > lastLe)) throw new Error(`${where}: le ${b.labels.le} not ascending`);
      if (b.value < lastCount) throw new Error(`${where}: bucket counts decrease at le ${b.labels.le}`);
      lastLe = le;
      lastCount = b.value;
    }
    if (lastLe !== Infinity) throw new Error(`${where}: last bucket is not +Inf`);
    if (lastCount !== group.count) throw new Error(`${where}: +Inf bucket ${lastCount} != _count ${group.count}`);
  }
}

/** The value of one series, or undefined. */
export function valueOf(families: Map<string, Family>, family: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = JSON.stringify(Object.entries(labels).sort());
  return families.get(family)?.samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want)?.value;
}
