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
  expect((await active.line("lockd started")).role).toBe("active");
  // A grace longer than this test's timeout: had the standby kept it, the test would time out.
  await using standby = instance(service, port, "60s");
  expect((await standby.line("lockd started")).role).toBe("standby");
  standby.proc.kill("SIGTERM");
  expect(await standby.exit(15_000)).toBe(0);
  const messages = standby.lines.map((l) => l.msg);
  // Its /readyz was 503 all along and it had no sessions: its first shutdown line says what it is.
  expect(messages).toContain("shutting down: a standby, no sessions");
  expect(messages).not.toContain("shutting down: readyz is 503, closing sessions");
  expect(messages).toContain("a standby served no sessions: stopping without the grace period");
  expect(messages).not.toContain("sessions closed; ops server stays up for the grace period");
  expect(messages.at(-1)).toBe("stopped");
  // The active is still active and keeps its usual shutdown steps.
  active.proc.kill("SIGTERM");
  expect(await active.exit(15_000)).toBe(0);
  expect(active.lines.map((l) => l.msg)).toEqual(expect.arrayContaining(["shutting down: readyz is 503, closing sessions", "sessions closed; ops server stays up for the grace period"]));
}, 30_000);
