/**
 * Byte streams for the fuzzer: valid frames (client and server), streams of
 * them, mutations of those streams (bit flips, truncation, splices,
 * duplicated and deleted ranges, rewritten headers, garbage), and ways to
 * cut a stream into chunks.
 */
import { encodeAcquire, FrameType } from "../../src/protocol/index.ts";
import { badAcquire } from "../sim/acquires.ts";
import type { Rng } from "../sim/prng.ts";

export function concat(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function frameOf(type: number, flags: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(4 + body.length);
  out[0] = type;
  out[1] = flags;
  out[2] = body.length >>> 8;
  out[3] = body.length & 0xff;
  out.set(body, 4);
  return out;
}

export const HEARTBEAT = new Uint8Array([FrameType.HEARTBEAT, 0, 0, 0]);

/** Names a fuzz session may claim: few, so they collide; "control" is the control session's lock. */
export const FUZZ_NAMES = ["control", "\ufeffcontrol", "f", "g/\u00e9", "x".repeat(512)];

/** A well-formed ACQUIRE a server accepts (random flags bits in the header, which it must ignore). */
export function goodAcquire(rng: Rng): Uint8Array {
  const frame = encodeAcquire({
    name: rng.pick(FUZZ_NAMES),
    leaseMs: rng.chance(0.1) ? 2 ** 32 - 1 : rng.range(1, 60_000),
    owner: rng.pick(["", "fuzz", "\u00e9".repeat(128)]),
    try: rng.chance(0.3),
    // Semaphores and shared claims too; "control" is held with limit 1, so a limit there is LIMIT_MISMATCH.
    ...(rng.chance(0.15) ? { limit: rng.chance(0.5) ? rng.range(2, 5) : 65_535 } : rng.chance(0.15) ? { shared: true } : {}),
  });
  if (rng.chance(0.2)) frame[1] = rng.u32() & 0xff;
  return frame;
}

/** A client frame whose header is in range: ACQUIRE (good, bad, or random body) or HEARTBEAT. */
export function clientFrame(rng: Rng): Uint8Array {
  switch (rng.weighted([4, 2, 1, 5])) {
    case 0:
      return goodAcquire(rng);
    case 1:
      return badAcquire(rng).frame;
    case 2: {
      const body = rng.bytes(rng.range(9, 778));
      if (rng.chance(0.5)) body[0] = 1;
      return frameOf(FrameType.ACQUIRE, 0, body);
    }
    default:
      return rng.chance(0.9) ? HEARTBEAT : frameOf(FrameType.HEARTBEAT, rng.u32() & 0xff, new Uint8Array(0));
  }
}

/** A server frame whose header is in range. */
export function serverFrame(rng: Rng): Uint8Array {
  switch (rng.int(3)) {
    case 0:
      return rng.chance(0.8) ? frameOf(FrameType.ACQUIRED, rng.int(2), rng.bytes(8)) : frameOf(FrameType.ACQUIRED, 0x02 | rng.int(2), rng.bytes(10));
    case 1:
      return frameOf(FrameType.WAITING, rng.int(2), new Uint8Array(0));
    default:
      return frameOf(FrameType.ERROR, 0, rng.bytes(rng.range(1, 1025)));
  }
}

/** A session as a well-behaved client would start it: ACQUIRE, then heartbeats. */
export function clientSession(rng: Rng): Uint8Array {
  const parts = [goodAcquire(rng)];
  // Now and then a pipelining client: hundreds of heartbeats in one stream (one reply each).
  const beats = rng.chance(0.05) ? rng.range(50, 300) : rng.int(5);
  for (let i = 0; i < beats; i++) parts.push(HEARTBEAT);
  return concat(parts);
}

export function frames(rng: Rng, make: (rng: Rng) => Uint8Array, max: number): Uint8Array {
  const parts: Uint8Array[] = [];
  const n = rng.range(1, max);
  for (let i = 0; i < n; i++) parts.push(make(rng));
  return concat(parts);
}

/** One random mutation of `stream` (a copy; the input is not changed). */
export function mutate(rng: Rng, stream: Uint8Array, other: () => Uint8Array): Uint8Array {
  const s = stream.slice();
  switch (rng.int(9)) {
    case 0: {
      const flips = rng.range(1, 4);
      for (let i = 0; i < flips && s.length > 0; i++) s[rng.int(s.length)]! ^= 1 << rng.int(8);
      return s;
    }
    case 1:
      return s.subarray(0, rng.int(s.length + 1));
    case 2: {
      const at = rng.int(s.length + 1);
      return concat([s.subarray(0, at), rng.bytes(rng.range(1, 16)), s.subarray(at)]);
    }
    case 3: {
      const from = rng.int(s.length + 1);
      return concat([s.subarray(0, from), s.subarray(Math.min(s.length, from + rng.range(1, 16)))]);
    }
    case 4: {
      const from = rng.int(s.length + 1);
      const to = Math.min(s.length, from + rng.range(1, 32));
      return concat([s.subarray(0, to), s.subarray(from, to), s.subarray(to)]);
    }
    case 5:
      return concat([s.subarray(0, rng.int(s.length + 1)), other()]);
    case 6: {
      // Rewrite one header's length: often just out of range, sometimes huge.
      if (s.length >= 4) {
        const length = rng.pick([0, 1, 8, 9, 776, 777, 65535, rng.int(65536)]);
        s[2] = length >>> 8;
        s[3] = length & 0xff;
      }
      return s;
    }
    case 7:
      if (s.length > 0) s[0] = rng.u32() & 0xff;
      return s;
    default:
      return rng.chance(0.5) ? rng.bytes(rng.range(1, 64)) : new TextEncoder().encode("GET / HTTP/1.1\r\nHost: lockd\r\n\r\n");
  }
}

/** A bad-header case: valid frames, then a header the reader must refuse, then anything. */
export function withBadHeader(rng: Rng, valid: Uint8Array): { stream: Uint8Array; at: number } {
  const bad = new Uint8Array(4);
  if (rng.chance(0.5)) {
    bad[0] = rng.pick([0x00, 0x03, 0x7f, 0x81, 0xff, 0x47]); // unknown to a server ("G" of GET)
    bad[3] = rng.int(256);
  } else {
    bad[0] = rng.pick([FrameType.ACQUIRE, FrameType.HEARTBEAT]);
    const length = bad[0] === FrameType.ACQUIRE ? rng.pick([0, 8, 777, 65535]) : rng.range(1, 65535);
    bad[2] = length >>> 8;
    bad[3] = length & 0xff;
  }
  bad[1] = rng.int(256);
  return { stream: concat([valid, bad, rng.bytes(rng.int(40))]), at: valid.length };
}

/** Cut points for `length` bytes: strictly increasing, inside (0, length). */
export function randomCuts(rng: Rng, length: number): number[] {
  switch (rng.int(4)) {
    case 0:
      return [];
    case 1: {
      const cuts: number[] = [];
      for (let i = 1; i < length; i++) cuts.push(i); // one byte at a time
      return cuts;
    }
    default: {
      const set = new Set<number>();
      const n = rng.int(Math.min(length, 12));
      for (let i = 0; i < n; i++) set.add(1 + rng.int(Math.max(1, length - 1)));
      return [...set].filter((c) => c > 0 && c < length).sort((a, b) => a - b);
    }
  }
}

export function chunksOf(stream: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  let from = 0;
  for (const cut of cuts) {
    chunks.push(stream.slice(from, cut));
    from = cut;
  }
  chunks.push(stream.slice(from));
  return chunks;
}
