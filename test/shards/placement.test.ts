/**
 * The placement (src/shard/placement.ts) on the spec's vectors (test/conformance/
 * placement.json, which the Go and Python clients check too), the server
 * map syntax (src/net/address.ts) on the same file's map strings, and the
 * property that makes rendezvous hashing worth having: adding a shard
 * moves only names that now land on the new shard.
 */
import { describe, expect, test } from "bun:test";
import { AddressError, formatAddress } from "../../src/net/address.ts";
import { formatServerMap, parseServerMap } from "../../src/shard/map.ts";
import { Placement, placementOf, weightHex } from "../../src/shard/placement.ts";
import vectors from "../conformance/placement.json";

describe("placement vectors", () => {
  test.each(vectors.weights.map((v) => [v.shard, v.lock, v.weight] as const))("weight(%p, %p) = %s", (shard, lock, weight) => {
    expect(weightHex(shard, lock)).toBe(weight);
  });

  test("every placement vector, from text and from UTF-8 bytes", () => {
    for (const v of vectors.placements) {
      const placement = new Placement(v.shards);
      expect({ shards: v.shards, lock: v.lock, shard: placement.shardOf(v.lock) }).toEqual(v);
      expect(placement.shardOf(new TextEncoder().encode(v.lock))).toBe(v.shard);
    }
  });

  test("both hash paths (Bun.SHA256 into reused buffers; node:crypto, as on Node) place every vector alike", () => {
    const encoder = new TextEncoder();
    for (const v of vectors.placements) {
      const placement = new Placement(v.shards);
      const bytes = encoder.encode(v.lock);
      expect(v.shards[placement["indexOfBun"](bytes, (input, out) => Bun.SHA256.hash(input, out))]).toBe(v.shard);
      expect(v.shards[placement["indexOfPortable"](bytes)]).toBe(v.shard);
    }
    // A long name after a short one: the scratch buffer grows, the answer is the portable one's.
    const placement = new Placement(["alpha", "beta", "gamma"]);
    for (const name of ["a", "x".repeat(2000), "b", "y".repeat(700)]) {
      expect(placement.indexOf(name)).toBe(placement["indexOfPortable"](encoder.encode(name)));
    }
  });

  test("the order the shards are listed in does not matter", () => {
    for (const v of vectors.placements) {
      expect(new Placement([...v.shards].reverse()).shardOf(v.lock)).toBe(v.shard);
    }
  });
});

describe("map strings", () => {
  for (const v of vectors.maps) {
    if ("error" in v) {
      test(`${JSON.stringify(v.servers)} is refused (${v.error})`, () => {
        expect(() => parseServerMap(v.servers)).toThrow(AddressError);
      });
    } else {
      test(`${JSON.stringify(v.servers)}`, () => {
        const map = parseServerMap(v.servers);
        expect({ generation: map.generation, shards: map.shards.map((s) => ({ name: s.name, addresses: s.addresses.map(formatAddress) })) }).toEqual({
          generation: v.generation!,
          shards: v.shards!,
        });
        expect(parseServerMap(formatServerMap(map))).toEqual(map);
      });
    }
  }

  test("errors name the part that is wrong", () => {
    const message = (text: string) => {
      try {
        parseServerMap(text);
      } catch (error) {
        return (error as Error).message;
      }
      throw new Error(`${text} parsed`);
    };
    expect(message("alpha=10.0.0.1:7700;10.0.0.2:7700")).toContain('shard 2 of "alpha=10.0.0.1:7700;10.0.0.2:7700" ("10.0.0.2:7700") has no NAME=');
    expect(message("alpha=10.0.0.1:7700;beta=10.0.0.2")).toContain('shard "beta" of the map: "10.0.0.2" is not HOST:PORT: missing :PORT');
    expect(message("gen=40;alpha=10.0.0.1:7700")).toContain('generation "40" is not a whole number in 0..31');
    expect(message("Alpha=10.0.0.1:7700")).toContain('shard name "Alpha" must be 1 to 63 of a-z 0-9 - _');
    expect(message("alpha=10.0.0.1:7700;beta=10.0.0.1:7700")).toContain('10.0.0.1:7700 is in two shards ("alpha" and "beta")');
  });

  test("an array of shards is one map; an array of addresses is one list, as before", () => {
    expect(parseServerMap(["alpha=10.0.0.1:7700", "beta=10.0.0.2:7700"]).shards.map((s) => s.name)).toEqual(["alpha", "beta"]);
    expect(parseServerMap(["10.0.0.1:7700", "10.0.0.2:7700"]).shards).toEqual([
      { name: "", addresses: [{ host: "10.0.0.1", port: 7700 }, { host: "10.0.0.2", port: 7700 }] },
    ]);
    expect(placementOf(parseServerMap("10.0.0.1:7700"))).toBeNull();
  });
});

/** A small deterministic generator (xorshift32), so a failure names a reproducible name. */
function names(count: number, seed: number): string[] {
  let x = seed >>> 0 || 1;
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out.push(`lock/${x.toString(36)}/${i}`);
  }
  return out;
}

test("adding a shard moves only names that now land on the new shard (10^5 names, 2..16 shards)", () => {
  const all = names(100_000, 0x5eed);
  const encoded = all.map((name) => new TextEncoder().encode(name));
  const shardNames = Array.from({ length: 17 }, (_, i) => `s${i}`);
  const first = new Placement(shardNames.slice(0, 2));
  let before = encoded.map((bytes) => first.shardOf(bytes));
  for (let n = 2; n < 17; n++) {
    const after = new Placement(shardNames.slice(0, n + 1));
    const added = shardNames[n]!;
    let moved = 0;
    const now = encoded.map((bytes, i) => {
      const shard = after.shardOf(bytes);
      if (shard !== before[i]) {
        moved++;
        if (shard !== added) throw new Error(`${all[i]} moved from ${before[i]} to ${shard}, not to the new shard ${added}`);
      }
      return shard;
    });
    // About 1/(n+1) move: a loose bound, so it checks the shape without being a statistics test.
    expect(moved / all.length).toBeGreaterThan(0.5 / (n + 1));
    expect(moved / all.length).toBeLessThan(1.5 / (n + 1));
    before = now;
  }
}, 120_000);
