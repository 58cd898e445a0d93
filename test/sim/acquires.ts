/**
 * ACQUIRE frames with exactly one defect each, and the ERROR code that
 * protocol.md sections 3, 4 and 13 give for that defect. Built byte by byte here
 * (not with encodeAcquire, which refuses to build them).
 */
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import type { Rng } from "./prng.ts";

export interface BadAcquire {
  readonly frame: Uint8Array;
  readonly code: ErrorCode;
  readonly what: string;
}

const utf8 = new TextEncoder();

/** An ACQUIRE frame from its fields; `nameLength` may lie about the name. */
export function rawAcquire(version: number, options: number, leaseMs: number, name: Uint8Array, owner: Uint8Array, nameLength = name.length): Uint8Array {
  const body = 8 + name.length + owner.length;
  const frame = new Uint8Array(4 + body);
  const view = new DataView(frame.buffer);
  frame[0] = FrameType.ACQUIRE;
  view.setUint16(2, body);
  frame[4] = version;
  frame[5] = options;
  view.setUint32(6, leaseMs);
  view.setUint16(10, nameLength);
  frame.set(name, 12);
  frame.set(owner, 12 + name.length);
  return frame;
}

/** An ACQUIRE with OPTION_LIMIT (plus `options`): the u16 limit at body offset 6, name_length at 8. */
export function rawLimitAcquire(options: number, leaseMs: number, limit: number, name: Uint8Array, owner: Uint8Array): Uint8Array {
  const body = 10 + name.length + owner.length;
  const frame = new Uint8Array(4 + body);
  const view = new DataView(frame.buffer);
  frame[0] = FrameType.ACQUIRE;
  view.setUint16(2, body);
  frame[4] = 1;
  frame[5] = options | 0x04;
  view.setUint32(6, leaseMs);
  view.setUint16(10, limit);
  view.setUint16(12, name.length);
  frame.set(name, 14);
  frame.set(owner, 14 + name.length);
  return frame;
}

const CONTROL_TEXTS = ["a\u0001b", "tab\there", "\u007f", "c1\u0085", "nul\u0000", "\u009f"];
const INVALID_UTF8: readonly (readonly number[])[] = [
  [0xff],
  [0x61, 0xc0, 0x80], // overlong NUL
  [0xed, 0xa0, 0x80], // a surrogate
  [0xe2, 0x82], // truncated
  [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
  [0x80],
  [0xf8, 0x88, 0x80, 0x80, 0x80],
];

export function badAcquire(rng: Rng): BadAcquire {
  const name = utf8.encode(rng.pick(["a", "b", "jobs/nightly"]));
  const owner = utf8.encode(rng.pick(["", "host-1/pid-2"]));
  const lease = rng.range(1, 10_000);
  switch (rng.int(13)) {
    case 0: {
      const version = rng.pick([0, 2, 255]);
      return { frame: rawAcquire(version, 0, lease, name, owner), code: ErrorCode.UNSUPPORTED_VERSION, what: `version ${version}` };
    }
    case 1: {
      const options = (rng.chance(0.5) ? 1 : 0) | (1 << rng.range(3, 7)); // bits 0..2 are TRY, SHARED, LIMIT
      return { frame: rawAcquire(1, options, lease, name, owner), code: ErrorCode.BAD_REQUEST, what: `options 0x${options.toString(16)}` };
    }
    case 2:
      return { frame: rawAcquire(1, 0, 0, name, owner), code: ErrorCode.BAD_REQUEST, what: "lease 0" };
    case 3: {
      const claimed = name.length + owner.length + rng.range(1, 600);
      return { frame: rawAcquire(1, 0, lease, name, owner, claimed), code: ErrorCode.PROTOCOL_ERROR, what: `name_length ${claimed} past the body` };
    }
    case 4:
      return { frame: rawAcquire(1, 0, lease, new Uint8Array(0), utf8.encode("owner")), code: ErrorCode.BAD_REQUEST, what: "empty name" };
    case 5: {
      const bad = rng.chance(0.5) ? utf8.encode(rng.pick(CONTROL_TEXTS)) : new Uint8Array(rng.pick(INVALID_UTF8));
      return { frame: rawAcquire(1, 0, lease, bad, owner), code: ErrorCode.BAD_REQUEST, what: "bad name text" };
    }
    case 6: {
      const bad = rng.chance(0.5) ? utf8.encode(rng.pick(CONTROL_TEXTS)) : new Uint8Array(rng.pick(INVALID_UTF8));
      return { frame: rawAcquire(1, 0, lease, name, bad), code: ErrorCode.BAD_REQUEST, what: "bad owner text" };
    }
    case 7:
      return { frame: rawAcquire(1, 0, lease, name, utf8.encode("o".repeat(257))), code: ErrorCode.BAD_REQUEST, what: "owner of 257 bytes" };
    case 8:
      return { frame: rawAcquire(1, 0, lease, utf8.encode("n".repeat(513)), owner), code: ErrorCode.BAD_REQUEST, what: "name of 513 bytes" };
    case 9:
      return { frame: rawLimitAcquire(rng.chance(0.5) ? 1 : 0, lease, 0, name, owner), code: ErrorCode.BAD_REQUEST, what: "limit 0" };
    case 10: {
      const limit = rng.range(2, 65_535);
      return { frame: rawLimitAcquire(0x02, lease, limit, name, owner), code: ErrorCode.BAD_REQUEST, what: `SHARED with limit ${limit}` };
    }
    case 11: {
      // LIMIT set on a 9-byte body: the limit and name_length fields run past it.
      const frame = new Uint8Array([FrameType.ACQUIRE, 0, 0, 9, 1, 0x04, 0, 0, 0x03, 0xe8, 0, 1, 0x61]);
      return { frame, code: ErrorCode.PROTOCOL_ERROR, what: "LIMIT on a 9-byte body" };
    }
    default:
      // CESU-8: a surrogate pair spelled as two 3-byte sequences; TRY set must not matter.
      return { frame: rawAcquire(1, rng.chance(0.5) ? 1 : 0, lease, new Uint8Array([0x6f, 0x6b, 0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80]), owner), code: ErrorCode.BAD_REQUEST, what: "CESU-8 name" };
  }
}
