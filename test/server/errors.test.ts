// Every ERROR code a client can provoke, each from the input that causes
// it; after each one, only that session is gone and the server serves on.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ErrorCode, FLAG_REPLY, FrameType, encodeAcquire } from "../../src/protocol/index.ts";
import type { LockServer } from "../../src/server/index.ts";
import { rawAcquireFrame } from "../helpers/raw-acquire.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

const acquireBody = rawAcquireFrame;

const ascii = (s: string) => Array.from(new TextEncoder().encode(s));
const HEARTBEAT = [2, 0, 0, 0];

const cases: { name: string; bytes: number[]; code: number }[] = [
  { name: "HTTP bytes sent to the lock port", bytes: ascii("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), code: ErrorCode.PROTOCOL_ERROR },
  { name: "a zero lease", bytes: acquireBody({ lease: 0, name: ascii("x") }), code: ErrorCode.BAD_REQUEST },
  { name: "a 513-byte name", bytes: acquireBody({ name: new Array(513).fill(0x61) }), code: ErrorCode.BAD_REQUEST },
  { name: "invalid UTF-8 in the name", bytes: acquireBody({ name: [0x61, 0xff, 0x62] }), code: ErrorCode.BAD_REQUEST },
  { name: "a control character in the name", bytes: acquireBody({ name: ascii("a\nb") }), code: ErrorCode.BAD_REQUEST },
  { name: "an undefined option bit", bytes: acquireBody({ options: 0x08, name: ascii("x") }), code: ErrorCode.BAD_REQUEST },
  { name: "version 2", bytes: acquireBody({ version: 2, name: ascii("x") }), code: ErrorCode.UNSUPPORTED_VERSION },
  { name: "name_length past the end of the body", bytes: acquireBody({ name: ascii("abc"), nameLength: 40 }), code: ErrorCode.PROTOCOL_ERROR },
  { name: "HEARTBEAT before ACQUIRE", bytes: HEARTBEAT, code: ErrorCode.PROTOCOL_ERROR },
  { name: "a header announcing 65,535 body bytes for HEARTBEAT", bytes: [2, 0, 0xff, 0xff], code: ErrorCode.PROTOCOL_ERROR },
  { name: "an unknown frame type", bytes: [0x03, 0, 0, 0], code: ErrorCode.PROTOCOL_ERROR },
  { name: "a server frame type (ACQUIRED) from a client", bytes: [0x81, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1], code: ErrorCode.PROTOCOL_ERROR },
  { name: "an ACQUIRE body shorter than 9 bytes", bytes: [1, 0, 0, 8, 1, 0, 0, 0, 3, 0xe8, 0, 0], code: ErrorCode.PROTOCOL_ERROR },
];

describe("bad input ends only the offending session", () => {
  let server: LockServer;
  let control: WirePeer;
  let controlToken: bigint;
  let frames = 0;

  beforeAll(async () => {
    server = startServer();
    control = await WirePeer.connect(server.port);
    control.acquire("control", 60_000);
    controlToken = (await control.frame(frames++)).token!;
  });

  afterAll(async () => {
    control.end();
    await server.stop();
  });

  async function controlStillServed(): Promise<void> {
    control.heartbeat();
    const reply = await control.frame(frames++);
    expect([reply.type, reply.flags, reply.token]).toEqual([FrameType.ACQUIRED, FLAG_REPLY, controlToken]);
  }

  for (const c of cases) {
    test(`${c.name}: ERROR 0x${c.code.toString(16)}, then close`, async () => {
      const peer = await WirePeer.connect(server.port);
      peer.write(c.bytes);
      const error = await peer.frame(0);
      expect(error.type).toBe(FrameType.ERROR);
      expect(error.code).toBe(c.code);
      expect(error.message!.length).toBeGreaterThan(0);
      await peer.closed();
      expect(peer.frames.length).toBe(1);
      await controlStillServed();
      // A fresh session on another lock works too.
      const fresh = await WirePeer.claim(server.port, `fresh-${c.code}`, 60_000);
      expect(fresh.frames[0]!.type).toBe(FrameType.ACQUIRED);
      fresh.end();
    });
  }

  test("a second ACQUIRE: PROTOCOL_ERROR, and the lock it held goes to the next waiter", async () => {
    const owner = await WirePeer.claim(server.port, "twice", 60_000);
    const waiter = await WirePeer.claim(server.port, "twice", 60_000);
    owner.acquire("other", 60_000);
    const error = await owner.frame(1);
    expect([error.type, error.code]).toEqual([FrameType.ERROR, ErrorCode.PROTOCOL_ERROR]);
    await owner.closed();
    expect((await waiter.frame(1)).type).toBe(FrameType.ACQUIRED);
    waiter.end();
    await controlStillServed();
  });

  test("TRY on a held lock: LOCK_BUSY 'lock is held', byte for byte", async () => {
    const peer = await WirePeer.connect(server.port);
    peer.write(encodeAcquire({ name: "control", leaseMs: 1000, owner: "", try: true }));
    const error = await peer.frame(0);
    expect(Array.from(error.body)).toEqual([0x13, ...ascii("lock is held")]);
    await peer.closed();
    await controlStillServed();
  });

  test("frames glued behind a bad one are never processed", async () => {
    const peer = await WirePeer.connect(server.port);
    peer.write([...HEARTBEAT, ...Array.from(encodeAcquire({ name: "glued", leaseMs: 1000, owner: "", try: false }))]);
    expect((await peer.frame(0)).code).toBe(ErrorCode.PROTOCOL_ERROR);
    await peer.closed();
    expect(engineOf(server).locks.has("glued")).toBe(false);
  });

  test("OVERLOADED beyond the session limit, at accept", async () => {
    await using small = startServer({ maxSessions: 1 });
    const first = await WirePeer.claim(small.port, "x", 60_000);
    const second = await WirePeer.connect(small.port);
    const error = await second.frame(0);
    expect([error.type, error.code]).toEqual([FrameType.ERROR, ErrorCode.OVERLOADED]);
    await second.closed();
    first.heartbeat();
    expect((await first.frame(1)).type).toBe(FrameType.ACQUIRED);
    first.end();
  });

  test("SHUTTING_DOWN to every session on stop, and no handover", async () => {
    const stopping = startServer();
    const owner = await WirePeer.claim(stopping.port, "x", 60_000);
    const waiter = await WirePeer.claim(stopping.port, "x", 60_000);
    await stopping.stop();
    for (const peer of [owner, waiter]) {
      const error = await peer.frame(1);
      expect([error.type, error.code]).toEqual([FrameType.ERROR, ErrorCode.SHUTTING_DOWN]);
      await peer.closed();
      expect(peer.frames.length).toBe(2);
    }
    expect(stopping.connectionCount).toBe(0);
  });
});
