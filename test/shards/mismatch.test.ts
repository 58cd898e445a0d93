// The words of a WRONG_SHARD refusal: the guard's message read back, and
// the client's account of what differs between its map and the server's.
import { expect, test } from "bun:test";
import { describeMismatch, parseWrongShard, wrongShardMessage, type ServerShardView } from "../../src/shard/mismatch.ts";

const beta: ServerShardView = { shard: "beta", shards: ["alpha", "beta"], generation: 1, owner: "alpha" };

test("the guard's message reads back as the server's view", () => {
  for (const view of [beta, { shard: "shard-07", shards: ["a_1", "shard-07", "z"], generation: 31, owner: "z" }]) {
    expect(parseWrongShard(wrongShardMessage(view))).toEqual(view);
  }
  expect(parseWrongShard("some other server's words")).toBeNull();
});

test("same names and generation: the address the map lists under the wrong shard", () => {
  expect(describeMismatch({ shards: ["alpha", "beta"], generation: 1, shard: "alpha", address: "10.0.0.2:7700" }, beta, wrongShardMessage(beta))).toBe(
    "the client's map alpha,beta (generation 1) places it on shard alpha and sent it to 10.0.0.2:7700, but the server there is shard beta of the same shards and generation: " +
      "what differs is the addresses: the client's map lists 10.0.0.2:7700, a server of shard beta, under shard alpha; fix the map (LOCKD_SERVER) and claim again",
  );
});

test("the shard names in any order are the same shards", () => {
  const view = { ...beta, shards: ["beta", "alpha"] };
  expect(describeMismatch({ shards: ["alpha", "beta"], generation: 1, shard: "alpha", address: "10.0.0.2:7700" }, view, wrongShardMessage(view))).toContain(
    "is shard beta of the same shards and generation: what differs is the addresses:",
  );
});

test("a shard only in the client's map and another generation: both named, with the counts", () => {
  const alpha: ServerShardView = { shard: "alpha", shards: ["alpha", "beta"], generation: 2, owner: "beta" };
  expect(describeMismatch({ shards: ["alpha", "beta", "gamma"], generation: 3, shard: "alpha", address: undefined }, alpha, wrongShardMessage(alpha))).toBe(
    "the client's map alpha,beta,gamma (generation 3) places it on shard alpha, but the server is shard alpha of alpha,beta (generation 2), where it belongs to shard beta: " +
      "what differs is the shards (3 in the client's map, 2 in the server's; gamma only in the client's), and the generation (3 in the client's map, 2 in the server's); " +
      "fix the map (LOCKD_SERVER) and claim again",
  );
});

test("a message in other words is passed on as it is", () => {
  expect(describeMismatch({ shards: ["alpha", "beta"], generation: 0, shard: "beta", address: "[::1]:7701" }, null, "not mine")).toBe(
    "the client's map alpha,beta (generation 0) places it on shard beta and sent it to [::1]:7701, but not mine",
  );
});
