/** FrameReader fuzzing (see reader-fuzz.ts): CI-sized and seeded. */
import { describe, expect, test } from "bun:test";
import { CLIENT_FRAMES, FrameLimits, FrameReader, FrameType, SERVER_FRAMES } from "../../src/protocol/index.ts";
import { Rng } from "../sim/prng.ts";
import { checkEverySplit, checkReader, FuzzFailure, readerCase } from "./reader-fuzz.ts";
import { clientFrame, clientSession, frames, serverFrame, withBadHeader } from "./streams.ts";

describe("FrameReader fuzz", () => {
  test("20,000 random, mutated and garbage streams, cut at random", () => {
    const rng = new Rng(1);
    for (let i = 0; i < 20_000; i++) readerCase(rng);
  }, 30_000); // under 1 s here; bunfig's timeout key is not read by bun test, so each test sets its own

  test("valid streams split at every offset, and byte by byte, read the same", () => {
    const rng = new Rng(2);
    for (let i = 0; i < 15; i++) checkEverySplit(frames(rng, clientFrame, 4), CLIENT_FRAMES);
    for (let i = 0; i < 15; i++) checkEverySplit(frames(rng, serverFrame, 4), SERVER_FRAMES);
  }, 30_000);

  test("a bad header is refused in the push that brings its fourth byte, at every split", () => {
    const rng = new Rng(3);
    for (let i = 0; i < 30; i++) {
      const { stream, at } = withBadHeader(rng, clientSession(rng));
      for (let cut = 1; cut < stream.length; cut++) checkReader(stream, CLIENT_FRAMES, [cut]);
      // The header alone, byte by byte: nothing is awaited beyond its four bytes.
      checkReader(stream.subarray(0, at + 4), CLIENT_FRAMES, [at + 1, at + 2, at + 3].filter((c) => c > 0));
    }
  }, 30_000);

  test("the checks catch a reader with a wrong body limit", () => {
    const wrong = new Map(CLIENT_FRAMES);
    wrong.set(FrameType.ACQUIRE, { min: 9, max: 775 });
    const broken = (): FrameReader => new FrameReader(new FrameLimits(wrong));
    const body = new Uint8Array(776);
    const stream = new Uint8Array([FrameType.ACQUIRE, 0, 776 >> 8, 776 & 0xff, ...body]);
    expect(() => checkReader(stream, CLIENT_FRAMES, [], -1, broken)).toThrow(FuzzFailure);
    expect(() => checkReader(stream, CLIENT_FRAMES, [])).not.toThrow();
  });
});
