/**
 * Shards and map changes under seeded random schedules (shards.ts): the
 * single-grant, placement and token invariants after every step, and
 * self-tests showing that a wrong roll order or an unchanged generation is
 * caught.
 */
import { describe, expect, test } from "bun:test";
import { simulateShards, type ShardSimResult } from "./shards.ts";

const SEEDS = 1000;

describe("simulation of shards and map changes", () => {
  test(`${SEEDS} seeded schedules keep single grant, placement and tokens across map changes`, () => {
    const results: ShardSimResult[] = [];
    for (let seed = 1; seed <= SEEDS; seed++) results.push(simulateShards({ seed }));
    expect(results.filter((r) => r.failure !== null).map((r) => `seed ${r.seed} step ${r.failure!.step}: ${r.failure!.message}`)).toEqual([]);
    const total = (k: keyof ShardSimResult["counters"]) => results.reduce((n, r) => n + r.counters[k], 0);
    // The schedules really change maps, refuse stale clients and move names.
    expect(total("mapChanges")).toBeGreaterThan(SEEDS);
    expect(total("wrongShard")).toBeGreaterThan(SEEDS);
    expect(total("movedGrants")).toBeGreaterThan(SEEDS);
    expect(total("grants")).toBeGreaterThan(20 * SEEDS);
  }, 60_000);

  test("a seed replays exactly", () => {
    const lines = (seed: number) => {
      const out: string[] = [];
      simulateShards({ seed, trace: (line) => out.push(line) });
      return out;
    };
    expect(lines(77).length).toBeGreaterThan(20);
    expect(lines(77)).toEqual(lines(77));
  });

  test.each([
    ["early-start", "has an owner on"],
    ["same-generation", "is not above"],
  ] as const)("self-test %s: a broken roll is caught", (selfTest, symptom) => {
    let caught: ShardSimResult | undefined;
    for (let seed = 1; seed <= 500 && caught === undefined; seed++) {
      const result = simulateShards({ seed, selfTest });
      if (result.failure !== null) caught = result;
    }
    expect(caught?.failure?.message).toContain(symptom);
  });
});
