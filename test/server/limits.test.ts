import { expect, test } from "bun:test";
import { ErrorCode } from "../../src/protocol/index.ts";
import { join } from "node:path";
import { ChildServer } from "../fixtures/ops-child.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { DEFAULT_OPS_CONNECTIONS, DEFAULT_OPS_IDLE_TIMEOUT_MS, PROCESS_FDS, REFUSAL_FDS, RESERVED_FDS, openFileLimit, parseLimits, reservedFds } from "../../src/process/limits.ts";
import { SERVE_OPTIONS } from "../../src/cli/config.ts";
import { parseDuration } from "../../src/cli/options/values.ts";
import { DEFAULT_OPS_LIMITS } from "../../src/ops/server.ts";
import { engineOf } from "../helpers/engine.ts";

test("parses the open-file line of /proc/self/limits", () => {
  const text = [
    "Limit                     Soft Limit           Hard Limit           Units",
    "Max cpu time              unlimited            unlimited            seconds",
    "Max open files            20000                40000                files",
  ].join("\n");
  expect(parseLimits(text)).toEqual({ soft: 20000, hard: 40000, sessionCapacity: 20000 - RESERVED_FDS });
  expect(parseLimits("nothing here").soft).toBeNull();
});

test("reads this process's limit on Linux", () => {
  const limit = openFileLimit();
  if (process.platform === "linux") expect(limit.soft).toBeGreaterThan(0);
});

test("the reserve is the process, the ops connection limit and refusals: 256 with the default ops limit, more with a larger one", () => {
  expect(RESERVED_FDS).toBe(256);
  expect(RESERVED_FDS).toBe(PROCESS_FDS + DEFAULT_OPS_CONNECTIONS + REFUSAL_FDS);
  const text = "Max open files            4096                 4096                 files";
  expect(parseLimits(text).sessionCapacity).toBe(4096 - 256);
  expect(parseLimits(text, 1024).sessionCapacity).toBe(4096 - reservedFds(1024));
  expect(reservedFds(1024) - reservedFds()).toBe(1024 - DEFAULT_OPS_CONNECTIONS);
  expect(parseLimits("Max open files            100                  100                  files").sessionCapacity).toBe(0);
});

test("the ops defaults are defined here once: the CLI's defaults and help text come from them", () => {
  expect(SERVE_OPTIONS.opsMaxConnections.default).toBe(String(DEFAULT_OPS_CONNECTIONS));
  expect(parseDuration(SERVE_OPTIONS.opsIdleTimeout.default)).toBe(DEFAULT_OPS_IDLE_TIMEOUT_MS);
  expect(SERVE_OPTIONS.maxSessions.help).toContain(`minus ${RESERVED_FDS} kept`);
  expect(DEFAULT_OPS_LIMITS.idleTimeoutMs).toBe(DEFAULT_OPS_IDLE_TIMEOUT_MS);
});

test("a connection refused with OVERLOADED gives its descriptor back at once, even when its peer never closes", async () => {
  await using server = startServer({ maxSessions: 1 });
  const holder = await WirePeer.claim(server.port, "L", 60_000);
  const refused: WirePeer[] = [];
  for (let i = 0; i < 50; i++) {
    const peer = await WirePeer.connect(server.port);
    expect((await peer.frame(0)).code).toBe(ErrorCode.OVERLOADED);
    refused.push(peer); // kept open: the server must not wait for it
  }
  expect(engineOf(server).stats.refusedSessionLimit).toBe(50);
  expect(server.connectionCount).toBe(1);
  for (const peer of refused) peer.terminate();
  holder.end();
});

test.skipIf(process.platform !== "linux")("raiseOpenFileLimit lifts the soft open-file limit to the hard one, through the C library", async () => {
  // In a child: lowering this test process's own limit would reach every other test file.
  const script = `
    import { openFileLimit, raiseOpenFileLimit, setOpenFileSoftLimit } from ${JSON.stringify(join(import.meta.dir, "../../src/process/limits.ts"))};
    const hard = openFileLimit().hard;
    const lowered = setOpenFileSoftLimit(300);
    const soft = openFileLimit().soft;
    const raised = raiseOpenFileLimit();
    const again = raiseOpenFileLimit();
    console.log(JSON.stringify({ hard, lowered, soft, raised, after: openFileLimit().soft, again }));
  `;
  const child = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  expect(err).toBe("");
  expect(code).toBe(0);
  const r = JSON.parse(out);
  expect(r.lowered).toBe(true);
  expect(r.soft).toBe(300);
  expect(r.raised).toEqual({ from: 300, to: r.hard });
  expect(r.after).toBe(r.hard);
  // At the hard limit already: nothing to do, no error.
  expect(r.again).toEqual({ from: r.hard, to: r.hard });
});

test.skipIf(process.platform !== "linux")("lockd serve starts with its soft open-file limit at the hard limit, and says so", async () => {
  // `ulimit -S` lowers only the soft limit, as a shell or a unit's default does; the server (Bun, then lockd) raises it.
  await using child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], {}, undefined, { softOpenFiles: 512 });
  const start = await child.line("lockd listening");
  const hard = start.openFileLimit.hard as number;
  expect(start.openFileLimit.soft).toBe(hard);
  expect(start.sessionCapacity).toBe(Math.max(0, hard - RESERVED_FDS));
  child.proc.kill("SIGTERM");
  expect(await child.exit()).toBe(0);
});
