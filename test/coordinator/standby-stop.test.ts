/**
 * Stopping a standby (real processes, a real PostgreSQL): it served no
 * sessions and its /readyz was 503 all along, so it stops without the
 * shutdown grace an active keeps for probes and scrapes.
 */
import { expect, test } from "bun:test";
import { ChildServer } from "../fixtures/ops-child.ts";
import { freePort, Postgres, suitePostgres } from "./pg.ts";

let pg: Postgres;
suitePostgres((started) => (pg = started));

function instance(service: string, listenPort: number, grace: string): ChildServer {
  return ChildServer.spawn(
    // A lease no stall of a loaded machine comes near: the standby must stay a standby (as the
    // active, its 60 s grace would outlast the test).
    ["serve", "--service", service, "--coordinator-lease", "15s", "--listen", `127.0.0.1:${listenPort}`, "--ops", "127.0.0.1:0", "--shutdown-grace", grace],
    { LOCKD_COORDINATOR: pg.url() },
  );
}

test("SIGTERM to a standby: a clean stop (exit 0) without the grace period; the active's grace is untouched", async () => {
  const service = `standby-stop-${process.pid}`;
  const port = await freePort();
  await using active = instance(service, port, "0s");
  expect((await active.event("server.started")).role).toBe("active");
  // A grace longer than this test's timeout: had the standby kept it, the test would time out.
  await using standby = instance(service, port, "60s");
  expect((await standby.event("server.started")).role).toBe("standby");
  standby.proc.kill("SIGTERM");
  expect(await standby.exit(15_000)).toBe(0);
  const events = standby.lines.map((l) => l.event);
  // Its /readyz was 503 all along and it had no sessions: its first shutdown line says what it is.
  expect(events).toContain("shutdown.standby_begins");
  expect(events).not.toContain("shutdown.begins");
  expect(events).toContain("shutdown.grace_skipped");
  expect(events).not.toContain("shutdown.grace");
  expect(events.at(-1)).toBe("shutdown.stopped");
  // The active is still active and keeps its usual shutdown steps.
  active.proc.kill("SIGTERM");
  expect(await active.exit(15_000)).toBe(0);
  expect(active.lines.map((l) => l.event)).toEqual(expect.arrayContaining(["shutdown.begins", "shutdown.grace"]));
}, 30_000);
