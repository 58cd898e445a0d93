// io-timeout: a peer that never sends ACQUIRE, one that stops mid-frame,
// and one that stops reading while the server must write are each ended
// within io-timeout, never before it, while a concurrent session keeps
// heartbeating unharmed.
import { describe, expect, test } from "bun:test";
import { ErrorCode, FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import type { LockServer } from "../../src/server/index.ts";
import { watchEnds } from "../helpers/ends.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";

const IO_TIMEOUT = 300;

/** A session on its own lock that heartbeats every 20 ms and checks each reply. */
async function heartbeater(server: LockServer) {
  const peer = await WirePeer.connect(server.port);
  peer.acquire("control", 2000);
  const token = (await peer.frame(0)).token;
  let count = 1;
  let stop = false;
  let worst = 0;
  const loop = (async () => {
    while (!stop) {
      const sent = performance.now();
      peer.heartbeat();
      const reply = await peer.frame(count++, 2000);
      worst = Math.max(worst, reply.at - sent);
      expect([reply.type, reply.flags, reply.token]).toEqual([FrameType.ACQUIRED, FLAG_REPLY, token]);
      await Bun.sleep(20); // its heartbeat interval
    }
  })();
  return {
    async finish() {
      stop = true;
      await loop;
      expect(peer.isClosed).toBe(false);
      peer.end();
      return { count, worst };
    },
  };
}

describe("io-timeout", () => {
  test("no ACQUIRE: IO_TIMEOUT after io-timeout from the accept, not before", async () => {
    await using server = startServer({ ioTimeoutMs: IO_TIMEOUT });
    const control = await heartbeater(server);
    const peer = await WirePeer.connect(server.port);
    const connected = performance.now();
    const error = await peer.frame(0, 5000);
    expect([error.type, error.code]).toEqual([FrameType.ERROR, ErrorCode.IO_TIMEOUT]);
    expect(error.at - connected).toBeGreaterThanOrEqual(IO_TIMEOUT);
    await peer.closed();
    await control.finish();
  });

  test("a frame started and never finished: IO_TIMEOUT", async () => {
    await using server = startServer({ ioTimeoutMs: IO_TIMEOUT });
    const control = await heartbeater(server);
    const peer = await WirePeer.connect(server.port);
    peer.acquire("L", 60_000);
    await peer.frame(0);
    const sent = performance.now();
    peer.write([2, 0]); // half a HEARTBEAT header
    const error = await peer.frame(1, 5000);
    expect([error.type, error.code]).toEqual([FrameType.ERROR, ErrorCode.IO_TIMEOUT]);
    expect(error.at - sent).toBeGreaterThanOrEqual(IO_TIMEOUT);
    await peer.closed();
    await control.finish();
  });

  test("a partial first frame does not extend the first-frame deadline", async () => {
    await using server = startServer({ ioTimeoutMs: IO_TIMEOUT });
    const peer = await WirePeer.connect(server.port);
    peer.write([1, 0, 0]);
    const error = await peer.frame(0, 5000);
    expect(error.code).toBe(ErrorCode.IO_TIMEOUT);
  });

  // The peer pauses reading and sends 500,000 heartbeats (2 MB); the server's
  // 6 MB of replies overflow the kernel buffers (about 4 MB on loopback).
  async function floodWithoutReading(server: LockServer) {
    const peer = await WirePeer.connect(server.port);
    peer.acquire("stuck", 60_000);
    await peer.frame(0);
    const sessionId = [...server.engine.sessions.values()].find((s) => s.lock?.name === "stuck")!.id;
    peer.pause();
    const flood = new Uint8Array(4 * 500_000);
    for (let i = 0; i < flood.length; i += 4) flood[i] = FrameType.HEARTBEAT;
    await peer.writeAll(flood);
    return { peer, sessionId };
  }

  test("a peer that stops reading is cut at io-timeout while another keeps its schedule", async () => {
    await using server = startServer({ ioTimeoutMs: IO_TIMEOUT, outboxLimit: 64 * 1024 * 1024 });
    const ends = watchEnds(server);
    const control = await heartbeater(server);
    const { peer, sessionId } = await floodWithoutReading(server);
    const flooded = performance.now();
    await ends.until((e) => e.some((x) => x.sessionId === sessionId), 10_000);
    const end = ends.ends.find((x) => x.sessionId === sessionId)!;
    expect(end.code).toBe(ErrorCode.IO_TIMEOUT);
    expect(server.engine.sessions.has(sessionId)).toBe(false);
    expect(end.at - flooded).toBeLessThan(IO_TIMEOUT + 3000);
    const { count } = await control.finish();
    expect(count).toBeGreaterThan(2);
    peer.terminate();
  });

  test("a peer that sends without reading is cut once its unflushed output passes the outbox limit", async () => {
    await using server = startServer({ ioTimeoutMs: 60_000 }); // the limit, not the timer, must act
    const ends = watchEnds(server);
    const control = await heartbeater(server);
    const { peer, sessionId } = await floodWithoutReading(server);
    await ends.until((e) => e.some((x) => x.sessionId === sessionId), 10_000);
    expect(ends.ends.find((x) => x.sessionId === sessionId)!.code).toBe(ErrorCode.IO_TIMEOUT);
    await control.finish();
    peer.terminate();
  });
});
