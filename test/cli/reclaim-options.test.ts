// `lockd serve --reclaim-max-lease` (LOCKD_RECLAIM_MAX_LEASE): taken with a
// coordinator too (the row keeps the service's cap), and kept
// raise-only in the data directory: a run with a lower value uses the one
// recorded, and says so.
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

test("with --coordinator: accepted (the start goes on to the coordinator, here unreachable: 69, not a usage error)", async () => {
  for (const [args, env] of [
    [["--reclaim-max-lease", "10s"], {}],
    [[], { LOCKD_RECLAIM_MAX_LEASE: "10s" }],
  ] as const) {
    const served = await runCli(["serve", "--coordinator", "postgres://lockd@127.0.0.1:1/lockd", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", ...args], env);
    expect(served.err).not.toContain("--reclaim-max-lease");
    expect(served.code).toBe(69);
  }
});

test("a cap of 0 is refused at start, exit 64, naming the flag", async () => {
  const zero = await runCli(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--reclaim-max-lease", "0s"]);
  expect(zero.code).toBe(64);
  expect(zero.err).toContain("--reclaim-max-lease");
});

test("a run with a lower value than the data directory's uses the recorded one, and logs it", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-reclaim-options-"));
  dirs.push(dir);
  const serve = (value: string) => ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--reclaim-max-lease", value], { LOCKD_DATA_DIR: dir });
  await using first = serve("10s");
  expect(await first.event("server.listening")).toMatchObject({ reclaimMaxLeaseMs: 10_000 });
  first.proc.kill("SIGTERM");
  expect(await first.exit()).toBe(0);

  await using second = serve("2s");
  expect(await second.event("reclaim.max_lease_kept")).toMatchObject({ requestedMs: 2000, maxLeaseMs: 10_000 });
  expect(await second.event("server.listening")).toMatchObject({ reclaimMaxLeaseMs: 10_000, reclaimPublished: 0 });
});
