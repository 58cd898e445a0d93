// FrameReader: any chunking yields the same frames; bad headers are refused
// as soon as their 4 bytes are in; complete frames are views, not copies.
import { describe, expect, test } from "bun:test";
import {
  CLIENT_FRAMES,
  FrameLimits,
  FrameReader,
  FrameType,
  HEARTBEAT_FRAME,
  ReadResult,
  encodeAcquire,
  type FrameSink,
} from "../../src/protocol/index.ts";

const limits = new FrameLimits(CLIENT_FRAMES);

class Collector implements FrameSink {
  frames: { type: number; flags: number; body: number[]; view: boolean }[] = [];
  chunk: Uint8Array | null = null;
  stopAfter = Infinity;
  onFrame(type: number, flags: number, bytes: Uint8Array, offset: number, length: number): boolean {
    this.frames.push({ type, flags, body: Array.from(bytes.subarray(offset, offset + length)), view: bytes === this.chunk });
    return this.frames.length < this.stopAfter;
  }
}

function feed(chunks: Uint8Array[]): { collector: Collector; reader: FrameReader; results: number[] } {
  const reader = new FrameReader(limits);
  const collector = new Collector();
  const results: number[] = [];
  for (const chunk of chunks) {
    collector.chunk = chunk;
    results.push(reader.push(chunk, collector));
  }
  return { collector, reader, results };
}

const stream = new Uint8Array([
  ...encodeAcquire({ name: "jobs/nightly", leaseMs: 5000, owner: "host-1/pid-2", try: false }),
  ...HEARTBEAT_FRAME,
  ...HEARTBEAT_FRAME,
  ...encodeAcquire({ name: "ü".repeat(100), leaseMs: 1, owner: "", try: true }),
  ...HEARTBEAT_FRAME,
]);

describe("FrameReader", () => {
  const whole = feed([stream]).collector.frames;

  test("one chunk with many frames: every frame, in order, as views of the chunk", () => {
    expect(whole.map((f) => f.type)).toEqual([1, 2, 2, 1, 2]);
    expect(whole.every((f) => f.view)).toBe(true);
  });

  test("split at every offset into two chunks: the same frames", () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      const { collector, reader, results } = feed([stream.subarray(0, cut), stream.subarray(cut)]);
      expect(results).toEqual([ReadResult.OK, ReadResult.OK]);
      expect(collector.frames.map(({ type, flags, body }) => ({ type, flags, body }))).toEqual(
        whole.map(({ type, flags, body }) => ({ type, flags, body })),
      );
      expect(reader.partial).toBe(false);
    }
  });

  test("one byte at a time: the same frames, partial in between", () => {
    const reader = new FrameReader(limits);
    const collector = new Collector();
    let sawPartial = false;
    for (let i = 0; i < stream.length; i++) {
      expect(reader.push(stream.subarray(i, i + 1), collector)).toBe(ReadResult.OK);
      sawPartial ||= reader.partial;
    }
    expect(sawPartial).toBe(true);
    expect(reader.partial).toBe(false);
    expect(collector.frames.map((f) => f.body)).toEqual(whole.map((f) => f.body));
  });

  test("random chunkings: the same frames", () => {
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 8) % n;
    for (let round = 0; round < 300; round++) {
      const chunks: Uint8Array[] = [];
      for (let pos = 0; pos < stream.length; ) {
        const size = 1 + rand(40);
        chunks.push(stream.subarray(pos, pos + size));
        pos += size;
      }
      expect(feed(chunks).collector.frames.map((f) => f.body)).toEqual(whole.map((f) => f.body));
    }
  });

  test("an unknown type is refused at its header, before any body", () => {
    const { results, reader } = feed([new Uint8Array([0x47, 0x45, 0x54, 0x20])]); // "GET "
    expect(results).toEqual([ReadResult.ERROR]);
    expect(reader.errorMessage).toContain("unknown frame type 0x47");
  });

  test("a server frame type from a client is unknown", () => {
    expect(feed([new Uint8Array([0x81, 0x00, 0x00, 0x08])]).results).toEqual([ReadResult.ERROR]);
  });

  test("HEARTBEAT announcing 65,535 body bytes is refused at the header", () => {
    const { results, reader } = feed([new Uint8Array([0x02, 0x00, 0xff, 0xff])]);
    expect(results).toEqual([ReadResult.ERROR]);
    expect(reader.errorMessage).toContain("65535");
  });

  test("a bad header split across chunks is refused as soon as its 4th byte arrives", () => {
    const { results } = feed([new Uint8Array([0x02]), new Uint8Array([0x00, 0x00]), new Uint8Array([0x01])]);
    expect(results).toEqual([ReadResult.OK, ReadResult.OK, ReadResult.ERROR]);
  });

  test("ACQUIRE body length out of 9..778 is refused", () => {
    expect(feed([new Uint8Array([0x01, 0x00, 0x00, 0x08])]).results).toEqual([ReadResult.ERROR]);
    expect(feed([new Uint8Array([0x01, 0x00, 0x03, 0x0b])]).results).toEqual([ReadResult.ERROR]); // 779
    expect(feed([new Uint8Array([0x01, 0x00, 0x03, 0x0a])]).results).toEqual([ReadResult.OK]); // 778: awaits its body
  });

  test("frames after a bad header are not delivered", () => {
    const { collector, results } = feed([new Uint8Array([...HEARTBEAT_FRAME, 0x99, 0, 0, 0, ...HEARTBEAT_FRAME])]);
    expect(results).toEqual([ReadResult.ERROR]);
    expect(collector.frames.length).toBe(1);
  });

  test("the sink can stop the reader mid-chunk", () => {
    const reader = new FrameReader(limits);
    const collector = new Collector();
    collector.stopAfter = 2;
    expect(reader.push(stream, collector)).toBe(ReadResult.STOPPED);
    expect(collector.frames.length).toBe(2);
  });

  test("flags are passed through, undefined bits included", () => {
    const frames = feed([new Uint8Array([FrameType.HEARTBEAT, 0xfe, 0, 0])]).collector.frames;
    expect(frames[0]!.flags).toBe(0xfe);
  });
});
