// ACQUIRE validation: each bad field gets its protocol.md error code.
import { describe, expect, test } from "bun:test";
import { ErrorCode, decodeAcquire, encodeAcquire } from "../../src/protocol/index.ts";
import { rawAcquireBody } from "../helpers/raw-acquire.ts";

const body = rawAcquireBody;

function codeOf(bytes: Uint8Array): number | "ok" {
  const decoded = decodeAcquire(bytes, 0, bytes.length);
  return decoded.ok ? "ok" : decoded.code;
}

describe("decodeAcquire", () => {
  test("a valid request decodes, owner included", () => {
    const frame = encodeAcquire({ name: "db/primary", leaseMs: 30000, owner: "host-12/pid-4411", try: true });
    expect(decodeAcquire(frame, 4, frame.length - 4)).toEqual({
      ok: true,
      request: { name: "db/primary", leaseMs: 30000, owner: "host-12/pid-4411", try: true, limit: 1, shared: false },
    });
  });
  test("version other than 1: UNSUPPORTED_VERSION naming the versions spoken", () => {
    const decoded = decodeAcquire(body({ version: 2 }), 0, 9);
    expect(decoded.ok).toBe(false);
    if (!decoded.ok) {
      expect(decoded.code).toBe(ErrorCode.UNSUPPORTED_VERSION);
      expect(decoded.message).toContain("version 1");
    }
  });
  test("undefined option bits: BAD_REQUEST", () => {
    for (const bit of [0x08, 0x10, 0x20, 0x40, 0x80]) expect(codeOf(body({ options: bit }))).toBe(ErrorCode.BAD_REQUEST);
    expect(codeOf(body({ options: 0x02 }))).toBe("ok"); // SHARED
    expect(codeOf(body({ options: 0x01 }))).toBe("ok");
  });
  test("lease 0: BAD_REQUEST; lease 1 and 2^32-1 accepted", () => {
    expect(codeOf(body({ lease: 0 }))).toBe(ErrorCode.BAD_REQUEST);
    expect(codeOf(body({ lease: 1 }))).toBe("ok");
    expect(codeOf(body({ lease: 0xffffffff }))).toBe("ok");
  });
  test("empty name: BAD_REQUEST", () => {
    expect(codeOf(body({ name: [], owner: [0x6f] }))).toBe(ErrorCode.BAD_REQUEST);
  });
  test("513-byte name: BAD_REQUEST; 512 accepted", () => {
    expect(codeOf(body({ name: new Array(513).fill(0x61) }))).toBe(ErrorCode.BAD_REQUEST);
    expect(codeOf(body({ name: new Array(512).fill(0x61) }))).toBe("ok");
  });
  test("owner over 256 bytes: BAD_REQUEST", () => {
    expect(codeOf(body({ owner: new Array(257).fill(0x6f) }))).toBe(ErrorCode.BAD_REQUEST);
    expect(codeOf(body({ owner: new Array(256).fill(0x6f) }))).toBe("ok");
  });
  test("name_length past the end of the body: PROTOCOL_ERROR", () => {
    expect(codeOf(body({ nameLength: 5, name: [0x61, 0x62] }))).toBe(ErrorCode.PROTOCOL_ERROR);
  });
  test("invalid UTF-8 or control characters in name or owner: BAD_REQUEST", () => {
    for (const name of [[0xff], [0xc3], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0x61, 0x00], [0x0a], [0x7f], [0xc2, 0x85]]) {
      expect(codeOf(body({ name }))).toBe(ErrorCode.BAD_REQUEST);
      expect(codeOf(body({ owner: name }))).toBe(ErrorCode.BAD_REQUEST);
    }
  });
});
