/**
 * The shard map in the coordinator row's holder (src/failover/holder.ts),
 * and the role machine refusing to take over a row whose map this instance
 * must not follow.
 */
import { drivenMachine } from "../helpers/role-machine.ts";
import { describe, expect, test } from "bun:test";
import type { CoordinatorRow } from "../../src/failover/machine.ts";
import { SHARD_WORDS } from "../../src/cli/words.ts";
import { activeHolder, type HolderMap, advertisedOps, describeHolderMap, describeRowMap, holderInstance, holderMapOf, isReleased, mapId, ownMapOf, parseHolderMap, parseHolderOps, refusalHeadline, releasedHolder, takeoverChangesMap, takeoverRefusal } from "../../src/failover/holder.ts";

/** takeoverRefusal in the CLI's words (its flags), as lockd serve says it. */
const refuse = (mine: HolderMap, holder: string): string | null => takeoverRefusal(mine, holder, SHARD_WORDS);
import { hostOf, isLoopbackHost } from "../../src/net/address.ts";

const map = (shard: string | null, shards: string[], generation: number) => holderMapOf({ shard, shards, generation });

describe("the holder names the map", () => {
  test("no shards at generation 0: the holder and the released row are what they were before shards", () => {
    const none = map(null, [], 0);
    expect(activeHolder("db1/pid-7/0a0b0c0d", none)).toBe("db1/pid-7/0a0b0c0d");
    expect(releasedHolder(none)).toBe("");
    expect(parseHolderMap("db1/pid-7/0a0b0c0d")).toBeNull(); // names no map
    expect(parseHolderMap("")).toBeNull();
  });

  test("a shard, its list and its generation round-trip; the list's order does not matter", () => {
    const alpha = map("alpha", ["beta", "alpha"], 3);
    expect(alpha).toEqual({ generation: 3, shard: "alpha", map: mapId(["alpha", "beta"]) });
    const holder = activeHolder("db1/pid-7/0a0b0c0d", alpha);
    expect(holder).toBe(`db1/pid-7/0a0b0c0d shard=alpha gen=3 map=${mapId(["alpha", "beta"])}`);
    expect(parseHolderMap(holder)).toEqual(alpha);
    expect(parseHolderMap(releasedHolder(alpha))).toEqual(alpha);
    expect(mapId(["alpha", "beta"])).not.toBe(mapId(["alpha", "beta", "gamma"]));
    // No shards but a generation (shards merged back into one service).
    expect(parseHolderMap(activeHolder("h/pid-1/x", map(null, [], 5)))).toEqual({ generation: 5, shard: null, map: null });
  });

  test("released: the empty holder and the tagged one; an instance id is not released", () => {
    expect(isReleased("")).toBe(true);
    expect(isReleased(releasedHolder(map("alpha", ["alpha", "beta"], 1)))).toBe(true);
    expect(isReleased("db1/pid-7/0a0b0c0d shard=alpha gen=1 map=12345678")).toBe(false);
    expect(isReleased("(released)x/pid-1/y")).toBe(false);
  });
});

describe("the holder names the active's ops address (ops=)", () => {
  const alpha = map("alpha", ["alpha", "beta"], 3);

  test("with a map, and without one: the address round-trips and the map and instance read as before", () => {
    const holder = activeHolder("db1/pid-7/0a0b0c0d", alpha, "10.0.0.5:7701");
    expect(holder).toBe(`db1/pid-7/0a0b0c0d shard=alpha gen=3 map=${mapId(["alpha", "beta"])} ops=10.0.0.5:7701`);
    expect(parseHolderOps(holder)).toBe("10.0.0.5:7701");
    expect(parseHolderMap(holder)).toEqual(alpha);
    expect(holderInstance(holder)).toBe("db1/pid-7/0a0b0c0d");
    // No shards at generation 0: the address alone, and still no map named (what an instance without one always wrote).
    const plain = activeHolder("db1/pid-7/0a0b0c0d", map(null, [], 0), "[::1]:7701");
    expect(plain).toBe("db1/pid-7/0a0b0c0d ops=[::1]:7701");
    expect(parseHolderOps(plain)).toBe("[::1]:7701");
    expect(parseHolderMap(plain)).toBeNull();
    expect(holderInstance(plain)).toBe("db1/pid-7/0a0b0c0d");
    expect(refuse(map(null, [], 0), plain)).toBeNull();
    expect(takeoverChangesMap(map(null, [], 0), plain)).toBeNull();
    expect(refuse(alpha, holder)).toBeNull();
    expect(takeoverChangesMap(alpha, holder)).toBeNull(); // the address is not part of the map
  });

  test("a holder without ops= (an older active, or none advertised) parses with no address; a released row names none", () => {
    expect(activeHolder("db1/pid-7/0a0b0c0d", alpha, null)).toBe(activeHolder("db1/pid-7/0a0b0c0d", alpha));
    expect(parseHolderOps(`db1/pid-7/0a0b0c0d shard=alpha gen=3 map=${mapId(["alpha", "beta"])}`)).toBeNull();
    expect(parseHolderOps("db1/pid-7/0a0b0c0d")).toBeNull();
    expect(parseHolderOps("")).toBeNull();
    expect(parseHolderOps(releasedHolder(alpha))).toBeNull();
    // Not HOST:PORT: ignored, not shown.
    expect(parseHolderOps("db1/pid-7/0a0b0c0d ops=<script>:1")).toBeNull();
    expect(parseHolderOps("db1/pid-7/0a0b0c0d ops=10.0.0.5")).toBeNull();
  });

  test("a long instance id gives way to the map and the address: the holder fits the 255-character column", () => {
    const long = map(`s${"x".repeat(62)}`, [`s${"x".repeat(62)}`, "beta"], 31);
    const ops = `${"o".repeat(60)}.${"o".repeat(25)}.internal:7701`; // 100 characters, labels of at most 63 (a DNS name)
    const holder = activeHolder("h".repeat(255), long, ops);
    expect(holder.length).toBeLessThanOrEqual(255);
    expect(parseHolderMap(holder)).toEqual(long);
    expect(parseHolderOps(holder)).toBe(ops);
  });

  test("what an active advertises: --advertise-ops, else its bound ops address unless that is a wildcard", () => {
    expect(advertisedOps("lockd-1.internal:7701", { host: "0.0.0.0", port: 7701 })).toBe("lockd-1.internal:7701");
    expect(advertisedOps(null, { host: "10.0.0.5", port: 7701 })).toBe("10.0.0.5:7701");
    expect(advertisedOps(null, { host: "::1", port: 7701 })).toBe("[::1]:7701");
    expect(advertisedOps(null, { host: "0.0.0.0", port: 7701 })).toBeNull();
    expect(advertisedOps(null, { host: "::", port: 7701 })).toBeNull();
    expect(advertisedOps(null, { host: "[::]", port: 7701 })).toBeNull();
    expect(advertisedOps(null, { host: "", port: 7701 })).toBeNull();
  });
});

describe("takeoverRefusal", () => {
  const alpha3 = map("alpha", ["alpha", "beta"], 3);
  const held = (m: ReturnType<typeof map>) => activeHolder("db1/pid-7/0a0b0c0d", m);

  test("the same map, and a higher generation (a map change in progress), may take over", () => {
    expect(refuse(alpha3, held(alpha3))).toBeNull();
    expect(refuse(alpha3, releasedHolder(alpha3))).toBeNull();
    expect(refuse(map("alpha", ["alpha", "beta", "gamma"], 4), held(alpha3))).toBeNull();
    // Merging shards back into one service (a new generation).
    expect(refuse(map(null, [], 4), held(alpha3))).toBeNull();
  });

  test("a lower generation is refused: its tokens would be below tokens already issued", () => {
    const refusal = refuse(map("alpha", ["alpha", "beta"], 2), held(alpha3));
    expect(refusal).toContain("tokens would be below tokens already issued");
    expect(refusal).toContain("--shards-generation 3");
    expect(refuse(map("alpha", ["alpha", "beta"], 2), releasedHolder(alpha3))).toContain("tokens would be below");
    // An instance started without any shard flags is told every flag it lacks, not only the generation.
    const plain = refuse(map(null, [], 0), held(alpha3));
    expect(plain).toContain("start it with --shard alpha, that generation's --shards list and --shards-generation 3 or higher");
  });

  test("one generation with another map is refused: another list, shards on one side only", () => {
    expect(refuse(map("alpha", ["alpha", "beta", "gamma"], 3), held(alpha3))).toContain("one generation with two maps");
    expect(refuse(map(null, [], 3), held(alpha3))).toContain("one generation with two maps");
    expect(refuse(map("alpha", ["alpha", "beta"], 3), activeHolder("h/pid-1/x", map(null, [], 3)))).toContain("one generation with two maps");
  });

  test("a holder that names no map (no shards at generation 0, or a lockd from before the check) is never refused: an upgrade must not lock a service out", () => {
    for (const holder of ["db1/pid-7/0a0b0c0d", ""]) {
      for (const mine of [map("alpha", ["alpha", "beta"], 0), map("alpha", ["alpha", "beta"], 1), map(null, [], 0), map(null, [], 2)]) {
        expect(refuse(mine, holder)).toBeNull();
      }
    }
  });

  test("another shard is refused whatever the generation: the wrong --service or --shard", () => {
    expect(refuse(map("beta", ["alpha", "beta"], 3), held(alpha3))).toContain("check --service and --shard");
    expect(refuse(map("beta", ["alpha", "beta"], 4), held(alpha3))).toContain("check --service and --shard");
  });
});

describe("the refusal names this instance's shard list", () => {
  test("its own map (ownMapOf) carries the sorted list; a holder carries only the hash; messages show both side by side", () => {
    const mine = ownMapOf({ shard: "beta", shards: ["gamma", "alpha", "beta"], generation: 1 });
    expect(mine).toEqual({ generation: 1, shard: "beta", map: mapId(["alpha", "beta", "gamma"]), shards: ["alpha", "beta", "gamma"] });
    // The holder is what it was: the list is not written to the row.
    expect(activeHolder("db1/pid-7/0a0b0c0d", mine)).toBe(activeHolder("db1/pid-7/0a0b0c0d", map("beta", ["alpha", "beta", "gamma"], 1)));
    const theirs = activeHolder("db1/pid-7/0a0b0c0d", map("beta", ["alpha", "beta"], 1));
    expect(refuse(mine, theirs)).toBe(
      `this instance serves shard beta of alpha,beta,gamma (map ${mapId(["alpha", "beta", "gamma"])}, generation 1); ` +
        `the service's active served shard beta of map ${mapId(["alpha", "beta"])}, generation 1: one generation with two maps ` +
        "(give every instance of the service the same --shards and --shards-generation; a new map needs a higher generation)",
    );
    expect(ownMapOf({ shard: null, shards: [], generation: 2 })).toEqual({ generation: 2, shard: null, map: null });
  });

  test("a long shard list is cut to the first 16 names, with the count", () => {
    const shards = Array.from({ length: 40 }, (_, i) => `s${String(i).padStart(2, "0")}`);
    const text = describeHolderMap(ownMapOf({ shard: "s05", shards, generation: 2 }));
    expect(text).toBe(`shard s05 of ${shards.slice(0, 16).join(",")},... (40 shards) (map ${mapId(shards)}, generation 2)`);
  });

  test("holderInstance: the instance id without the map tag; null when released", () => {
    expect(holderInstance("db1/pid-42/9f3a01bc shard=alpha gen=3 map=5f1e22c0")).toBe("db1/pid-42/9f3a01bc");
    expect(holderInstance("db1/pid-42/9f3a01bc")).toBe("db1/pid-42/9f3a01bc");
    expect(holderInstance("")).toBeNull();
    expect(holderInstance(releasedHolder(map("alpha", ["alpha"], 3)))).toBeNull();
  });
});

describe("takeoverChangesMap", () => {
  const alpha3 = map("alpha", ["alpha", "beta"], 3);
  test("a standby that may take over with another (newer) map says so; the same map or a refused one says nothing", () => {
    const holder = activeHolder("db1/pid-7/0a0b0c0d", alpha3);
    expect(takeoverChangesMap(alpha3, holder)).toBeNull();
    expect(takeoverChangesMap(map("alpha", ["alpha", "beta"], 2), holder)).toBeNull();
    const note = takeoverChangesMap(map("alpha", ["alpha", "beta", "gamma"], 4), holder);
    expect(note).toContain(`the service's active served shard alpha of map ${mapId(["alpha", "beta"])}, generation 3`);
    expect(note).toContain(`this instance will serve its own map when it takes over`);
    // A holder that names no map: said when this instance has one, not when it has none either.
    expect(takeoverChangesMap(map("alpha", ["alpha", "beta"], 0), "db1/pid-7/0a0b0c0d")).toContain("the service's active served a map it does not name");
    expect(takeoverChangesMap(map(null, [], 0), "db1/pid-7/0a0b0c0d")).toBeNull();
    expect(takeoverChangesMap(map(null, [], 0), "")).toBeNull();
  });

  test("a long instance id gives way to the map: the holder fits the 255-character column", () => {
    const long = map(`s${"x".repeat(62)}`, [`s${"x".repeat(62)}`, "beta"], 31);
    const holder = activeHolder("h".repeat(255), long);
    expect(holder.length).toBeLessThanOrEqual(255);
    expect(parseHolderMap(holder)).toEqual(long);
  });
});

describe("a standby's words for the row's map", () => {
  test("a plain service (no map on either side) reads \"none\"; an instance with a map keeps the careful wording", () => {
    expect(describeRowMap(map(null, [], 0), "db1/pid-7/0a0b0c0d")).toBe("none");
    expect(describeRowMap(map(null, [], 0), "db1/pid-7/0a0b0c0d ops=10.0.0.5:7701")).toBe("none");
    expect(describeRowMap(map(null, [], 0), "")).toBe("none");
    expect(describeRowMap(map("alpha", ["alpha", "beta"], 1), "db1/pid-7/0a0b0c0d")).toBe(describeHolderMap(null));
    expect(describeRowMap(map(null, [], 2), "db1/pid-7/0a0b0c0d")).toBe(describeHolderMap(null));
    expect(describeRowMap(map(null, [], 0), activeHolder("db1/pid-7/0a0b0c0d", map(null, [], 3)))).toBe("no shards, generation 3");
  });

  test("a refusal's headline names what differs: the shard, the generation, the shard list, or the map", () => {
    const holder = (m: ReturnType<typeof map>) => activeHolder("db1/pid-7/0a0b0c0d", m);
    const alpha2 = map("alpha", ["alpha", "beta"], 2);
    // Only the generation differs (the same map hash on both sides).
    expect(refuse(map("alpha", ["alpha", "beta"], 1), holder(alpha2))).not.toBeNull();
    expect(refusalHeadline(map("alpha", ["alpha", "beta"], 1), holder(alpha2))).toBe("this instance's shards generation is lower than its service's active's");
    expect(refusalHeadline(map("alpha", ["alpha", "beta"], 1), releasedHolder(alpha2))).toBe("this instance's shards generation is lower than its service's active's");
    expect(refusalHeadline(map("alpha", ["alpha", "beta", "gamma"], 2), holder(alpha2))).toBe("this instance's shard list differs from the one its service's active served");
    expect(refusalHeadline(map("beta", ["alpha", "beta"], 2), holder(alpha2))).toBe("this instance's shard differs from the one its service's active served");
    expect(refusalHeadline(map(null, [], 2), holder(alpha2))).toBe("this instance's shard map differs from the one its service's active served");
  });
});

describe("the role machine with a refusal", () => {
  const LEASE = 1000;
  const row = (holder: string, renewals = 0): CoordinatorRow => ({ epoch: 1, holder, renewals, tokenFloor: 100, leaseMs: LEASE, maxLeaseMs: LEASE / 4, carryLeaseMs: 0, held: null });
  const mine = map("alpha", ["alpha", "beta"], 2);
  const machine = () => drivenMachine({ leaseMs: LEASE, block: 100, refuse: (holder) => refuse(mine, holder) });

  test("a row held with a higher generation is never taken over, however long it stays unchanged; it is read again every lease/4", () => {
    const m = machine();
    const holder = activeHolder("other/pid-1/x", map("alpha", ["alpha", "beta"], 3));
    let now = 0;
    expect(m.start(now)).toEqual([{ type: "read" }]);
    for (let i = 0; i < 20; i++) {
      const actions = m.readDone(now, row(holder));
      expect(m.refusal).toContain("tokens would be below");
      expect(actions).toEqual([]);
      expect(m.nextWake()).toBe(now + LEASE / 4);
      now = m.nextWake();
      expect(m.tick(now)).toEqual([{ type: "read" }]);
    }
    expect(m.role).toBe("standby");
  });

  test("a released row of a higher generation is not taken at once; a row of its own map is, and the refusal clears", () => {
    const m = machine();
    m.start(0);
    expect(m.readDone(0, row(releasedHolder(map("alpha", ["alpha", "beta"], 3))))).toEqual([]);
    expect(m.refusal).not.toBeNull();
    expect(m.tick(LEASE / 4)).toEqual([{ type: "read" }]);
    const released = releasedHolder(mine);
    expect(m.readDone(LEASE / 4, row(released))).toEqual([{ type: "takeover", watched: { epoch: 1, renewals: 0, holder: released } }]);
    expect(m.refusal).toBeNull();
  });

  test("the same row without the refusal is taken over after a lease (the check is what stops it)", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: 100 });
    const holder = activeHolder("other/pid-1/x", map("alpha", ["alpha", "beta"], 3));
    m.start(0);
    expect(m.readDone(0, row(holder))).toEqual([]);
    expect(m.tick(LEASE)).toEqual([{ type: "takeover", watched: { epoch: 1, renewals: 0, holder } }]);
  });
});

describe("isLoopbackHost", () => {
  test("127.0.0.0/8, ::1 (any spelling, bracketed), localhost; not other hosts or wildcards", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "0:0:0:0:0:0:0:1", "localhost", "LOCALHOST", "::ffff:127.0.0.1"]) expect({ host, loopback: isLoopbackHost(host) }).toEqual({ host, loopback: true });
    for (const host of ["10.0.0.5", "128.0.0.1", "0.0.0.0", "::", "lockd-1.internal", "::2", "1127.0.0.1"]) expect({ host, loopback: isLoopbackHost(host) }).toEqual({ host, loopback: false });
  });

  test("hostOf takes the host from HOST:PORT, brackets off", () => {
    expect([hostOf("127.0.0.1:7701"), hostOf("[::1]:7701"), hostOf("lockd-1:80")]).toEqual(["127.0.0.1", "::1", "lockd-1"]);
  });
});
