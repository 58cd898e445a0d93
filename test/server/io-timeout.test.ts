// io-timeout: a peer that never sends ACQUIRE and one that stops mid-frame
// are each ended within io-timeout, never before it, while a concurrent
// session keeps heartbeating unharmed.
import { describe, expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { watchEnds } from "../helpers/ends.ts";
import { steadyHolder } from "../helpers/steady.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";

const IO_TIMEOUT = 300;

describe("io-timeout", () => {
  test("no ACQUIRE: IO_TIMEOUT after io-timeout from the accept, not before", async () => {
    await using server = startServer({ ioTimeoutMs: IO_TIMEOUT });
    const control = await steadyHolder(server.port, "control", 2000, 20);
    // Taken before connecting: the server accepts after this, but possibly before
    // the connect resolves here (the accept and the connect are two events of one loop).
    const connecting = performance.now();
    const peer = await WirePeer.connect(server.port);
    const error = await peer.frame(0, 5000);
    expect([error.type, error.code]).toEqual([FrameType.ERROR, ErrorCode.IO_TIMEOUT]);
    expect(error.at - connecting).toBeGreaterThanOrEqual(IO_TIMEOUT);
    await peer.closed();
    await control.finish();
  });

  test("a frame started and never finished: IO_TIMEOUT", async () => {
    await using server = startServer({ ioTimeoutMs: IO_TIMEOUT });
    const control = await steadyHolder(server.port, "control", 2000, 20);
    const peer = await WirePeer.claim(server.port, "L", 60_000);
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

  // A peer that stops reading cannot make the server's output pile up any
  // more by flooding heartbeats: the flood is cut at its first read past
  // PIPELINE_LIMIT frames (pipelining.test.ts). The write deadline and the
  // outbox cap are covered with a scripted socket (outbox.test.ts) and in
  // the engine (test/core/engine.test.ts).
});
