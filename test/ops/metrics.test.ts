import { describe, expect, spyOn, test } from "bun:test";
import * as fs from "node:fs";
import { Histogram } from "../../src/core/stats.ts";
import { ErrorCode } from "../../src/protocol/index.ts";
import { Exposition, escapeLabelValue } from "../../src/ops/exposition.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon, type TestDaemon } from "./harness.ts";
import { parseExposition, valueOf, type Family } from "./promtext.ts";

async function scrape(ops: TestDaemon): Promise<Map<string, Family>> {
  const response = await ops.get("/metrics");
  expect(response.status).toBe(200);
  return parseExposition(await response.text());
}

const gauge = (m: Map<string, Family>, name: string, labels: Record<string, string> = {}) => valueOf(m, name, name, labels);

describe("exposition format", () => {
  test("the whole /metrics output parses strictly, with every family documented and typed", async () => {
    await using ops = startDaemon();
    const a = await WirePeer.claim(ops.port, "m", 5000);
    const m = await scrape(ops);
    for (const name of [
      "lockd_build_info",
      "lockd_ready",
      "lockd_sessions",
      "lockd_connections",
      "lockd_locks",
      "lockd_locks_held",
      "lockd_waiters",
      "lockd_sessions_opened_total",
      "lockd_acquisitions_total",
      "lockd_queued_total",
      "lockd_session_ends_total",
      "lockd_heartbeats_total",
      "lockd_fencing_token_last",
      "lockd_handover_duration_seconds",
      "lockd_wait_duration_seconds",
      "lockd_hold_duration_seconds",
      "lockd_admin_actions_total",
      "lockd_admin_denied_total",
      "lockd_log_lines_suppressed_total",
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "process_start_time_seconds",
    ]) {
      expect(m.has(name), name).toBe(true);
      expect(m.get(name)!.help.length).toBeGreaterThan(10);
    }
    expect(m.get("lockd_handover_duration_seconds")!.type).toBe("histogram");
    expect(gauge(m, "lockd_build_info", { version: "0.0.0-test" })).toBe(1);
    // No lock name anywhere in the labels.
    for (const family of m.values()) for (const s of family.samples) expect(Object.values(s.labels)).not.toContain("m");
    a.end();
  });

  test("label values are escaped and parse back to the original", () => {
    const nasty = 'a "quoted" \\ back\nslash';
    const text = new Exposition().single("x_total", "counter", "help with \\ and\nnewline", 1, { v: nasty }).text();
    expect(text).toContain(`v="${escapeLabelValue(nasty)}"`);
    expect(text).not.toContain("\nslash");
    const parsed = parseExposition(text);
    expect(parsed.get("x_total")!.samples[0]!.labels.v).toBe(nasty);
  });

  test("histograms: cumulative, le ascending, +Inf last and equal to _count", () => {
    const h = new Histogram([0.001, 0.01, 0.1]);
    for (const v of [0.0005, 0.005, 0.005, 0.05, 5]) h.observe(v);
    const m = parseExposition(new Exposition().histogram("h_seconds", "a histogram", h).text());
    const buckets = m.get("h_seconds")!.samples.filter((s) => s.name === "h_seconds_bucket");
    expect(buckets.map((s) => [s.labels.le, s.value])).toEqual([
      ["0.001", 1],
      ["0.01", 3],
      ["0.1", 4],
      ["+Inf", 5],
    ]);
    expect(valueOf(m, "h_seconds", "h_seconds_count")).toBe(5);
    expect(valueOf(m, "h_seconds", "h_seconds_sum")).toBeCloseTo(5.0605, 9);
  });

  test("the parser rejects what promtool rejects", () => {
    const bad = [
      "x 1\n", // no HELP/TYPE
      "# HELP x h\n# TYPE x counter\nx 1\n", // counter without _total
      "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"\\q\"} 1\n", // bad escape
      "# HELP x h\n# TYPE x gauge\nx{1a=\"v\"} 1\n", // bad label name
      "# HELP x h\n# TYPE x gauge\nx one\n", // bad value
      "# HELP x h\n# TYPE x gauge\nx 1\n# HELP y h\n# TYPE y gauge\ny 1\nx 2\n", // not contiguous
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", // no +Inf
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // le order
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", // +Inf != count
      "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n", // duplicate series
      "# HELP x h\n# TYPE x gauge\nx 1", // no final newline
      "# HELP x h\\q\n# TYPE x gauge\nx 1\n", // bad escape in HELP
    ];
    for (const text of bad) expect(() => parseExposition(text), text).toThrow();
  });
});

describe("metrics by kind of claim", () => {
  test("holders and waiters by kind; lockd_locks_held counts locks, not holders; LIMIT_MISMATCH ends are counted", async () => {
    await using ops = startDaemon({ adminToken: "t" });
    const peers = [
      await WirePeer.claim(ops.port, "pool", 5000, { limit: 3 }),
      await WirePeer.claim(ops.port, "pool", 5000, { limit: 3 }),
      await WirePeer.claim(ops.port, "pool", 5000, { limit: 3 }),
      await WirePeer.claim(ops.port, "pool", 5000, { limit: 3 }),
      await WirePeer.claim(ops.port, "rw", 5000, { shared: true }),
      await WirePeer.claim(ops.port, "rw", 5000, { shared: true }),
      await WirePeer.claim(ops.port, "rw", 5000),
      await WirePeer.claim(ops.port, "x", 5000),
    ];
    const bad = await WirePeer.claim(ops.port, "pool", 5000, { limit: 2 });
    expect(bad.frames[0]!.code).toBe(0x25);
    const m = await scrape(ops);
    expect(gauge(m, "lockd_holders", { kind: "semaphore" })).toBe(3);
    expect(gauge(m, "lockd_holders", { kind: "shared" })).toBe(2);
    expect(gauge(m, "lockd_holders", { kind: "exclusive" })).toBe(1);
    expect(gauge(m, "lockd_waiters_by_kind", { kind: "semaphore" })).toBe(1);
    expect(gauge(m, "lockd_waiters_by_kind", { kind: "exclusive" })).toBe(1);
    expect(gauge(m, "lockd_waiters_by_kind", { kind: "shared" })).toBe(0);
    expect(gauge(m, "lockd_locks_held")).toBe(3);
    expect(gauge(m, "lockd_session_ends_total", { reason: "limit_mismatch" })).toBe(1);
    for (const p of peers) p.end();
  });
});

describe("metrics move with sessions", () => {
  test("session counts, grants by path, ends by reason, a handover in the histogram, heartbeats, the last token", async () => {
    await using ops = startDaemon({ adminToken: "t" });
    let m = await scrape(ops);
    expect(gauge(m, "lockd_sessions", { state: "owner" })).toBe(0);
    expect(valueOf(m, "lockd_handover_duration_seconds", "lockd_handover_duration_seconds_count")).toBe(0);

    const a = await WirePeer.claim(ops.port, "jobs", 5000);
    const b = await WirePeer.claim(ops.port, "jobs", 5000);
    const c = await WirePeer.claim(ops.port, "jobs", 5000);
    const idle = await WirePeer.connect(ops.port);
    b.heartbeat();
    await b.frame(1);

    m = await scrape(ops);
    expect(gauge(m, "lockd_sessions", { state: "owner" })).toBe(1);
    expect(gauge(m, "lockd_sessions", { state: "waiting" })).toBe(2);
    expect(gauge(m, "lockd_sessions", { state: "connected" })).toBe(1);
    expect(gauge(m, "lockd_locks_held")).toBe(1);
    expect(gauge(m, "lockd_waiters")).toBe(2);
    expect(gauge(m, "lockd_connections")).toBe(4);
    expect(gauge(m, "lockd_sessions_opened_total")).toBe(4);
    expect(gauge(m, "lockd_acquisitions_total", { path: "immediate" })).toBe(1);
    expect(gauge(m, "lockd_queued_total")).toBe(2);
    expect(gauge(m, "lockd_heartbeats_total")).toBe(1);
    expect(gauge(m, "lockd_fencing_token_last")).toBe(Number(a.frames[0]!.token));

    // The owner closes: b is promoted (a handover), then c is kicked, then b is force-released.
    a.end();
    await b.frame(2);
    const cId = (await body(await ops.get("/v1/locks/jobs"))).waiters[0].session;
    expect((await ops.post(`/v1/sessions/${cId}/kick`, "t")).status).toBe(200);
    await c.closed();
    expect((await ops.post("/v1/locks/jobs/force-release", "t")).status).toBe(200);
    await b.closed();
    idle.write([0x7f, 0, 0, 0]); // unknown frame type: PROTOCOL_ERROR
    await idle.closed();

    m = await scrape(ops);
    expect(gauge(m, "lockd_sessions", { state: "owner" })).toBe(0);
    expect(gauge(m, "lockd_sessions", { state: "waiting" })).toBe(0);
    expect(gauge(m, "lockd_sessions", { state: "connected" })).toBe(0);
    expect(gauge(m, "lockd_locks")).toBe(0);
    expect(gauge(m, "lockd_acquisitions_total", { path: "promoted" })).toBe(1);
    expect(gauge(m, "lockd_session_ends_total", { reason: "closed" })).toBe(1);
    expect(gauge(m, "lockd_session_ends_total", { reason: "kicked" })).toBe(1);
    expect(gauge(m, "lockd_session_ends_total", { reason: "force_released" })).toBe(1);
    expect(gauge(m, "lockd_session_ends_total", { reason: "protocol_error" })).toBe(1);
    expect(gauge(m, "lockd_session_ends_total", { reason: "lease_expired" })).toBe(0);
    expect(gauge(m, "lockd_admin_actions_total", { action: "kick" })).toBe(1);
    expect(gauge(m, "lockd_admin_actions_total", { action: "force_release" })).toBe(1);
    const handover = "lockd_handover_duration_seconds";
    expect(valueOf(m, handover, `${handover}_count`)).toBe(1);
    expect(valueOf(m, handover, `${handover}_sum`)).toBeGreaterThan(0);
    expect(valueOf(m, handover, `${handover}_sum`)).toBeLessThan(1);
    expect(valueOf(m, "lockd_wait_duration_seconds", "lockd_wait_duration_seconds_count")).toBe(1);
    expect(valueOf(m, "lockd_hold_duration_seconds", "lockd_hold_duration_seconds_count")).toBe(2);
  });

  test("a lease expiry that promotes is a handover too; OVERLOADED refusals are counted", async () => {
    await using ops = startDaemon({ maxSessions: 2 });
    const a = await WirePeer.claim(ops.port, "short", 50);
    const b = await WirePeer.claim(ops.port, "short", 10_000);
    const refused = await WirePeer.connect(ops.port);
    expect((await refused.frame(0)).code).toBe(ErrorCode.OVERLOADED);
    expect((await a.frame(1)).code).toBe(ErrorCode.LEASE_EXPIRED);
    await b.frame(1);
    const m = await scrape(ops);
    expect(gauge(m, "lockd_session_ends_total", { reason: "lease_expired" })).toBe(1);
    expect(gauge(m, "lockd_session_ends_total", { reason: "overloaded" })).toBe(1);
    expect(valueOf(m, "lockd_handover_duration_seconds", "lockd_handover_duration_seconds_count")).toBe(1);
    b.end();
  });
});

describe("a scrape costs the same with thousands of sessions", () => {
  const SESSIONS = 2000;

  test("no scrape lists /proc/self/fd, yet process_open_fds counts every socket", async () => {
    await using ops = startDaemon({ ioTimeoutMs: 60_000 });
    const peers: WirePeer[] = [];
    for (let i = 0; i < SESSIONS; i++) peers.push(await WirePeer.connect(ops.port));
    const listings = spyOn(fs, "readdirSync");
    try {
      let last = 0;
      for (let i = 0; i < 10; i++) last = gauge(await scrape(ops), "process_open_fds") ?? -1;
      await Promise.all(Array.from({ length: 10 }, () => scrape(ops)));
      const fdListings = listings.mock.calls.filter(([dir]) => String(dir).startsWith("/proc/self/fd")).length;
      // Linux 6.2+ gives the count as the directory's size: no listing at all. Older kernels list
      // at most once per FD_LIST_INTERVAL_MS; the old code listed once per scrape (20 here).
      expect(fdListings).toBeLessThanOrEqual(1);
      expect(ops.daemon.ops.stats.metricsBuilt).toBe(20);
      // Both ends of every session live in this process.
      expect(last).toBeGreaterThanOrEqual(SESSIONS);
    } finally {
      listings.mockRestore();
      for (const p of peers) p.end();
    }
  });

  test("concurrent scrapes within one interval share one built body; readiness changes rebuild it", async () => {
    // A long grace: the ops server must outlive the scrape made during the shutdown.
    await using ops = startDaemon({ shutdownGraceMs: 60_000, opsLimits: { metricsMaxAgeMs: 60_000 } });
    const peer = await WirePeer.connect(ops.port);
    const before = ops.daemon.ops.stats.metricsBuilt;
    const responses = await Promise.all(Array.from({ length: 50 }, () => ops.get("/metrics")));
    expect(responses.map((r) => r.status)).toEqual(responses.map(() => 200));
    const bodies = await Promise.all(responses.map((r) => r.text()));
    expect(ops.daemon.ops.stats.metricsBuilt - before).toBe(1);
    expect(new Set(bodies).size).toBe(1);
    expect(gauge(parseExposition(bodies[0]!), "lockd_ready")).toBe(1);
    peer.end();
    const stopping = ops.daemon.shutdown("test");
    expect(gauge(await scrape(ops), "lockd_ready")).toBe(0);
    expect(ops.daemon.ops.stats.metricsBuilt - before).toBe(2);
    await ops.daemon.close();
    await stopping;
  });

  test("the ops requests in flight are in the exposition (the scrape's own included); the ops server counts no connections", async () => {
    await using ops = startDaemon({ opsLimits: { metricsMaxAgeMs: 0 } });
    const m = await scrape(ops);
    expect(gauge(m, "lockd_ops_requests_in_flight")).toBeGreaterThanOrEqual(1);
    for (const gone of ["lockd_ops_connections", "lockd_ops_max_connections", "lockd_ops_connections_refused_total"]) expect(m.has(gone)).toBe(false);
  });
});
