/**
 * The PostgreSQL coordinator store against a real, throwaway PostgreSQL:
 * the statements' compare-and-set semantics, the schema check and the
 * one-line start errors.
 */
import { describe, expect, test } from "bun:test";
import { CoordinatorConfigError, PgCoordinatorStore, type PgStoreOptions, SCHEMA_VERSION, STATEMENTS } from "../../src/failover/store.ts";
import { freePort, Postgres, suitePostgres } from "./pg.ts";

let pg: Postgres;
suitePostgres((started) => (pg = started));

let serial = 0;
function options(instance: string, service: string, extra: Partial<PgStoreOptions> = {}): PgStoreOptions {
  return { url: pg.url(), service, instance, leaseMs: 2000, block: 100, connectTimeoutS: 5, ...extra };
}

describe("statements", () => {
  test("create, compare-and-set takeover, renew, reserve and release decide on holder, epoch and renewals", async () => {
    const service = `svc-${++serial}`;
    await using a = await openStore(options("a", service));
    await using b = await openStore(options("b", service));
    const lease = { maxLeaseMs: 500, carryLeaseMs: 0, held: null, reclaimMaxLeaseMs: 0, reclaim: null }; // a new term starts from a quarter of the 2 s lease
    expect(await a.read()).toBeNull();
    expect(await a.create(40)).toEqual({ epoch: 1, holder: "a", renewals: 0, tokenFloor: 140, leaseMs: 2000, ...lease });
    expect(await b.create(0)).toBeNull(); // exists
    expect(await a.renew(1, 0)).toBe(true);
    expect(await a.renew(1, 0)).toBe(true);
    expect(await b.read()).toEqual({ epoch: 1, holder: "a", renewals: 2, tokenFloor: 140, leaseMs: 2000, ...lease });
    // A takeover on stale values changes nothing.
    expect(await b.takeover({ epoch: 1, renewals: 1, holder: "a" })).toBeNull();
    expect(await b.takeover({ epoch: 1, renewals: 2, holder: "a" })).toEqual({ epoch: 2, holder: "b", renewals: 0, tokenFloor: 240, leaseMs: 2000, maxLeaseMs: 500, carryLeaseMs: 500, held: null, reclaimMaxLeaseMs: 0, reclaim: null });
    // The deposed active can neither renew, reserve, raise, nor release.
    expect(await a.renew(1, 0)).toBe(false);
    expect(await a.reserve(1)).toBeNull();
    expect(await a.raise(1, 90_000)).toBeNull();
    expect(await a.release(1, { held: [], maxLeaseMs: 0, carryLeaseMs: 0 })).toBe(false);
    expect(await b.reserve(2)).toBe(340);
    expect(await b.release(2, { held: [["x", 700]], maxLeaseMs: 700, carryLeaseMs: 500 })).toBe(true);
    expect(await a.read()).toEqual({ epoch: 2, holder: "", renewals: 1, tokenFloor: 340, leaseMs: 2000, maxLeaseMs: 700, carryLeaseMs: 500, held: [["x", 700]], reclaimMaxLeaseMs: 0, reclaim: null });
    expect(await a.takeover({ epoch: 2, renewals: 1, holder: "" })).toEqual({ epoch: 3, holder: "a", renewals: 0, tokenFloor: 440, leaseMs: 2000, maxLeaseMs: 500, carryLeaseMs: 700, held: null, reclaimMaxLeaseMs: 0, reclaim: null });
  });

  test("the largest lease: raised only through GREATEST, folded into the carried lease at a takeover, cleared by a renewal", async () => {
    const service = `svc-${++serial}`;
    await using a = await openStore(options("a", service));
    await using b = await openStore(options("b", service));
    await a.create(0);
    expect(await a.raise(1, 20_000)).toBe(20_000);
    expect(await a.raise(1, 3_000)).toBe(20_000); // a late or reordered raise never lowers it
    expect((await b.read())!.maxLeaseMs).toBe(20_000);
    const taken = await b.takeover({ epoch: 1, renewals: 0, holder: "a" });
    // The old active's holders may still believe: its maximum is carried into the new epoch.
    expect(taken).toMatchObject({ epoch: 2, maxLeaseMs: 500, carryLeaseMs: 20_000 });
    expect(await b.renew(2, 20_000)).toBe(true);
    expect((await a.read())!.carryLeaseMs).toBe(20_000);
    // Once this term's wait is over, its renewals carry nothing.
    expect(await b.renew(2, 0)).toBe(true);
    expect((await a.read())!.carryLeaseMs).toBe(0);
  });

  test("a version 1 database is migrated in place: its row keeps working and has no largest lease until a takeover writes one", async () => {
    const url = await pg.databaseAtSchema(`v1_${process.pid}_${++serial}`, 1);
    const old = new Bun.SQL({ url, adapter: "postgres", max: 1 });
    try {
      await old.unsafe(
        "CREATE TABLE lockd_coordinator (service VARCHAR(255) PRIMARY KEY, epoch BIGINT NOT NULL, holder VARCHAR(255) NOT NULL, renewals BIGINT NOT NULL, " +
          "token_floor BIGINT NOT NULL, lease_ms BIGINT NOT NULL, renewed_at TIMESTAMP WITH TIME ZONE)",
      );
      await old.unsafe("INSERT INTO lockd_coordinator VALUES ('s', 4, 'old', 9, 700, 2000, CURRENT_TIMESTAMP)");
    } finally {
      await old.close();
    }
    await using a = await openStore(options("a", "s", { url }));
    expect(await a.read()).toEqual({ epoch: 4, holder: "old", renewals: 9, tokenFloor: 700, leaseMs: 2000, maxLeaseMs: null, carryLeaseMs: 0, held: null, reclaimMaxLeaseMs: 0, reclaim: null });
    expect(await a.takeover({ epoch: 4, renewals: 9, holder: "old" })).toMatchObject({ epoch: 5, maxLeaseMs: 500, carryLeaseMs: 0 });
    const check = new Bun.SQL({ url, adapter: "postgres", max: 1 });
    try {
      expect(((await check.unsafe("SELECT version FROM lockd_schema")) as { version: number }[])[0]!.version).toBe(SCHEMA_VERSION);
    } finally {
      await check.close();
    }
    // A second start finds the current version and changes nothing.
    await using b = await openStore(options("b", "s", { url }));
    expect((await b.read())!.epoch).toBe(5);
  });

  test("reclaim's columns: the cap only ever raised and covered by each term's largest lease; a release publishes the grants, a takeover clears them", async () => {
    const service = `svc-${++serial}`;
    await using a = await openStore(options("a", service, { reclaimMaxLeaseMs: 10_000 }));
    await using b = await openStore(options("b", service, { reclaimMaxLeaseMs: 4_000 }));
    await using off = await openStore(options("off", service));
    // Created with a's cap: the term's largest lease covers it (a reclaimed holder is this term's).
    expect(await a.create(0)).toMatchObject({ maxLeaseMs: 10_000, reclaimMaxLeaseMs: 10_000, reclaim: null });
    expect(await off.read()).toMatchObject({ maxLeaseMs: 10_000, reclaimMaxLeaseMs: 10_000 });
    const grants = new Map([
      ["x", [{ token: 7, slot: -1, limit: 1, leaseMs: 5000 }]],
      ["pool", [{ token: 8, slot: 0, limit: 3, leaseMs: 4000 }, { token: 9, slot: 2, limit: 3, leaseMs: 4000 }]],
    ]);
    expect(await a.release(1, { held: [["x", 5000], ["pool", 4000]], maxLeaseMs: 5000, carryLeaseMs: 0, reclaim: grants })).toBe(true);
    expect(await b.read()).toMatchObject({ holder: "", reclaim: grants, reclaimMaxLeaseMs: 10_000 });
    // b's lower cap lowers nothing; the takeover clears the published set.
    expect(await b.takeover({ epoch: 1, renewals: 1, holder: "" })).toMatchObject({ epoch: 2, maxLeaseMs: 10_000, reclaimMaxLeaseMs: 10_000, reclaim: null });
    // An instance with reclaim off still carries the row's cap into its term's largest lease.
    expect(await off.takeover({ epoch: 2, renewals: 0, holder: "b" })).toMatchObject({ epoch: 3, maxLeaseMs: 10_000, reclaimMaxLeaseMs: 10_000 });
    // A release without grants publishes none.
    expect(await off.release(3, { held: [], maxLeaseMs: 0, carryLeaseMs: 0 })).toBe(true);
    expect((await a.read())!.reclaim).toBeNull();
  });

  test("a version 2 database is migrated in place to reclaim's columns", async () => {
    const url = await pg.databaseAtSchema(`v2_${process.pid}_${++serial}`, 2);
    const old = new Bun.SQL({ url, adapter: "postgres", max: 1 });
    try {
      await old.unsafe(
        "CREATE TABLE lockd_coordinator (service VARCHAR(255) PRIMARY KEY, epoch BIGINT NOT NULL, holder VARCHAR(255) NOT NULL, renewals BIGINT NOT NULL, " +
          "token_floor BIGINT NOT NULL, lease_ms BIGINT NOT NULL, renewed_at TIMESTAMP WITH TIME ZONE, lease_max_ms BIGINT, lease_carry_ms BIGINT, held TEXT)",
      );
      await old.unsafe("INSERT INTO lockd_coordinator VALUES ('s', 4, 'old', 9, 700, 2000, CURRENT_TIMESTAMP, 3000, 0, NULL)");
    } finally {
      await old.close();
    }
    await using a = await openStore(options("a", "s", { url, reclaimMaxLeaseMs: 6000 }));
    expect(await a.read()).toMatchObject({ epoch: 4, maxLeaseMs: 3000, reclaimMaxLeaseMs: 0, reclaim: null });
    expect(await a.takeover({ epoch: 4, renewals: 9, holder: "old" })).toMatchObject({ epoch: 5, maxLeaseMs: 6000, carryLeaseMs: 3000, reclaimMaxLeaseMs: 6000 });
    const check = new Bun.SQL({ url, adapter: "postgres", max: 1 });
    try {
      expect(((await check.unsafe("SELECT version FROM lockd_schema")) as { version: number }[])[0]!.version).toBe(SCHEMA_VERSION);
    } finally {
      await check.close();
    }
  });

  test("two instances racing to create: exactly one wins", async () => {
    const service = `svc-${++serial}`;
    await using a = await openStore(options("a", service));
    await using b = await openStore(options("b", service));
    const results = await Promise.all([a.create(0), b.create(0)]);
    expect(results.filter((r) => r !== null)).toHaveLength(1);
  });

  test("instances starting at once on an empty database all start (the tables are created once; the losers of the race see the winner's)", async () => {
    // Four instances of two services (two shards, each an active and a standby) start together.
    for (let round = 0; round < 4; round++) {
      const db = `fresh_${process.pid}_${++serial}`;
      const admin = pg.client();
      try {
        await admin.unsafe(`CREATE DATABASE ${db}`);
      } finally {
        await admin.close();
      }
      const url = pg.url(undefined, db);
      const opened = await Promise.allSettled(["a1", "a2", "b1", "b2"].map((id) => openStore(options(id, `svc-${id[0]}`, { url }))));
      for (const result of opened) if (result.status === "fulfilled") await result.value.close();
      expect(opened.map((r) => (r.status === "fulfilled" ? "ok" : (r.reason as Error).message))).toEqual(["ok", "ok", "ok", "ok"]);
    }
  });

  test("no deciding statement compares a timestamp: WHERE clauses name only service, holder, epoch and renewals", () => {
    for (const [name, text] of Object.entries(STATEMENTS)) {
      const where = /\bWHERE\b([\s\S]*?)(?:\bRETURNING\b|$)/i.exec(text)?.[1];
      if (where === undefined) continue;
      const columns = [...where.matchAll(/([a-z_]+)\s*=/gi)].map((m) => m[1]!.toLowerCase());
      expect({ name, columns: columns.filter((c) => !["service", "holder", "epoch", "renewals", "component", "version"].includes(c)) }).toEqual({ name, columns: [] });
      expect(where).not.toMatch(/renewed_at|now\(|current_timestamp|clock_|interval|<|>/i);
    }
    // renewed_at is written, never read.
    expect(STATEMENTS.read).not.toContain("renewed_at");
  });
});

describe("start errors: one line", () => {
  test("a table of another schema version", async () => {
    const url = await pg.databaseAtSchema(`other_${++serial}`, 99);
    const error = await openError(options("a", "s", { url }));
    expect(error.message).toContain("schema version 99");
    expect(error.message).toContain(`expects version ${SCHEMA_VERSION}`);
  });

  test("a wrong password", async () => {
    const error = await openError(options("a", "s", { url: pg.url("wrong") }));
    expect(error.message).toMatch(/refused the login/);
    expect(error.message).not.toContain("wrong@"); // the password is not printed
    expect(error.message).not.toContain(":wrong");
  });

  test("nothing listening", async () => {
    const port = await freePort();
    const error = await openError(options("a", "s", { url: `postgres://lockd:secret@127.0.0.1:${port}/postgres` }));
    expect(error.message).toMatch(/cannot reach the coordinator/);
    expect(error.message).not.toContain("secret");
  });

  test("a URL that is not PostgreSQL", async () => {
    expect((await openError(options("a", "s", { url: "mysql://u:p@127.0.0.1:3306/x" }))).message).toMatch(/not a PostgreSQL URL/);
    expect((await openError(options("a", "s", { url: "not a url" }))).message).toMatch(/is not a URL/);
  });

  test("a server that does not speak PostgreSQL", async () => {
    using http = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("hello") });
    const error = await openError(options("a", "s", { url: `postgres://lockd:secret@127.0.0.1:${http.port}/postgres`, connectTimeoutS: 3 }));
    expect(error.message).toMatch(/is it a PostgreSQL server/);
    expect(error.message.split("\n")).toHaveLength(1);
  });
});

async function openStore(o: PgStoreOptions): Promise<PgCoordinatorStore & AsyncDisposable> {
  const store = await PgCoordinatorStore.open(o);
  return Object.assign(store, { [Symbol.asyncDispose]: () => store.close() });
}

async function openError(o: PgStoreOptions): Promise<CoordinatorConfigError> {
  try {
    const store = await PgCoordinatorStore.open(o);
    await store.close();
  } catch (error) {
    expect(error).toBeInstanceOf(CoordinatorConfigError);
    return error as CoordinatorConfigError;
  }
  throw new Error("expected the coordinator to be refused");
}
