/**
 * The `servers` option in both forms: text (an address list or a map), and
 * a map already parsed (what `lockd run --server` passes on, so its input
 * is parsed once). Both must place every name alike and claim alike; a map
 * value is checked by the same rules as text, and copied.
 */
import { expect, test } from "bun:test";
import { AddressError, LockClient, parseServerMap, type ServerMap } from "../../src/client/index.ts";
import { startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

const TEXT = "gen=3;alpha=10.0.0.1:7700,[::1]:7701;beta=db.example:7700;gamma=:7702";
const NAMES = Array.from({ length: 64 }, (_, i) => `jobs/${i}`);

test("a parsed map and its text give the same map and the same placement", () => {
  const fromText = new LockClient({ servers: TEXT });
  const fromMap = new LockClient({ servers: parseServerMap(TEXT) });
  expect(fromMap.map).toEqual(fromText.map);
  expect(fromMap.map.generation).toBe(3);
  expect(NAMES.map((n) => fromMap.shardOf(n))).toEqual(NAMES.map((n) => fromText.shardOf(n)));
  // All three shards get some of the names: the placement is the map's, not one shard's.
  expect(new Set(NAMES.map((n) => fromMap.shardOf(n)))).toEqual(new Set(["alpha", "beta", "gamma"]));
  // A plain list, parsed: one unnamed shard, as its text.
  const plain = new LockClient({ servers: parseServerMap("127.0.0.1:7700,127.0.0.1:7701") });
  expect(plain.map).toEqual(new LockClient({ servers: "127.0.0.1:7700,127.0.0.1:7701" }).map);
  expect(plain.shardOf("jobs/1")).toBe("");
});

test("a map value is copied: changing the object afterwards changes nothing", () => {
  const shards = [
    { name: "alpha", addresses: [{ host: "10.0.0.1", port: 7700 }] },
    { name: "beta", addresses: [{ host: "10.0.0.2", port: 7700 }] },
  ];
  const map = { generation: 1, shards };
  const client = new LockClient({ servers: map });
  const before = NAMES.map((n) => client.shardOf(n));
  shards[0]!.addresses[0]!.port = 1;
  shards[1]!.name = "gamma";
  shards.pop();
  map.generation = 2;
  expect(client.map).toEqual({
    generation: 1,
    shards: [
      { name: "alpha", addresses: [{ host: "10.0.0.1", port: 7700 }] },
      { name: "beta", addresses: [{ host: "10.0.0.2", port: 7700 }] },
    ],
  });
  expect(NAMES.map((n) => client.shardOf(n))).toEqual(before);
});

test("a claim through a map value goes to the name's shard and is granted", async () => {
  await using server = startServer();
  // beta's address is never dialled: every name claimed here is alpha's.
  const client = new LockClient({ servers: parseServerMap(`gen=1;alpha=127.0.0.1:${server.port};beta=127.0.0.1:1`) });
  const name = NAMES.find((n) => client.shardOf(n) === "alpha")!;
  const lock = await client.acquire(name, { lease: 5000 });
  try {
    expect(lock.token).toBeGreaterThan(0n);
    expect(engineOf(server).sessions.size).toBe(1);
  } finally {
    await lock.release();
  }
});

test("a bad map value is an AddressError naming what is wrong, as bad text is", () => {
  const bad = (map: unknown): string => {
    try {
      new LockClient({ servers: map as ServerMap });
    } catch (error) {
      expect(error).toBeInstanceOf(AddressError);
      return (error as Error).message;
    }
    throw new Error(`accepted ${JSON.stringify(map)}`);
  };
  const a = { name: "alpha", addresses: [{ host: "10.0.0.1", port: 7700 }] };
  expect(bad({ generation: 0, shards: [] })).toContain("at least one shard");
  expect(bad({ generation: 99, shards: [a] })).toContain("generation 99 is not a whole number in 0..31");
  expect(bad({ generation: 0, shards: [a, { name: "", addresses: [{ host: "10.0.0.2", port: 1 }] }] })).toContain("shard 2 of the map has no name");
  expect(bad({ generation: 0, shards: [{ name: "Alpha!", addresses: a.addresses }] })).toContain("must be 1 to 63 of a-z 0-9 - _");
  expect(bad({ generation: 0, shards: [{ name: "gen", addresses: a.addresses }] })).toContain('"gen" is not a shard name');
  expect(bad({ generation: 0, shards: [a, { ...a }] })).toContain('shard "alpha" is named twice');
  expect(bad({ generation: 0, shards: [{ name: "alpha", addresses: [] }] })).toContain('shard "alpha" of the map has no address');
  expect(bad({ generation: 0, shards: [{ name: "alpha", addresses: [{ host: "10.0.0.1", port: 0 }] }] })).toContain('address 1 of shard "alpha" of the map: port 0 is out of range 1..65535');
  expect(bad({ generation: 0, shards: [{ name: "", addresses: [{ host: "no spaces", port: 7700 }] }] })).toContain('address 1 of the map: "no spaces" is not a host name or IP address');
  expect(bad({ generation: 0, shards: [{ name: "", addresses: [{ host: "", port: 7700 }] }] })).toContain("host must be a host name or IP address");
  expect(bad({ generation: 0, shards: [a, { name: "beta", addresses: [{ host: "10.0.0.1", port: 7700 }] }] })).toContain('10.0.0.1:7700 is in two shards ("alpha" and "beta")');
  // IPv6 without brackets is how an Address holds it; a plain list may repeat an address, as in text.
  expect(new LockClient({ servers: { generation: 0, shards: [{ name: "", addresses: [{ host: "::1", port: 7700 }, { host: "::1", port: 7700 }] }] } }).map.shards[0]!.addresses).toHaveLength(2);
});
