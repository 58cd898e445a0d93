/** `lockd status` with a shard map: when the servers' generations disagree (with each other, or with the map's gen=). */
import { expect, test } from "bun:test";
import { generationProblem } from "../../src/cli/status.ts";

test("servers that agree, with a map without gen=, or with the same gen=: no warning", () => {
  expect(generationProblem(new Map([["alpha", 1], ["beta", 1]]), 0)).toBeNull();
  expect(generationProblem(new Map([["alpha", 1], ["beta", 1]]), 1)).toBeNull();
  expect(generationProblem(new Map(), 3)).toBeNull();
});

test("servers that disagree are named with their generations", () => {
  expect(generationProblem(new Map([["alpha", 2], ["beta", 1]]), 0)).toBe(
    "the shards' servers disagree on the map's generation (alpha 2, beta 1): a map change is half done, or a server runs an old map",
  );
});

test("servers that agree on another generation than the map's gen=", () => {
  expect(generationProblem(new Map([["alpha", 1], ["beta", 1]]), 2)).toBe("--ops says gen=2 but the servers run generation 1: the map given is not the servers' map");
});
