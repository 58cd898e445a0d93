// Session capacity and what the lock port refused or cut, on /metrics: the
// limits as gauges, refusals by the limit that refused them, cuts by cause
// (one strict parse of the real exposition of an in-process daemon).
import { describe, expect, test } from "bun:test";
import { ErrorCode, FrameType, PIPELINE_LIMIT } from "../../src/protocol/index.ts";
import { BoundPeer } from "../helpers/bound.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon, type TestDaemon } from "../ops/harness.ts";
import { parseExposition, valueOf } from "../ops/promtext.ts";

async function scrape(ops: TestDaemon) {
  const response = await ops.get("/metrics");
  expect(response.status).toBe(200);
  const m = parseExposition(await response.text());
  return (name: string, labels: Record<string, string> = {}) => valueOf(m, name, name, labels);
}

describe("capacity metrics", () => {
  test("the limits, refusals by the limit that refused, and cuts by cause", async () => {
    await using ops = startDaemon({ maxSessions: 2, maxSessionsPerSource: 1 });
    const a = await WirePeer.claim(ops.port, "a", 60_000); // from 127.0.0.1
    const sameSource = await WirePeer.connect(ops.port);
    expect((await sameSource.frame(0)).code).toBe(ErrorCode.OVERLOADED);
    const b = await BoundPeer.connect(ops.port, "127.0.0.2");
    b.acquire("b");
    await b.until(() => b.frames[0], "b's grant");
    const full = await BoundPeer.connect(ops.port, "127.0.0.3");
    await full.until(() => full.frames[0], "the refusal at the session limit");
    expect(full.frames[0]!.code).toBe(ErrorCode.OVERLOADED);
    // a pipelines: one write of PIPELINE_LIMIT + 1 heartbeats
    const beats: number[] = [];
    for (let i = 0; i <= PIPELINE_LIMIT; i++) beats.push(FrameType.HEARTBEAT, 0, 0, 0);
    a.write(beats);
    await a.closed();
    expect(a.frames.at(-1)!.code).toBe(ErrorCode.PROTOCOL_ERROR);

    const value = await scrape(ops);
    expect(value("lockd_session_limit")).toBe(2);
    expect(value("lockd_session_limit_per_source")).toBe(1);
    expect(value("lockd_session_sources")).toBe(1); // 127.0.0.2
    expect(value("lockd_sessions_refused_total", { cause: "source_limit" })).toBe(1);
    expect(value("lockd_sessions_refused_total", { cause: "session_limit" })).toBe(1);
    expect(value("lockd_sessions_cut_total", { cause: "pipelining" })).toBe(1);
    expect(value("lockd_sessions_cut_total", { cause: "outbox" })).toBe(0);
    b.end();
  });

  test("without limits: no limit gauges, the counters at 0", async () => {
    await using ops = startDaemon();
    const value = await scrape(ops);
    expect(value("lockd_session_limit")).toBeUndefined();
    expect(value("lockd_session_limit_per_source")).toBeUndefined();
    expect(value("lockd_session_sources")).toBeUndefined();
    expect(value("lockd_sessions_refused_total", { cause: "session_limit" })).toBe(0);
    expect(value("lockd_sessions_cut_total", { cause: "pipelining" })).toBe(0);
  });
});
