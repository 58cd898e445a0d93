import { describe, expect, test } from "bun:test";
import { Logger, RateLimit } from "../../src/log/logger.ts";
import { ErrorCode } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon } from "./harness.ts";

describe("Logger", () => {
  test("levels: lines below the threshold are not written", () => {
    const lines: string[] = [];
    const log = new Logger("warn", (line) => lines.push(line));
    log.debug("session.opened", "d");
    log.info("admin.kick", "i");
    log.warn("shutdown.forced", "w", { k: 1 });
    log.error("ops.request_failed", "e");
    expect(lines.map((l) => JSON.parse(l).event)).toEqual(["shutdown.forced", "ops.request_failed"]);
    const line = JSON.parse(lines[0]!);
    expect(line).toMatchObject({ level: "warn", event: "shutdown.forced", msg: "w", k: 1 });
    expect(Object.keys(line).slice(0, 4)).toEqual(["time", "level", "event", "msg"]);
    expect(Number.isNaN(Date.parse(line.time))).toBe(false);
    expect(lines.every((l) => l.endsWith("\n") && !l.slice(0, -1).includes("\n"))).toBe(true);
  });

  test("codes are typed: an unknown code, one of another level, or none fails the typecheck", () => {
    const lines: string[] = [];
    const log = new Logger("debug", (line) => lines.push(line));
    // @ts-expect-error: no such code
    log.info("admin.kik", "a typo");
    // @ts-expect-error: shutdown.forced is a warning
    log.info("shutdown.forced", "another level");
    // @ts-expect-error: the code is required
    log.info("a sentence alone");
    // @ts-expect-error: limited() checks the code against its level too
    log.limited(new RateLimit(), "error", "session.protocol_error", "another level", () => ({}));
    expect(lines).toHaveLength(4); // at run time the Logger writes what it is given
  });

  test("RateLimit: a burst, then one per interval; reports what it dropped", () => {
    const limit = new RateLimit(3, 1000);
    expect([limit.take(0), limit.take(0), limit.take(0)]).toEqual([0, 0, 0]);
    expect(limit.take(1)).toBe(-1);
    expect(limit.take(2)).toBe(-1);
    expect(limit.take(999)).toBe(-1);
    expect(limit.take(1001)).toBe(3); // refilled one token; three were dropped
    expect(limit.take(1002)).toBe(-1);
    expect([limit.take(10_000), limit.take(10_000), limit.take(10_000), limit.take(10_000)]).toEqual([1, 0, 0, -1]);
  });

  test("limited(): dropped lines cost no field building, are counted, and the next line says how many", () => {
    const lines: Record<string, unknown>[] = [];
    const log = new Logger("info", (line) => lines.push(JSON.parse(line)));
    const limit = new RateLimit(2, 1000);
    let built = 0;
    const fields = () => ({ n: ++built });
    for (let i = 0; i < 10; i++) log.limited(limit, "warn", "session.protocol_error", "flood", fields, 0);
    expect(lines).toHaveLength(2);
    expect(built).toBe(2);
    expect(log.suppressed).toBe(8);
    log.limited(limit, "warn", "session.protocol_error", "flood", fields, 5000);
    expect(lines[2]).toMatchObject({ event: "session.protocol_error", suppressed: 8 });
  });
});

describe("server logs", () => {
  test("at the default level, session lifecycle writes nothing", async () => {
    await using ops = startDaemon();
    const before = ops.logs.length;
    const a = await WirePeer.claim(ops.port, "quiet", 5000);
    const b = await WirePeer.claim(ops.port, "quiet", 5000);
    a.end();
    await b.frame(1);
    b.end();
    await b.closed();
    await a.closed();
    expect(ops.logs.slice(before)).toEqual([]);
  });

  test("at debug, opens and ends are logged with session, remote, lock and reason", async () => {
    await using ops = startDaemon({ logLevel: "debug" });
    const a = await WirePeer.claim(ops.port, "loud", 5000, { owner: "me" });
    a.end();
    await a.closed();
    const end = () => ops.logs.find((l) => l.event === "session.ended");
    for (let i = 0; i < 5000 && end() === undefined; i++) await Bun.sleep(1); // no event tells the test when the server saw the FIN
    expect(ops.logs.find((l) => l.event === "session.opened")).toMatchObject({ level: "debug", session: 1, remote: expect.stringMatching(/^127\.0\.0\.1:\d+$/) });
    expect(end()).toMatchObject({ level: "debug", session: 1, lock: "loud", owner: "me", reason: "closed" });
  });

  test("a flood of protocol errors is rate-limited: few lines, the rest counted", async () => {
    await using ops = startDaemon();
    const flood = 40;
    const peers: WirePeer[] = [];
    for (let i = 0; i < flood; i++) {
      const p = await WirePeer.connect(ops.port);
      p.write([0x7f, 0, 0, 0]);
      peers.push(p);
    }
    for (const p of peers) {
      await p.closed();
      expect(p.frames[0]!.code).toBe(ErrorCode.PROTOCOL_ERROR);
    }
    const warned = () => ops.logs.filter((l) => l.event === "session.protocol_error");
    expect(warned().length + ops.log.suppressed).toBe(flood);
    expect(warned().length).toBeGreaterThanOrEqual(10);
    expect(warned().length).toBeLessThan(flood);
    expect(warned()[0]).toMatchObject({ level: "warn", reason: "PROTOCOL_ERROR", remote: expect.stringMatching(/^127\.0\.0\.1/) });
    expect(warned().some((l) => typeof l.suppressed === "number") || warned().length === 10).toBe(true);
  });

  test("an io-timeout is a warning", async () => {
    await using ops = startDaemon({ ioTimeoutMs: 50 });
    const silent = await WirePeer.connect(ops.port);
    const frame = await silent.frame(0);
    expect(frame.code).toBe(ErrorCode.IO_TIMEOUT);
    await silent.closed();
    // Logged before the ERROR frame was written, so it is there once the frame is.
    expect(ops.logs.find((l) => l.event === "session.io_timeout")).toMatchObject({
      level: "warn",
      reason: "IO_TIMEOUT",
      lock: null,
      remote: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
    });
  });
});
