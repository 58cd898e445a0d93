// protocol.md section 7, byte for byte, in both directions.
import { describe, expect, test } from "bun:test";
import {
  CLIENT_FRAMES,
  ErrorCode,
  FLAG_REPLY,
  FrameLimits,
  FrameReader,
  FrameType,
  HEARTBEAT_FRAME,
  ReadResult,
  SERVER_FRAMES,
  WAITING_REPLY_FRAME,
  decodeAcquire,
  decodeAcquired,
  decodeError,
  encodeAcquire,
  encodeAcquired,
  encodeError,
  ErrorClass,
  errorClassOf,
  errorCodeName,
} from "../../src/protocol/index.ts";

const hex = (text: string) => new Uint8Array(text.trim().split(/\s+/).map((b) => parseInt(b, 16)));

const ACQUIRE_VECTOR = hex("01 00 00 14  01 00 00 00 13 88 00 0c  6a 6f 62 73 2f 6e 69 67 68 74 6c 79");
const HEARTBEAT_VECTOR = hex("02 00 00 00");
const ACQUIRED_REPLY_VECTOR = hex("81 01 00 08  00 00 00 00 00 00 00 01");
const ACQUIRED_PUSH_VECTOR = hex("81 00 00 08  00 00 00 00 00 00 00 07");
const WAITING_REPLY_VECTOR = hex("82 01 00 00");
const LOCK_BUSY_VECTOR = hex("ff 00 00 0d  13 6c 6f 63 6b 20 69 73 20 68 65 6c 64");
const WRONG_SHARD_VECTOR = hex("ff 00 00 0c  24 73 68 61 72 64 20 67 61 6d 6d 61");

interface Frame {
  type: number;
  flags: number;
  body: Uint8Array;
}

function read(limits: FrameLimits, bytes: Uint8Array): Frame[] {
  const frames: Frame[] = [];
  const reader = new FrameReader(limits);
  const result = reader.push(bytes, {
    onFrame(type, flags, b, offset, length) {
      frames.push({ type, flags, body: b.slice(offset, offset + length) });
      return true;
    },
  });
  expect(result).toBe(ReadResult.OK);
  expect(reader.partial).toBe(false);
  return frames;
}

const clientLimits = new FrameLimits(CLIENT_FRAMES);
const serverLimits = new FrameLimits(SERVER_FRAMES);

describe("encoders produce the vectors", () => {
  test("ACQUIRE jobs/nightly, lease 5000, no options, no owner", () => {
    expect(encodeAcquire({ name: "jobs/nightly", leaseMs: 5000, owner: "", try: false })).toEqual(ACQUIRE_VECTOR);
  });
  test("HEARTBEAT", () => expect(HEARTBEAT_FRAME).toEqual(HEARTBEAT_VECTOR));
  test("ACQUIRED, REPLY, token 1", () => expect(encodeAcquired(1, FLAG_REPLY)).toEqual(ACQUIRED_REPLY_VECTOR));
  test("ACQUIRED, push, token 7", () => expect(encodeAcquired(7, 0)).toEqual(ACQUIRED_PUSH_VECTOR));
  test("WAITING, REPLY", () => expect(WAITING_REPLY_FRAME).toEqual(WAITING_REPLY_VECTOR));
  test("ERROR LOCK_BUSY", () => expect(encodeError(ErrorCode.LOCK_BUSY, "lock is held")).toEqual(LOCK_BUSY_VECTOR));
  test("ERROR WRONG_SHARD", () => expect(encodeError(ErrorCode.WRONG_SHARD, "shard gamma")).toEqual(WRONG_SHARD_VECTOR));
});

describe("decoders read the vectors", () => {
  test("ACQUIRE", () => {
    const [frame] = read(clientLimits, ACQUIRE_VECTOR);
    expect(frame!.type).toBe(FrameType.ACQUIRE);
    const decoded = decodeAcquire(frame!.body, 0, frame!.body.length);
    expect(decoded).toEqual({ ok: true, request: { name: "jobs/nightly", leaseMs: 5000, owner: "", try: false, limit: 1, shared: false } });
  });
  test("HEARTBEAT", () => {
    expect(read(clientLimits, HEARTBEAT_VECTOR)).toEqual([{ type: FrameType.HEARTBEAT, flags: 0, body: new Uint8Array(0) }]);
  });
  test("ACQUIRED reply and push", () => {
    const frames = read(serverLimits, new Uint8Array([...ACQUIRED_REPLY_VECTOR, ...ACQUIRED_PUSH_VECTOR]));
    expect(frames.map((f) => [f.type, f.flags, decodeAcquired(f.body, 0)])).toEqual([
      [FrameType.ACQUIRED, FLAG_REPLY, 1n],
      [FrameType.ACQUIRED, 0, 7n],
    ]);
  });
  test("WAITING reply", () => {
    expect(read(serverLimits, WAITING_REPLY_VECTOR)).toEqual([{ type: FrameType.WAITING, flags: FLAG_REPLY, body: new Uint8Array(0) }]);
  });
  test("ERROR LOCK_BUSY", () => {
    const [frame] = read(serverLimits, LOCK_BUSY_VECTOR);
    expect(decodeError(frame!.body, 0, frame!.body.length)).toEqual({ code: ErrorCode.LOCK_BUSY, message: "lock is held" });
  });
  test("ERROR WRONG_SHARD: class 0x2_, named", () => {
    const [frame] = read(serverLimits, WRONG_SHARD_VECTOR);
    expect(decodeError(frame!.body, 0, frame!.body.length)).toEqual({ code: ErrorCode.WRONG_SHARD, message: "shard gamma" });
    expect(errorClassOf(ErrorCode.WRONG_SHARD)).toBe(ErrorClass.CLIENT);
    expect(errorCodeName(0x24)).toBe("WRONG_SHARD");
  });
});

describe("token encoding", () => {
  test.each([0, 1, 255, 256, 2 ** 32 - 1, 2 ** 32, 2 ** 32 + 1, 2 ** 53 - 1])("token %p round-trips as u64", (token) => {
    const frame = encodeAcquired(token, 0);
    expect(decodeAcquired(frame, 4)).toBe(BigInt(token));
  });
});

describe("encoder limits", () => {
  test("error messages are cut to 1024 bytes without splitting a character", () => {
    const frame = encodeError(ErrorCode.BAD_REQUEST, "é".repeat(600)); // 1200 bytes
    const body = frame.subarray(4);
    expect(body.length).toBeLessThanOrEqual(1025);
    const { message } = decodeError(body, 0, body.length);
    expect(message).toBe("é".repeat(512));
  });
  test("encodeAcquire refuses what no server accepts", () => {
    expect(() => encodeAcquire({ name: "", leaseMs: 1, owner: "", try: false })).toThrow(RangeError);
    expect(() => encodeAcquire({ name: "x".repeat(513), leaseMs: 1, owner: "", try: false })).toThrow(RangeError);
    expect(() => encodeAcquire({ name: "x", leaseMs: 0, owner: "", try: false })).toThrow(RangeError);
    expect(() => encodeAcquire({ name: "x", leaseMs: 2 ** 32, owner: "", try: false })).toThrow(RangeError);
    expect(() => encodeAcquire({ name: "x", leaseMs: 1, owner: "o".repeat(257), try: false })).toThrow(RangeError);
  });
  test("largest lease and longest name and owner fit", () => {
    const frame = encodeAcquire({ name: "n".repeat(512), leaseMs: 2 ** 32 - 1, owner: "o".repeat(256), try: true });
    expect(frame.length).toBe(4 + 776);
    const decoded = decodeAcquire(frame, 4, 776);
    expect(decoded.ok && decoded.request.leaseMs).toBe(2 ** 32 - 1);
    expect(decoded.ok && decoded.request.try).toBe(true);
  });
});
