/**
 * The engine's shard guard and the generation tokens, without sockets:
 * where WRONG_SHARD sits in the check order (protocol.md section 6) and
 * what tokens a map change gives.
 */
import { expect, test } from "bun:test";
import { MemoryTokens } from "../../src/core/tokens.ts";
import { ErrorCode, FrameType } from "../../src/protocol/constants.ts";
import { Placement } from "../../src/shard/placement.ts";
import { shardGuard } from "../../src/shard/guard.ts";
import { GENERATION_UNIT, GenerationTokens, tokensInGeneration } from "../../src/shard/tokens.ts";
import { Harness } from "../helpers/engine.ts";
import { rawAcquireFrame } from "../helpers/raw-acquire.ts";

const two = new Placement(["alpha", "beta"]);
const nameOn = (shard: string) => {
  for (let i = 0; ; i++) if (two.shardOf(`g/${i}`) === shard) return `g/${i}`;
};

test("WRONG_SHARD comes after validation and before LOCK_BUSY; the shard's own names are served as before", () => {
  const h = new Harness({ shardGuard: shardGuard({ shard: "alpha", shards: ["alpha", "beta"], generation: 0 })! });
  const ours = nameOn("alpha");
  const theirs = nameOn("beta");
  const owner = h.client(ours, 5000);
  expect(owner.last?.type).toBe(FrameType.ACQUIRED);
  const wrong = h.client(theirs, 5000);
  expect(wrong.closeFrame?.code).toBe(ErrorCode.WRONG_SHARD);
  // A malformed ACQUIRE for another shard's name gets its validation error.
  const bad = h.open("bad");
  h.frame(bad, new Uint8Array(rawAcquireFrame({ lease: 0, name: [...new TextEncoder().encode(theirs)] })));
  expect(bad.closeFrame?.code).toBe(ErrorCode.BAD_REQUEST);
  // TRY on a name of another shard: WRONG_SHARD, not LOCK_BUSY or a grant.
  const tryOther = h.open("try");
  h.acquire(tryOther, theirs, 5000, { try: true });
  expect(tryOther.closeFrame?.code).toBe(ErrorCode.WRONG_SHARD);
  expect(h.engine.locks.has(theirs)).toBe(false);
  expect(h.engine.stats.ends[ErrorCode.WRONG_SHARD]).toBe(2);
});

test("no guard without a shard, or with a map of one", () => {
  expect(shardGuard({ shard: null, shards: [], generation: 3 })).toBeNull();
  expect(shardGuard({ shard: "solo", shards: ["solo"], generation: 0 })).toBeNull();
});

test("generation tokens: generation 0 is the counter itself; a higher generation is above every token of a lower one", () => {
  const counter = new MemoryTokens(41);
  expect(tokensInGeneration(counter, 0)).toBe(counter);
  const old = new GenerationTokens(new MemoryTokens(GENERATION_UNIT - 10), 0);
  let last = 0;
  for (let i = 0; i < 5; i++) last = old.next();
  const fresh = new GenerationTokens(new MemoryTokens(0), 1);
  const first = fresh.next();
  expect(first).toBe(GENERATION_UNIT + 1);
  expect(first).toBeGreaterThan(last);
  expect(new GenerationTokens(new MemoryTokens(0), 31).next()).toBeLessThan(2 ** 53);
  expect(() => new GenerationTokens(new MemoryTokens(0), 32)).toThrow(RangeError);
  let told = 0;
  const full = new GenerationTokens(new MemoryTokens(GENERATION_UNIT - 2), 1, () => told++);
  expect(full.exhausted).toBe(false);
  expect(full.next()).toBe(2 * GENERATION_UNIT - 1);
  // The end is said before the engine asks for another (it then refuses claims), and once.
  expect([full.exhausted, full.exhausted, told]).toEqual([true, true, 1]);
  expect(() => full.next()).toThrow(/2\^48/);
});
