/**
 * `lockd status` during a lock-delay: docs/operations.md ("The lock-delay",
 * "Where it shows", and the `lockd status` section) says it prints a line
 * such as `lock-delay: 12.3 s left (every name: ...)` while the server holds
 * names back. The server here starts on a data directory whose lease record
 * says its last run did not stop cleanly (written directly, as a crash
 * leaves it), so every name is held back for 0.82 x 10 s from its start.
 */
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeLeases } from "../../src/server/leases-file.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

test("lockd status prints the lock-delay line while a restarted server holds every name back", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-status-delay-"));
  dirs.push(dir);
  writeLeases(dir, { maxLeaseMs: 10_000, carryLeaseMs: 0, clean: false, held: null });
  await using server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_DATA_DIR: dir });
  const start = await server.line("lockd listening");
  expect(start).toMatchObject({ lastStop: "not clean", lockDelayNames: "every name" });
  const { opsPort } = await server.addresses();
  // The ops server says so (this part holds) ...
  const ready = (await (await fetch(`http://127.0.0.1:${opsPort}/readyz`)).json()) as { lockDelay: { everyName: boolean } | null };
  expect(ready.lockDelay).toMatchObject({ why: "restart", everyName: true });
  // ... and lockd status, asked well inside the 8.2 s delay, shows it.
  const shown = await runCli(["status", "--ops", `127.0.0.1:${opsPort}`]);
  expect(shown.code).toBe(0);
  expect(shown.out).toMatch(/^lock-delay: \d+(\.\d+)? s left \(every name/m);
}, 20_000);
