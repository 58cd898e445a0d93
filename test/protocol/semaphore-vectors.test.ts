// protocol.md section 9's semaphore and shared vectors, read from the page
// itself (its single-line block), against the encoders and the decoders.
import { expect, test } from "bun:test";
import {
  decodeAcquire,
  decodeAcquired,
  decodeError,
  decodeSlot,
  encodeAcquire,
  encodeAcquiredSlot,
  encodeError,
  ErrorCode,
  FLAG_REPLY,
  FLAG_SLOT,
  FrameLimits,
  FrameReader,
  ReadResult,
  SERVER_FRAMES,
} from "../../src/protocol/index.ts";

const page = await Bun.file(new URL("../../docs/protocol.md", import.meta.url)).text();

function vector(label: string): Uint8Array {
  const line = page.split("\n").find((l) => l.startsWith(`    ${label} `));
  if (line === undefined) throw new Error(`protocol.md has no single-line vector "${label}"`);
  const bytes = line.slice(4 + label.length).trim().split(/\s+/);
  return new Uint8Array(bytes.map((b) => parseInt(b, 16)));
}

test("ACQUIRE limit 3: LIMIT set, the limit before name_length", () => {
  const bytes = vector("ACQUIRE limit 3");
  expect(encodeAcquire({ name: "jobs/nightly", leaseMs: 5000, owner: "", try: false, limit: 3 })).toEqual(bytes);
  expect(decodeAcquire(bytes, 4, bytes.length - 4)).toEqual({
    ok: true,
    request: { name: "jobs/nightly", leaseMs: 5000, owner: "", try: false, limit: 3, shared: false },
  });
});

test("ACQUIRE shared try: no LIMIT, so the layout of limit 1", () => {
  const bytes = vector("ACQUIRE shared try");
  expect(encodeAcquire({ name: "jobs/nightly", leaseMs: 5000, owner: "", try: true, shared: true })).toEqual(bytes);
  expect(decodeAcquire(bytes, 4, bytes.length - 4)).toEqual({
    ok: true,
    request: { name: "jobs/nightly", leaseMs: 5000, owner: "", try: true, limit: 1, shared: true },
  });
  // Limit 1 is sent without LIMIT: the bytes of an exclusive claim never changed.
  expect(encodeAcquire({ name: "jobs/nightly", leaseMs: 5000, owner: "", try: false, limit: 1 })).toEqual(
    encodeAcquire({ name: "jobs/nightly", leaseMs: 5000, owner: "", try: false }),
  );
});

test("ACQUIRED with SLOT: reply and push, read by a client's FrameReader", () => {
  const reply = vector("ACQUIRED slot 0");
  const push = vector("ACQUIRED push s2");
  expect(encodeAcquiredSlot(1, 0, FLAG_REPLY)).toEqual(reply);
  expect(encodeAcquiredSlot(9, 2, 0)).toEqual(push);
  const seen: Array<[number, bigint, number]> = [];
  const reader = new FrameReader(new FrameLimits(SERVER_FRAMES));
  const result = reader.push(new Uint8Array([...reply, ...push]), {
    onFrame(_type, flags, b, offset, length) {
      seen.push([flags, decodeAcquired(b, offset), decodeSlot(b, offset, length)]);
      return true;
    },
  });
  expect(result).toBe(ReadResult.OK);
  expect(seen).toEqual([
    [FLAG_REPLY | FLAG_SLOT, 1n, 0],
    [FLAG_SLOT, 9n, 2],
  ]);
});

test("ERROR LIMIT_MISMATCH", () => {
  const bytes = vector("ERROR LIMIT_MISMATCH");
  expect(encodeError(ErrorCode.LIMIT_MISMATCH, "limit 3, not 5")).toEqual(bytes);
  expect(decodeError(bytes, 4, bytes.length - 4)).toEqual({ code: 0x25, message: "limit 3, not 5" });
});

test("the decoder's own refusals: limit 0, SHARED with a limit, LIMIT on a 9-byte body", () => {
  const code = (bytes: Uint8Array): number | "ok" => {
    const d = decodeAcquire(bytes, 4, bytes.length - 4);
    return d.ok ? "ok" : d.code;
  };
  const limit3 = vector("ACQUIRE limit 3");
  const zero = limit3.slice();
  zero[10] = 0;
  zero[11] = 0;
  expect(code(zero)).toBe(ErrorCode.BAD_REQUEST);
  const sharedLimit = limit3.slice();
  sharedLimit[5] = 0x06;
  expect(code(sharedLimit)).toBe(ErrorCode.BAD_REQUEST);
  expect(code(new Uint8Array([1, 0, 0, 9, 1, 0x04, 0, 0, 0x13, 0x88, 0, 1, 0x61]))).toBe(ErrorCode.PROTOCOL_ERROR);
  expect(() => encodeAcquire({ name: "x", leaseMs: 1, owner: "", try: false, limit: 2, shared: true })).toThrow(RangeError);
  expect(() => encodeAcquire({ name: "x", leaseMs: 1, owner: "", try: false, limit: 65_536 })).toThrow(RangeError);
});
