// One server per port: a second `lockd serve` on a port the first's ops
// server (or lock listener) holds fails to start, exit 69 with one line
// naming the flag and EADDRINUSE, rather than sharing the port with it.
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChildServer } from "../fixtures/ops-child.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function serve(listen: string, ops: string): ChildServer {
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-exclusive-"));
  dirs.push(dataDir);
  return ChildServer.spawn(["serve", "--listen", listen, "--ops", ops, "--shutdown-grace", "0s"], { LOCKD_DATA_DIR: dataDir });
}

test("a second server on the first's --ops port exits 69 naming --ops and EADDRINUSE; the first keeps answering", async () => {
  await using first = serve("127.0.0.1:0", "127.0.0.1:0");
  const { opsPort } = await first.addresses();
  await using second = serve("127.0.0.1:0", `127.0.0.1:${opsPort}`);
  expect(await second.exit()).toBe(69);
  expect(second.raw).toEqual([
    `lockd serve: cannot listen on 127.0.0.1:${opsPort} (--ops): address in use? (another lockd, or another program, listens there) [EADDRINUSE]`,
  ]);
  expect(second.lines).toEqual([]); // it never started
  const health = await fetch(`http://127.0.0.1:${opsPort}/healthz`);
  expect(health.status).toBe(200);
  first.proc.kill("SIGTERM");
  expect(await first.exit()).toBe(0);
});

test("a second server on the first's --listen port exits 69 naming --listen and EADDRINUSE", async () => {
  await using first = serve("127.0.0.1:0", "127.0.0.1:0");
  const { listenPort } = await first.addresses();
  await using second = serve(`127.0.0.1:${listenPort}`, "127.0.0.1:0");
  expect(await second.exit()).toBe(69);
  expect(second.raw).toEqual([
    `lockd serve: cannot listen on 127.0.0.1:${listenPort} (--listen): address in use? (another lockd, or another program, listens there) [EADDRINUSE]`,
  ]);
  first.proc.kill("SIGTERM");
  expect(await first.exit()).toBe(0);
});
