/**
 * The npm bin shim (bin/lockd.mjs) run by Bun itself (`bun bin/lockd.mjs`,
 * bunx, or npm scripts on a machine whose `node` is Bun) runs the command in
 * its own process, once. A shim that went on to its Node.js part after the
 * command ran it a second time: COMMAND twice, and a stopped server started
 * again.
 */
import { expect, test } from "bun:test";
import { join, resolve } from "node:path";
import { startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

const ROOT = resolve(import.meta.dir, "../..");
const BIN = join(ROOT, "bin/lockd.mjs");

function shim(args: string[]): { code: Promise<number>; out: Promise<string> } {
  const proc = Bun.spawn([process.execPath, BIN, ...args], { cwd: ROOT, stdin: "ignore", stdout: "pipe", stderr: "inherit" });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 20_000);
  return { code: proc.exited.finally(() => clearTimeout(timer)), out: new Response(proc.stdout).text() };
}

test("under Bun the shim runs a command once: --version prints one line", async () => {
  const version = shim(["--version"]);
  expect(await version.code).toBe(0);
  expect((await version.out).trim().split("\n")).toEqual([expect.stringMatching(/^lockd \d/)]);
}, 30_000);

test("under Bun the shim runs lockd run's COMMAND once, and takes one grant", async () => {
  await using server = startServer();
  const run = shim(["run", "--server", `127.0.0.1:${server.port}`, "jobs/once", "--", "sh", "-c", "echo ran $LOCKD_TOKEN"]);
  expect(await run.code).toBe(0);
  expect((await run.out).trim().split("\n")).toEqual(["ran 1"]);
  expect(engineOf(server).tokens.last).toBe(1);
}, 30_000);
