import { describe, expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon, type TestDaemon } from "./harness.ts";
import { parseExposition, valueOf } from "./promtext.ts";
import { engineOf } from "../helpers/engine.ts";

describe("controlled shutdown, in process", () => {
  test("readyz 503 at once; every session gets SHUTTING_DOWN, nothing hands over; ops stays up for the grace", async () => {
    await using ops = startDaemon({ shutdownGraceMs: 60_000 });
    const owner = await WirePeer.claim(ops.port, "s", 5000);
    const waiter = await WirePeer.claim(ops.port, "s", 5000);
    const fresh = await WirePeer.connect(ops.port);
    // No frame answers a bare connect: wait (bounded) until the server has accepted it.
    for (let i = 0; i < 5000 && engineOf(ops.daemon.server).sessions.size < 3; i++) await Bun.sleep(1);
    expect(engineOf(ops.daemon.server).sessions.size).toBe(3);

    const done = ops.daemon.shutdown("test");
    expect(ops.daemon.ready).toBe(false);
    expect((await ops.get("/readyz")).status).toBe(503);

    await ops.daemon.graceStarted;
    expect(ops.daemon.phase).toBe("grace");
    for (const peer of [owner, waiter, fresh]) {
      await peer.closed();
      const last = peer.frames.at(-1)!;
      expect(last.type).toBe(FrameType.ERROR);
      expect(last.code).toBe(ErrorCode.SHUTTING_DOWN);
    }
    expect(waiter.frames.filter((f) => f.type === FrameType.ACQUIRED)).toHaveLength(0);

    // The grace window: probes and scrapes still answer.
    const ready = await ops.get("/readyz");
    expect(ready.status).toBe(503);
    expect(await body(ready)).toEqual({ status: "shutting_down", shard: { name: null, shards: [], generation: 0 }, lockDelay: null });
    expect((await ops.get("/livez")).status).toBe(200);
    const metrics = parseExposition(await (await ops.get("/metrics")).text());
    expect(valueOf(metrics, "lockd_ready", "lockd_ready")).toBe(0);
    expect(valueOf(metrics, "lockd_session_ends_total", "lockd_session_ends_total", { reason: "shutting_down" })).toBe(3);
    expect(valueOf(metrics, "lockd_sessions", "lockd_sessions", { state: "owner" })).toBe(0);

    // The protocol listener is closed.
    await expect(WirePeer.connect(ops.port)).rejects.toThrow();
    expect(ops.logs.map((l) => l.event)).toEqual(expect.arrayContaining(["shutdown.begins", "shutdown.grace"]));

    await ops.daemon.close(); // ends the grace early
    await done;
    expect(ops.daemon.phase).toBe("stopped");
    await expect(fetch(ops.url("/livez"), { signal: AbortSignal.timeout(5000) })).rejects.toThrow();
  });

  test("the grace period ends by itself and the daemon stops", async () => {
    await using ops = startDaemon({ shutdownGraceMs: 50 });
    expect((await ops.get("/livez")).status).toBe(200); // someone called: the grace is kept
    const started = performance.now();
    await ops.daemon.shutdown("test");
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
    expect(ops.daemon.phase).toBe("stopped");
  });

  test("a daemon nobody called since start (no lock session, no ops request) stops at once, without its grace", async () => {
    // An hour of grace: kept, it would outlast the test.
    await using ops = startDaemon({ shutdownGraceMs: 3_600_000 });
    await ops.daemon.shutdown("test");
    expect(ops.daemon.phase).toBe("stopped");
    const shutdown = ops.logs.filter((l) => String(l.event).startsWith("shutdown."));
    expect(shutdown.map((l) => l.event)).toEqual(["shutdown.begins", "shutdown.grace_skipped", "shutdown.stopped"]);
    expect(shutdown[1]).toMatchObject({ why: "idle", graceMs: 3_600_000 });
    await expect(fetch(ops.url("/livez"), { signal: AbortSignal.timeout(5000) })).rejects.toThrow();
  });

  for (const [what, call] of [
    ["a probe of /readyz", async (ops: TestDaemon) => expect((await ops.get("/readyz")).status).toBe(200)],
    ["a scrape of /metrics", async (ops: TestDaemon) => expect((await ops.get("/metrics")).status).toBe(200)],
    [
      "a lock session (ended before the stop)",
      async (ops: TestDaemon) => {
        const peer = await WirePeer.claim(ops.port, "called", 5000);
        peer.end();
        await peer.closed();
      },
    ],
  ] as const) {
    test(`after ${what} since start, the stop keeps its grace: the ops server answers in it until it ends`, async () => {
      await using ops = startDaemon({ shutdownGraceMs: 3_600_000 });
      await call(ops);
      const done = ops.daemon.shutdown("test");
      await ops.daemon.graceStarted;
      expect(ops.logs.filter((l) => String(l.event).startsWith("shutdown.")).map((l) => l.event)).toEqual(["shutdown.begins", "shutdown.grace"]);
      expect((await ops.get("/readyz")).status).toBe(503);
      expect(ops.daemon.phase).toBe("grace");
      await ops.daemon.close(); // ends the grace early
      await done;
      expect(ops.daemon.phase).toBe("stopped");
    });
  }

  test("the first signal starts the shutdown, a second one after the repeat window forces the exit at once", async () => {
    await using ops = startDaemon({ shutdownGraceMs: 60_000, signalRepeatWindowMs: 1000 });
    let forced = 0;
    ops.daemon.signal("SIGTERM", () => forced++, 5000);
    expect(ops.daemon.ready).toBe(false);
    expect(forced).toBe(0);
    ops.daemon.signal("SIGTERM", () => forced++, 6000);
    expect(forced).toBe(1);
    expect(ops.logs.some((l) => l.event === "shutdown.forced")).toBe(true);
  });

  test("the same signal again within the repeat window is the same stop request: the shutdown goes on, no forced exit", async () => {
    await using ops = startDaemon({ shutdownGraceMs: 60_000, signalRepeatWindowMs: 1000 });
    expect((await ops.get("/livez")).status).toBe(200); // someone called: the grace is kept
    let forced = 0;
    // A process-group SIGINT: once directly, once relayed by the shim, once more by npm.
    ops.daemon.signal("SIGINT", () => forced++, 5000);
    ops.daemon.signal("SIGINT", () => forced++, 5000.5);
    ops.daemon.signal("SIGINT", () => forced++, 5999);
    expect(forced).toBe(0);
    expect(ops.logs.filter((l) => l.event === "shutdown.signal_repeated")).toHaveLength(2);
    expect(ops.logs.some((l) => l.event === "shutdown.forced")).toBe(false);
    await ops.daemon.graceStarted;
    expect(ops.daemon.phase).toBe("grace");
    // The window is measured from the first signal: a later repeat is a deliberate second one.
    ops.daemon.signal("SIGINT", () => forced++, 6000);
    expect(forced).toBe(1);
  });

  test("a different signal within the repeat window is a second request and forces the exit", async () => {
    await using ops = startDaemon({ shutdownGraceMs: 60_000, signalRepeatWindowMs: 1000 });
    let forced = 0;
    ops.daemon.signal("SIGTERM", () => forced++, 5000);
    ops.daemon.signal("SIGINT", () => forced++, 5001);
    expect(forced).toBe(1);
    expect(ops.logs.find((l) => l.event === "shutdown.forced")).toMatchObject({ signal: "SIGINT", first: "SIGTERM" });
  });
});
