/**
 * The startup line of `lockd serve --coordinator` (a real process, a real
 * PostgreSQL): it links the operator's page like a single server's does
 * (`ui`), and names the data directory (`dataDir`), which with a
 * coordinator is only read, once, for the floor of a row this instance
 * creates: a missing one is not created.
 */
import { expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeFloor } from "../../src/tokens/file.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { freePort, Postgres, suitePostgres } from "../coordinator/pg.ts";

let pg: Postgres;
suitePostgres((started) => (pg = started));

function coordinated(service: string, port: number, dataDir: string): ChildServer {
  return ChildServer.spawn(
    ["serve", "--service", service, "--coordinator-lease", "2s", "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--data-dir", dataDir],
    { LOCKD_COORDINATOR: pg.url() },
  );
}

test("the startup line has ui (the page answers) and dataDir, whose floor seeds a new row", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-coord-start-"));
  try {
    writeFloor(dir, 7000);
    await using child = coordinated(`startup-${process.pid}-a`, await freePort(), dir);
    const line = await child.event("server.started");
    expect(line.role).toBe("active");
    expect(line.ui).toBe(`http://${line.ops}/ui`);
    expect(line.dataDir).toBe(dir);
    expect(line.tokensFrom).toBeGreaterThan(7000);
    const page = await fetch(line.ui, { signal: AbortSignal.timeout(10_000) });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("<html");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 30_000);

test("a missing --data-dir is not created with --coordinator (it is only read)", async () => {
  const parent = mkdtempSync(join(tmpdir(), "lockd-coord-start-"));
  const dir = join(parent, "absent");
  try {
    await using child = coordinated(`startup-${process.pid}-b`, await freePort(), dir);
    const line = await child.event("server.started");
    expect(line.dataDir).toBe(dir);
    expect(existsSync(dir)).toBe(false);
  } finally {
    rmSync(parent, { recursive: true, force: true });
  }
}, 30_000);
