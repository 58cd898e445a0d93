/**
 * FrameReader against the reference parse: for any bytes and any way of
 * cutting them into chunks, the reader delivers exactly the reference's
 * frames, each in the push that brings its last byte; refuses a bad header
 * in the push that brings the header's fourth byte (not later, and delivers
 * nothing after it); reports a partial frame exactly when a cut falls inside
 * one; stops when the sink says so; and never throws.
 */
import { type BodyRange, CLIENT_FRAMES, FrameLimits, FrameReader, ReadResult, SERVER_FRAMES } from "../../src/protocol/index.ts";
import type { Rng } from "../sim/prng.ts";
import { referenceParse } from "./reference.ts";
import { chunksOf, clientFrame, frames, mutate, randomCuts, serverFrame, withBadHeader } from "./streams.ts";

export class FuzzFailure extends Error {
  override readonly name = "FuzzFailure";
}

function hex(bytes: Uint8Array, max = 48): string {
  const shown = Array.from(bytes.subarray(0, max), (b) => b.toString(16).padStart(2, "0")).join("");
  return bytes.length > max ? `${shown}...(${bytes.length} bytes)` : shown;
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const limitsCache = new Map<ReadonlyMap<number, BodyRange>, FrameLimits>();

/** One reader case. `stopAfter`: the sink returns false on that frame (0-based), or never when -1. */
export function checkReader(
  stream: Uint8Array,
  ranges: ReadonlyMap<number, BodyRange>,
  cuts: readonly number[],
  stopAfter = -1,
  makeReader: (limits: FrameLimits) => FrameReader = (limits) => new FrameReader(limits),
): void {
  let limits = limitsCache.get(ranges);
  if (limits === undefined) limitsCache.set(ranges, (limits = new FrameLimits(ranges)));
  const ref = referenceParse(stream, ranges);
  const where = (): string => `stream ${hex(stream)} cut at [${cuts.join(",")}]`;
  const failure = (message: string): FuzzFailure => new FuzzFailure(`${message}; ${where()}`);
  const reader = makeReader(limits);
  const got: { type: number; flags: number; body: Uint8Array; chunk: number }[] = [];
  let chunkIndex = 0;
  const sink = {
    onFrame(type: number, flags: number, bytes: Uint8Array, offset: number, length: number): boolean {
      if (offset < 0 || length < 0 || offset + length > bytes.length) throw failure(`frame view [${offset}, +${length}) outside its ${bytes.length}-byte buffer`);
      got.push({ type, flags, body: bytes.slice(offset, offset + length), chunk: chunkIndex });
      return got.length - 1 !== stopAfter;
    },
  };
  const chunks = chunksOf(stream, cuts);
  const ends: number[] = [];
  let at = 0;
  for (const c of chunks) ends.push((at += c.length));
  const chunkHolding = (offset: number): number => ends.findIndex((end) => end > offset);
  // What must happen, from the reference: which chunk stops, errs, or none.
  const stopFrame = stopAfter >= 0 && stopAfter < ref.frames.length ? ref.frames[stopAfter]! : null;
  const errChunk = ref.badHeaderAt >= 0 && ref.badHeaderAt + 4 <= stream.length ? chunkHolding(ref.badHeaderAt + 3) : -1;
  const stopChunk = stopFrame !== null ? chunkHolding(stopFrame.end - 1) : -1;
  let last: number = ReadResult.OK;
  for (chunkIndex = 0; chunkIndex < chunks.length; chunkIndex++) {
    let result: number;
    try {
      result = reader.push(chunks[chunkIndex]!, sink);
    } catch (error) {
      if (error instanceof FuzzFailure) throw error;
      throw failure(`push threw ${String(error)}`);
    }
    last = result;
    const expected = stopChunk >= 0 && (errChunk < 0 || stopChunk <= errChunk) && chunkIndex === stopChunk ? ReadResult.STOPPED
      : errChunk >= 0 && chunkIndex === errChunk ? ReadResult.ERROR : ReadResult.OK;
    if (result !== expected) throw failure(`push #${chunkIndex} returned ${result}, expected ${expected}`);
    if (result !== ReadResult.OK) break;
    const partial = !ref.boundaries.has(ends[chunkIndex]!);
    if (reader.partial !== partial) throw failure(`after push #${chunkIndex} (${ends[chunkIndex]} bytes) partial is ${reader.partial}, expected ${partial}`);
  }
  if (last === ReadResult.ERROR && reader.errorMessage === "") throw failure("ERROR without an errorMessage");
  const expectedCount = stopFrame !== null && last === ReadResult.STOPPED ? stopAfter + 1 : ref.frames.length;
  if (got.length !== expectedCount) throw failure(`delivered ${got.length} frames, expected ${expectedCount}`);
  for (let i = 0; i < got.length; i++) {
    const g = got[i]!;
    const r = ref.frames[i]!;
    if (g.type !== r.type || g.flags !== r.flags || !equal(g.body, r.body)) {
      throw failure(`frame #${i} is ${g.type}/${g.flags}/${hex(g.body)}, expected ${r.type}/${r.flags}/${hex(r.body)}`);
    }
    const due = chunkHolding(r.end - 1);
    if (g.chunk !== due) throw failure(`frame #${i} delivered in push #${g.chunk}, its last byte came in push #${due}`);
  }
}

/** Every two-chunk split of `stream`, and byte by byte: all must read the same. */
export function checkEverySplit(stream: Uint8Array, ranges: ReadonlyMap<number, BodyRange>): void {
  for (let cut = 1; cut < stream.length; cut++) checkReader(stream, ranges, [cut]);
  const bytewise: number[] = [];
  for (let i = 1; i < stream.length; i++) bytewise.push(i);
  checkReader(stream, ranges, bytewise);
}

/** One random reader case: a valid, mutated, bad-header or garbage stream, cut at random. */
export function readerCase(rng: Rng): void {
  const server = rng.chance(0.25); // the client's reader of server frames too
  const ranges = server ? SERVER_FRAMES : CLIENT_FRAMES;
  const make = server ? serverFrame : clientFrame;
  let stream: Uint8Array;
  switch (rng.weighted([3, 4, 2, 1])) {
    case 0:
      stream = frames(rng, make, 6);
      break;
    case 1: {
      stream = frames(rng, make, 6);
      const rounds = rng.range(1, 3);
      for (let i = 0; i < rounds; i++) stream = mutate(rng, stream, () => frames(rng, make, 3));
      break;
    }
    case 2:
      stream = withBadHeader(rng, frames(rng, make, 3)).stream;
      break;
    default:
      stream = rng.bytes(rng.int(200));
  }
  const stopAfter = rng.chance(0.2) ? rng.int(4) : -1;
  checkReader(stream, ranges, randomCuts(rng, stream.length), stopAfter);
}
