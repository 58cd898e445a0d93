/**
 * The client as a Node.js user gets it: built by package.json's
 * "build:client" script (into a temp dir), resolved through the package's
 * "exports" map, run by plain `node`, and its .d.ts type-checked by tsc.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, mkdirSync, rmSync, symlinkSync, writeFileSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

const ROOT = resolve(import.meta.dir, "../..");
const pkg = (await Bun.file(join(ROOT, "package.json")).json()) as {
  scripts: Record<string, string>;
  exports: unknown;
  types: string;
  type: string;
};
let dir = "";
let packageDir = "";

async function run(cmd: string[], cwd: string): Promise<{ code: number; out: string; err: string }> {
  const proc = Bun.spawn(cmd, {
    cwd,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, PATH: `${join(ROOT, "node_modules/.bin")}:${process.env.PATH}` },
  });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 60_000);
  try {
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code, out, err };
  } finally {
    clearTimeout(timer);
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "lockd-node-"));
  packageDir = join(dir, "node_modules", "lockd");
  mkdirSync(packageDir, { recursive: true });
  writeFileSync(join(packageDir, "package.json"), JSON.stringify({ name: "lockd", type: pkg.type, exports: pkg.exports, types: pkg.types }));
  // The real build script, pointed at the temp package instead of ./dist.
  const script = pkg.scripts["build:client"]!.replaceAll("dist/client", join(packageDir, "dist/client"));
  const built = await run(["sh", "-c", script], ROOT);
  if (built.code !== 0) throw new Error(`build:client failed (${built.code}):\n${built.out}\n${built.err}`);
  mkdirSync(join(dir, "node_modules", "@types"), { recursive: true });
  symlinkSync(join(ROOT, "node_modules/@types/node"), join(dir, "node_modules/@types/node"));
  copyFileSync(join(ROOT, "test/fixtures/client-node-consumer.mjs"), join(dir, "consumer.mjs"));
  copyFileSync(join(ROOT, "test/fixtures/client-node-consumer.ts"), join(dir, "consumer.ts"));
}, 60_000);

afterAll(() => {
  if (dir !== "") rmSync(dir, { recursive: true, force: true });
});

test("plain node imports the built client and holds a lock over node:net", async () => {
  await using server = startServer();
  const result = await run(["node", "consumer.mjs", String(server.port)], dir);
  expect(result.err).toBe("");
  expect(result.code).toBe(0);
  const out = JSON.parse(result.out) as Record<string, unknown>;
  expect(out).toEqual({
    bun: "undefined",
    token: expect.stringMatching(/^[1-9]\d*$/),
    busy: "LOCK_BUSY",
    heldAfterLease: true,
    releasedWhy: "released",
    withLock: "bigint",
  });
  expect(engineOf(server).stats.heartbeats).toBeGreaterThan(2);
}, 30_000);

test("the built .d.ts type-checks a consumer under nodenext resolution", async () => {
  const result = await run(
    ["tsc", "--ignoreConfig", "consumer.ts", "--noEmit", "--strict", "--target", "esnext", "--module", "nodenext", "--moduleResolution", "nodenext", "--types", "node", "--lib", "esnext,esnext.disposable,dom"],
    dir,
  );
  expect(result.out + result.err).toBe("");
  expect(result.code).toBe(0);
}, 60_000);
