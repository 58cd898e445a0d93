/**
 * The right reason in the logs: a statement answered with an error, one
 * that gets no answer in time, a coordinator that cannot be reached and a
 * refused login are different events with different codes and words, on
 * the active and on the standby; a takeover that was answered with a
 * changed row is the only `failover.takeover_lost`. A real PostgreSQL, two
 * instances with 2 s coordinator leases, lockd's own role and database.
 */
import { expect, test } from "bun:test";
import { ChildServer } from "../fixtures/ops-child.ts";
import { freePort, Postgres, suitePostgres } from "./pg.ts";

let pg: Postgres;
suitePostgres((started) => (pg = started));

const LEASE = 2000;

test("a failed statement, a timeout, an unreachable coordinator and a refused login: each its own code, on both roles", async () => {
  const admin = pg.client();
  try {
    await admin.unsafe("CREATE ROLE reasons LOGIN PASSWORD 'pw1'");
    await admin.unsafe("CREATE DATABASE reasons OWNER reasons");
  } finally {
    await admin.close();
  }
  const url = `postgres://reasons:pw1@127.0.0.1:${pg.port}/reasons`;
  const db = new Bun.SQL({ url: pg.url(undefined, "reasons"), adapter: "postgres", max: 2 });
  const port = await freePort();
  const spawn = () =>
    ChildServer.spawn(["serve", "--service", "reasons", "--coordinator-lease", `${LEASE}ms`, "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_COORDINATOR: url });
  await using a = spawn();
  await a.event("failover.active");
  await using b = spawn();
  expect((await b.event("server.started")).role).toBe("standby");
  const both = [a, b];
  /** The first line with `code` after the n-th `coordinator.answering` of each instance. */
  const after = (child: ChildServer, code: Parameters<ChildServer["event"]>[0], answered: number, ms = 10_000) =>
    child.eventWhere(code, (line) => child.events("coordinator.answering").filter((l) => l.time <= line.time).length >= answered, ms);
  try {
    // 1. The server answers with an error: the table is gone (renamed).
    await db.unsafe("ALTER TABLE lockd_coordinator RENAME TO lockd_coordinator_away");
    for (const child of both) {
      const failed = await child.event("coordinator.statement_failed");
      expect(failed).toMatchObject({ sqlstate: "42P01", server: `127.0.0.1:${pg.port}` });
      expect(failed.error).toContain("lockd_coordinator");
      expect(["read", "renew", "reserve", "raise"]).toContain(failed.statement);
    }
    await db.unsafe("ALTER TABLE lockd_coordinator_away RENAME TO lockd_coordinator");
    for (const child of both) expect((await child.event("coordinator.answering")).failed).toBeGreaterThanOrEqual(1);
    expect(a.events("coordinator.statement_failed")).toHaveLength(1); // once per streak, not once per statement
    // The active's unconfirmed renewals say why.
    const renewal = a.events("failover.renewal_failed")[0];
    if (renewal !== undefined) expect(renewal).toMatchObject({ reason: "failed" });

    // 2. No answer in time: a transaction holds the row locked for 3 s, so the renewal (or a takeover) waits.
    const held = db.begin(async (tx) => {
      await tx.unsafe("SELECT * FROM lockd_coordinator FOR UPDATE");
      await Bun.sleep(3000);
    });
    const timedOut = await Promise.any(both.map((child) => after(child, "coordinator.statement_timeout", 1)));
    expect(timedOut).toMatchObject({ timeoutMs: LEASE / 2 });
    expect(["renew", "takeover", "reserve", "raise"]).toContain(timedOut.statement);
    await held;
    await Promise.any(both.map((child) => child.nthEvent("coordinator.answering", 2)));

    // 3. The coordinator goes away: unreachable, on both roles; back, answering.
    await pg.stop();
    for (const child of both) expect(await after(child, "coordinator.unreachable", 1)).toMatchObject({ server: `127.0.0.1:${pg.port}` });
    await pg.start();
    for (const child of both) await child.eventWhere("coordinator.answering", (l) => l.failed >= 1 && child.events("coordinator.unreachable").some((u) => u.time <= l.time), 15_000);

    // 4. A refused login: the password changes and lockd's connections are cut, so it must log in again.
    const superuser = pg.client();
    try {
      await superuser.unsafe("ALTER ROLE reasons PASSWORD 'pw2'");
      await superuser.unsafe("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'reasons'");
    } finally {
      await superuser.close();
    }
    for (const child of both) {
      const refused = await child.event("coordinator.login_refused");
      expect(refused.msg).toContain("refused lockd's login");
      expect(refused.error).toContain("password authentication failed");
    }
    // Only an answered takeover that found the row changed is "the row changed"; a failed one says it failed.
    for (const child of both) {
      for (const lost of child.events("failover.takeover_lost")) expect(lost.msg).toBe("takeover did not happen: the coordinator row changed");
      for (const failed of child.events("failover.takeover_failed")) expect(["timeout", "login", "unreachable", "read_only", "failed"]).toContain(failed.reason);
    }
    // The active that stepped down said why its renewals went unconfirmed.
    const down = [...a.events("failover.stepping_down"), ...b.events("failover.stepping_down")].filter((l) => String(l.reason).startsWith("no renewal confirmed"));
    for (const line of down) expect(typeof line.lastFailure).toBe("string");
  } finally {
    await db.close().catch(() => {});
  }
}, 90_000);
