/**
 * deploy/: the systemd unit, the Prometheus alert rules (with their own
 * promtool unit tests) and the Grafana dashboard. Every metric they name
 * must be one a running server exports in a real /metrics scrape, with the
 * label values they match on: a plain server's, and a coordinated one's
 * (`--coordinator` families: lockd_role, lockd_coordinator_*), whose
 * coordinator row lives in memory (test/coordinator/memory-store.ts, the
 * statements' semantics without PostgreSQL). The unit must pass
 * `systemd-analyze verify` and its ExecStart must start and stop a real server.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startDaemon, type TestDaemon } from "../ops/harness.ts";
import { parseExposition } from "../ops/promtext.ts";
import { sigtermOutcome } from "../packaging/sigterm.ts";
import { MemoryRow, MemoryStore } from "../coordinator/memory-store.ts";
import { Daemon } from "../../src/server/daemon.ts";
import { Logger } from "../../src/log/logger.ts";
import { openFileLimit } from "../../src/process/limits.ts";

const ROOT = resolve(import.meta.dir, "../..");
const DEPLOY = join(ROOT, "deploy");
const RULES = join(DEPLOY, "prometheus/lockd-rules.yml");
const RULES_TEST = join(DEPLOY, "prometheus/lockd-rules.test.yml");
const DASHBOARD = join(DEPLOY, "grafana/lockd-dashboard.json");
const UNIT = join(DEPLOY, "lockd.service");
const PROMTOOL = Bun.which("promtool");
const SYSTEMD_ANALYZE = Bun.which("systemd-analyze");

interface RuleFile {
  groups: { name: string; rules: { alert?: string; record?: string; expr: string; for?: string }[] }[];
}

const rules = Bun.YAML.parse(await Bun.file(RULES).text()) as RuleFile;
const dashboard = (await Bun.file(DASHBOARD).json()) as {
  panels: { type: string; title: string; targets?: { expr: string }[] }[];
  templating: { list: { name: string; query: string | { query: string } }[] };
};

const ruleExprs = rules.groups.flatMap((group) => group.rules.map((rule) => ({ where: `rule ${rule.alert ?? rule.record}`, expr: rule.expr })));
const panelExprs = dashboard.panels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ where: `panel "${panel.title}"`, expr: target.expr })));
const variableExprs = dashboard.templating.list.flatMap((v) => {
  const query = typeof v.query === "string" ? v.query : v.query.query;
  const m = /^label_values\((\w+), *\w+\)$/.exec(query);
  return m === null ? [] : [{ where: `variable ${v.name}`, expr: m[1]! }];
});

/** Grafana's variables made into PromQL, so promtool can parse a panel's query. */
function concrete(expr: string): string {
  return expr.replaceAll("$__rate_interval", "1m").replaceAll("$instance", ".*");
}

const KEYWORDS = new Set(["and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "inf", "nan"]);
/** Aggregation operators: `sum by (x) (...)` puts a label list between the name and its parenthesis. */
const AGGREGATIONS = new Set(["sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"]);

/** Metric names (with their label matchers) in a PromQL expression. */
export function selectors(expr: string): { name: string; matchers: { label: string; op: string; value: string }[] }[] {
  const out: { name: string; matchers: { label: string; op: string; value: string }[] }[] = [];
  // Label lists of by/on/without/ignoring/group_* are not metrics; neither are [ranges].
  const text = concrete(expr)
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, "$1")
    .replace(/\[[^\]]*\]/g, "")
    .replace(/(?<![\w:"])\d[\w.]*/g, ""); // numbers and durations (offset 10m)
  const re = /([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{[^}]*\})|("(?:[^"\\]|\\.)*")|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/g;
  for (const m of text.matchAll(re)) {
    if (m[3] !== undefined) continue; // a string literal
    if (m[2] !== undefined) {
      const name = m[1];
      if (name === undefined || KEYWORDS.has(name)) throw new Error(`a selector without a metric name in ${expr}`);
      const matchers = [...m[2].matchAll(/(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)].map(([, label, op, value]) => ({ label: label!, op: op!, value: value! }));
      out.push({ name, matchers });
      continue;
    }
    const word = m[4]!;
    if (m[5] !== undefined || KEYWORDS.has(word) || AGGREGATIONS.has(word) || /^\d/.test(word)) continue; // a function call, a keyword
    out.push({ name: word, matchers: [] });
  }
  return out;
}

/** Series the rules record themselves (`record:`): rules and panels may use them as metrics. */
const recorded = new Set(rules.groups.flatMap((group) => group.rules.flatMap((rule) => (rule.record === undefined ? [] : [rule.record]))));

let daemon: TestDaemon;
let coordinated: Daemon;
let exported: Map<string, { labels: Record<string, string> }[]>;

async function scrape(from: TestDaemon | Daemon): Promise<string> {
  const response = from instanceof Daemon ? await fetch(`http://127.0.0.1:${from.ops.port}/metrics`, { signal: AbortSignal.timeout(10_000) }) : await from.get("/metrics");
  expect(response.status).toBe(200);
  return response.text();
}

beforeAll(async () => {
  // As `lockd serve` with --max-sessions auto (the default): the open-file limit's capacity
  // (where this platform reports none, as --max-sessions 1000), so lockd_session_limit is exported.
  const maxSessions = openFileLimit().sessionCapacity ?? 1000;
  daemon = startDaemon({ maxSessions });
  // lockd serve --coordinator, with the coordinator row in memory; scraped once it is active.
  const LEASE = 4000;
  coordinated = new Daemon({
    listen: { host: "127.0.0.1", port: 0 },
    ops: { host: "127.0.0.1", port: 0 },
    ioTimeoutMs: 5000,
    maxSessions,
    shutdownGraceMs: 0,
    adminToken: null,
    log: new Logger("warn", () => {}),
    version: "0.0.0-test",
    opsLimits: { metricsMaxAgeMs: 0 },
    coordinator: { store: new MemoryStore(new MemoryRow(), "deploy-test", LEASE, 1000), service: "deploy-test", instance: "deploy-test", leaseMs: LEASE, block: 1000 },
  });
  await coordinated.roles!.started;
  expect(coordinated.roles!.role).toBe("active");
  exported = new Map();
  for (const text of [await scrape(daemon), await scrape(coordinated)]) {
    for (const family of parseExposition(text).values()) {
      for (const sample of family.samples) {
        const list = exported.get(sample.name) ?? [];
        list.push({ labels: sample.labels });
        exported.set(sample.name, list);
      }
    }
  }
});

afterAll(async () => {
  await daemon?.[Symbol.asyncDispose]();
  await coordinated?.close();
});

test("the coordinated scrape has the --coordinator families a plain server lacks", async () => {
  const plain = parseExposition(await scrape(daemon));
  for (const name of ["lockd_role", "lockd_coordinator_epoch", "lockd_coordinator_step_downs_total", "lockd_coordinator_renewals_failed_total"]) {
    expect(plain.has(name)).toBe(false);
    expect(exported.has(name)).toBe(true);
  }
  expect(exported.get("lockd_role")!.map((s) => s.labels)).toEqual([
    { role: "active", service: "deploy-test" },
    { role: "standby", service: "deploy-test" },
  ]);
});

describe("every metric the rules and the dashboard use is exported", () => {
  /** Prometheus' own series for every target. */
  const SYNTHETIC = new Set(["up"]);
  const TARGET_LABELS = new Set(["job", "instance"]);
  for (const { where, expr } of [...ruleExprs, ...panelExprs, ...variableExprs]) {
    test(`${where}: ${expr}`, () => {
      const found = selectors(expr);
      expect(found.length).toBeGreaterThan(0);
      for (const { name, matchers } of found) {
        if (SYNTHETIC.has(name) || recorded.has(name)) continue;
        expect(exported.has(name) ? name : `${name} (not in /metrics)`).toBe(name);
        const samples = exported.get(name)!;
        for (const { label, op, value } of matchers) {
          if (TARGET_LABELS.has(label) || op.startsWith("!")) continue;
          // `=` names one value, `=~` here only plain alternatives: each must exist.
          const values = op === "=" ? [value] : value.split("|");
          for (const wanted of values) {
            expect(/^[\w.+-]*$/.test(wanted) ? wanted : `${wanted} (not a plain value)`).toBe(wanted);
            const seen = samples.some((s) => s.labels[label] === wanted);
            expect(seen ? `${name}{${label}="${wanted}"}` : `${name}{${label}="${wanted}"} (no such series)`).toBe(`${name}{${label}="${wanted}"}`);
          }
        }
      }
    });
  }
});

test("the selector parser finds names, skips functions, label lists and strings", () => {
  expect(selectors('histogram_quantile(0.99, sum by (job, le) (rate(a_bucket{x="1", job="j"}[5m]))) > 0.01 and on (instance) b')).toEqual([
    { name: "a_bucket", matchers: [{ label: "x", op: "=", value: "1" }, { label: "job", op: "=", value: "j" }] },
    { name: "b", matchers: [] },
  ]);
  expect(selectors('absent(up{job="lockd"})').map((s) => s.name)).toEqual(["up"]);
  expect(selectors("x offset 10m").map((s) => s.name)).toEqual(["x"]);
});

test("the dashboard's panels and variables parse as Grafana JSON for Prometheus", () => {
  expect(panelExprs.length).toBeGreaterThan(10);
  const ids = dashboard.panels.map((panel) => (panel as unknown as { id: number }).id);
  expect(new Set(ids).size).toBe(ids.length);
  expect(dashboard.templating.list.map((v) => v.name)).toEqual(["datasource", "instance"]);
});

const noPromtool = PROMTOOL === null ? " (skipped: promtool is not installed; .ci/run installs Debian's prometheus package for it)" : "";
if (noPromtool !== "") console.warn(`deploy.test.ts: promtool tests${noPromtool}`);

async function promtool(...args: string[]): Promise<{ code: number; out: string }> {
  const proc = Bun.spawn([PROMTOOL!, ...args], { cwd: join(DEPLOY, "prometheus"), stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 60_000);
  try {
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code, out: out + err };
  } finally {
    clearTimeout(timer);
  }
}

test.skipIf(PROMTOOL === null)(`promtool check rules and promtool test rules pass${noPromtool}`, async () => {
  const check = await promtool("check", "rules", RULES);
  expect(check.out).toContain(`SUCCESS: ${ruleExprs.length} rules found`);
  expect(check.code).toBe(0);
  const unit = await promtool("test", "rules", RULES_TEST);
  expect(unit.out).toContain("SUCCESS");
  expect(unit.code).toBe(0);
}, 60_000);

test.skipIf(PROMTOOL === null)(`every dashboard query is valid PromQL (promtool)${noPromtool}`, async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-dash-"));
  try {
    const file = join(dir, "dashboard-rules.yml");
    const lines = ["groups:", "  - name: dashboard", "    rules:"];
    panelExprs.forEach(({ expr }, i) => lines.push(`      - record: dashboard:query_${i}`, `        expr: ${JSON.stringify(concrete(expr))}`));
    writeFileSync(file, `${lines.join("\n")}\n`);
    const check = await promtool("check", "rules", file);
    expect(check.out).toContain(`SUCCESS: ${panelExprs.length} rules found`);
    expect(check.code).toBe(0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);

describe("the systemd unit", () => {
  const unitText = Bun.file(UNIT).text();
  async function service(): Promise<Map<string, string>> {
    const keys = new Map<string, string>();
    let section = "";
    for (const raw of (await unitText).split("\n")) {
      const line = raw.trim();
      if (line === "" || line.startsWith("#")) continue;
      const header = /^\[(\w+)\]$/.exec(line);
      if (header !== null) section = header[1]!;
      else if (section === "Service") {
        const eq = line.indexOf("=");
        keys.set(line.slice(0, eq), line.slice(eq + 1));
      }
    }
    return keys;
  }
  function seconds(text: string): number {
    const m = /^(\d+(?:\.\d+)?)(ms|s|min|m|h)?$/.exec(text);
    if (m === null) throw new Error(`not a duration: ${text}`);
    const unit = { ms: 0.001, s: 1, min: 60, m: 60, h: 3600 }[m[2] ?? "s"]!;
    return Number(m[1]) * unit;
  }
  function flag(args: string[], name: string): string | undefined {
    const i = args.indexOf(name);
    return i < 0 ? undefined : args[i + 1];
  }

  test("runs the binary with a StateDirectory data dir, a file limit, SIGTERM and a stop timeout above io-timeout plus grace", async () => {
    const keys = await service();
    const args = keys.get("ExecStart")!.split(/\s+/);
    expect(args[0]).toBe("/usr/local/bin/lockd");
    expect(args[1]).toBe("serve");
    expect(flag(args, "--data-dir")).toBe(`/var/lib/${keys.get("StateDirectory")}`);
    expect(Number(keys.get("LimitNOFILE"))).toBeGreaterThanOrEqual(4096);
    expect(keys.get("KillSignal")).toBe("SIGTERM");
    expect(keys.get("Restart")).toBe("on-failure");
    const grace = seconds(flag(args, "--shutdown-grace") ?? "5s");
    const ioTimeout = seconds(flag(args, "--io-timeout") ?? "5s");
    expect(seconds(keys.get("TimeoutStopSec")!)).toBeGreaterThan(grace + ioTimeout);
  });

  test("its ExecStart flags start a real server that stops cleanly on SIGTERM", async () => {
    const args = (await service()).get("ExecStart")!.split(/\s+/).slice(1);
    // The data directory and the addresses come from the test (temp dir, port 0).
    const i = args.indexOf("--data-dir");
    args.splice(i, 2);
    const outcome = await sigtermOutcome([process.execPath, join(ROOT, "src/cli/main.ts"), ...args], ROOT);
    expect({ serverAlive: outcome.serverAlive, stoppedCleanly: outcome.stoppedCleanly, exitCode: outcome.exitCode }).toEqual({
      serverAlive: false,
      stoppedCleanly: true,
      exitCode: 0,
    });
  }, 30_000);

  /** docs/operations.md's failover systemd setup: the env file lines and the drop-in on top of this unit. */
  async function failoverDocs(): Promise<{ env: string[]; dropIn: string }> {
    const docs = await Bun.file(join(ROOT, "docs/operations.md")).text();
    const failover = docs.slice(docs.indexOf("## Running two or three instances"));
    const section = failover.slice(failover.indexOf("### systemd"), failover.indexOf("\n### ", failover.indexOf("### systemd") + 1));
    const blocks = [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map(([, lang, text]) => ({ lang: lang!, text: text! }));
    const env = blocks.find((b) => b.lang === "sh" && b.text.includes("lockd.env"));
    const dropIn = blocks.find((b) => b.lang === "ini");
    if (env === undefined || dropIn === undefined) throw new Error("docs/operations.md, failover systemd: no lockd.env block or no drop-in (ini) block");
    return { env: env.text.split("\n").filter((l) => /^\w+=/.test(l)), dropIn: dropIn.text };
  }

  test("the failover setup in docs/operations.md is this unit plus a drop-in and lockd.env: it sets nothing the unit sets", async () => {
    const { env, dropIn } = await failoverDocs();
    expect(dropIn).toMatch(/^\[Service\]$/m);
    const unitKeys = await service();
    const added = dropIn.split("\n").filter((l) => /^\w+=/.test(l)).map((l) => l.slice(0, l.indexOf("=")));
    expect(added.length).toBeGreaterThan(0);
    expect(added.filter((key) => unitKeys.has(key))).toEqual([]);
    // The coordinator URL comes as a credential, like the admin token.
    expect(dropIn).toMatch(/^LoadCredential=coordinator-url:\S+$/m);
    expect(dropIn).toMatch(/^Environment=LOCKD_COORDINATOR_FILE=%d\/coordinator-url$/m);
    // The environment file the unit reads, with variables lockd serve knows.
    expect(unitKeys.get("EnvironmentFile")).toBe("-/etc/lockd/lockd.env");
    const help = Bun.spawnSync([process.execPath, join(ROOT, "src/cli/main.ts"), "serve", "--help"], { stdout: "pipe", stderr: "pipe" });
    const helpText = help.stdout.toString() + help.stderr.toString();
    const names = env.map((l) => l.slice(0, l.indexOf("=")));
    expect(names).toContain("LOCKD_SERVICE");
    expect(names.filter((name) => !helpText.includes(name))).toEqual([]);
  });

  const noAnalyze = SYSTEMD_ANALYZE === null ? " (skipped: systemd-analyze is not installed here)" : "";
  test.skipIf(SYSTEMD_ANALYZE === null)(`passes systemd-analyze verify${noAnalyze}`, async () => {
    const dir = mkdtempSync(join(tmpdir(), "lockd-unit-"));
    try {
      // verify checks that ExecStart's program exists: point it at an executable that does.
      const file = join(dir, "lockd.service");
      writeFileSync(file, (await unitText).replace(/^ExecStart=\S+/m, `ExecStart=${process.execPath}`));
      // And with the failover drop-in of docs/operations.md (a second [Service] section is what systemd merges).
      const failover = join(dir, "lockd-failover.service");
      writeFileSync(failover, `${readFileSync(file, "utf8")}\n${(await failoverDocs()).dropIn}`);
      for (const unit of [file, failover]) {
        const proc = Bun.spawn([SYSTEMD_ANALYZE!, "verify", unit], { stdout: "pipe", stderr: "pipe" });
        const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
        // Only lines about this unit: a host's own units may have warnings of their own.
        const ours = (out + err).split("\n").filter((line) => line.includes("lockd.service") || line.includes("lockd-failover.service"));
        expect(ours).toEqual([]);
        expect(code).toBe(0);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
