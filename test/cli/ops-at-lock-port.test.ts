// `lockd status` / `force-release` given the lock port for --ops: the
// error says it is a lock port, not an ops port, and names the ops
// server's default, instead of Bun's "Malformed_HTTP_Response".
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";

const dataDir = mkdtempSync(join(tmpdir(), "lockd-opslock-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

test("status and force-release at the lock port: exit 69, 'a lock port, not an ops port', the default ops address", async () => {
  await using server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_DATA_DIR: dataDir });
  const { listenPort } = await server.addresses();
  for (const args of [["status"], ["force-release", "--admin-token", "secret-token", "jobs/x"]]) {
    const answer = await runCli([...args, "--ops", `127.0.0.1:${listenPort}`]);
    expect({ args, code: answer.code }).toEqual({ args, code: 69 });
    expect(answer.err).toContain("that is likely a lock port (--listen), not an ops port (the ops server's default is 127.0.0.1:7701)");
    expect(answer.err).not.toContain("Malformed_HTTP_Response");
  }
  server.proc.kill("SIGTERM");
  expect(await server.exit()).toBe(0);
});
