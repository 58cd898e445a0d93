import { expect, test } from "bun:test";
import { ErrorCode } from "../../src/protocol/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { DEFAULT_OPS_CONNECTIONS, DEFAULT_OPS_IDLE_TIMEOUT_MS, PROCESS_FDS, REFUSAL_FDS, RESERVED_FDS, openFileLimit, parseLimits, reservedFds } from "../../src/process/limits.ts";
import { SERVE_OPTIONS } from "../../src/cli/config.ts";
import { parseDuration } from "../../src/cli/options/values.ts";
import { DEFAULT_OPS_LIMITS } from "../../src/ops/server.ts";

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
  expect(SERVE_OPTIONS.opsMaxConnections.help).toContain(`the ${RESERVED_FDS} kept`);
  // src/ops/server.ts still writes its own DEFAULT_OPS_LIMITS (left to the rewrite of the ops
  // server, which should take these two from src/process/limits.ts): until then they must agree.
  expect(DEFAULT_OPS_LIMITS.maxConnections).toBe(DEFAULT_OPS_CONNECTIONS);
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
  expect(server.engine.stats.refusedSessionLimit).toBe(50);
  expect(server.connectionCount).toBe(1);
  for (const peer of refused) peer.terminate();
  holder.end();
});
