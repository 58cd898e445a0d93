/**
 * The npm package as a user gets it: `npm pack` of a copy of this repository
 * (its prepack script builds the Node client), installed from the tarball
 * into an empty Node.js project, offline and with an empty npm cache (zod,
 * the one dependency, comes packed from this repository's node_modules).
 * Plain `node` imports "lockd/client" and holds a lock; the `lockd` bin runs
 * with the `bun` npm package installed and says in one line what it needs
 * without it. The packaged declarations compile in a TypeScript project
 * under `tsc --target es2022` and `esnext` without skipLibCheck, and
 * `await using` compiled for es2022 runs under plain node. Also:
 * package-lock.json matches package.json (an install in a fresh clone
 * leaves the tree clean).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { startServer } from "../helpers/wire.ts";
import { sigtermOutcome } from "./sigterm.ts";

const ROOT = resolve(import.meta.dir, "../..");
const TSC = join(ROOT, "node_modules/.bin/tsc");
const NODE = Bun.which("node");
const NPM = Bun.which("npm");
const pkg = (await Bun.file(join(ROOT, "package.json")).json()) as { version: string; bin: Record<string, string>; exports: Record<string, Record<string, string> | string> };

let dir = "";
let project = "";
let files: string[] = [];
/** PATH with node and nothing else (no bun). */
let nodeOnlyPath = "";

async function run(cmd: string[], cwd: string, env: Record<string, string | undefined> = process.env): Promise<{ code: number; out: string; err: string }> {
  const proc = Bun.spawn(cmd, { cwd, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 90_000);
  try {
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code, out, err };
  } finally {
    clearTimeout(timer);
  }
}

async function ok(cmd: string[], cwd: string, env?: Record<string, string | undefined>): Promise<string> {
  const result = await run(cmd, cwd, env);
  if (result.code !== 0) throw new Error(`${cmd.join(" ")} failed (${result.code}):\n${result.out}\n${result.err}`);
  return result.out;
}

/** npm, offline, with a cache of its own: nothing may come from a registry. */
function npm(...args: string[]): string[] {
  return [NPM!, ...args, "--offline", "--cache", join(dir, "npm-cache"), "--no-audit", "--no-fund", "--loglevel=error"];
}

beforeAll(async () => {
  if (NODE === null || NPM === null) throw new Error("node and npm must be on PATH for the packaging tests");
  dir = mkdtempSync(join(tmpdir(), "lockd-pack-"));
  // A copy of the repository (as a fresh clone has it) with this one's node_modules.
  const source = join(dir, "source");
  cpSync(ROOT, source, {
    recursive: true,
    filter: (path) => !["node_modules", ".git", "dist", "lockd-data"].includes(basename(path)),
  });
  symlinkSync(join(ROOT, "node_modules"), join(source, "node_modules"));
  const out = join(dir, "out");
  mkdirSync(out);
  await ok(npm("pack", "--pack-destination", out), source, { ...process.env, PATH: `${join(ROOT, "node_modules/.bin")}:${process.env.PATH}` });
  await ok(npm("pack", join(ROOT, "node_modules/zod"), "--pack-destination", out), dir);
  const tarball = join(out, `lockd-${pkg.version}.tgz`);
  const zod = join(out, readdirSync(out).find((name) => name.startsWith("zod-"))!);
  files = (await ok(["tar", "-tzf", tarball], dir)).split("\n").filter((line) => line !== "").map((line) => line.replace(/^package\//, ""));

  project = join(dir, "project");
  mkdirSync(project);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module" }));
  await ok(npm("install", "--ignore-scripts", tarball, zod), project);
  copyFileSync(join(ROOT, "test/fixtures/client-node-consumer.mjs"), join(project, "consumer.mjs"));
  copyFileSync(join(ROOT, "test/fixtures/client-node-consumer.ts"), join(project, "consumer-types.ts"));
  writeFileSync(join(project, "consumer-using.ts"), USING_CONSUMER);

  const nodeBin = join(dir, "node-only");
  mkdirSync(nodeBin);
  symlinkSync(NODE, join(nodeBin, "node"));
  nodeOnlyPath = nodeBin;
}, 180_000);

/**
 * A TypeScript consumer that relies on `await using`: compiled for es2022
 * (tsc lowers the syntax Node.js 20 cannot parse) and run by plain node.
 */
const USING_CONSUMER = `import { LockClient, LockLostError, type Lock } from "lockd/client";
declare const process: { argv: string[]; stdout: { write(text: string): boolean } }; // no @types/node here
const client = new LockClient({ servers: "127.0.0.1:" + process.argv[2], owner: "ts-consumer" });
let kept: Lock | undefined;
const out: Record<string, unknown> = {};
{
  await using lock = await client.acquire("ts/await-using", { lease: 5000 });
  kept = lock;
  out.heldInScope = lock.held;
}
const reason: unknown = kept.signal.reason;
out.releasedWhy = reason instanceof LockLostError ? reason.why : String(reason);
out.again = await client.withLock("ts/await-using", () => "free", { try: true });
process.stdout.write(JSON.stringify(out) + "\\n");
`;

/** tsc in the consumer project, with no tsconfig and no skipLibCheck: what a user's build checks. */
function tsc(...args: string[]): string[] {
  return [TSC, "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", ...args];
}

afterAll(() => {
  if (dir !== "") rmSync(dir, { recursive: true, force: true });
});

test("the tarball holds the bin, the sources the bin runs, the built client and the docs; no tests, no benches", () => {
  expect(files).toContain("package.json");
  expect(files).toContain("README.md");
  for (const target of Object.values(pkg.bin)) expect(files).toContain(target);
  expect(files).toContain("src/cli/main.ts");
  // Every file the exports map names.
  for (const entry of Object.values(pkg.exports)) {
    for (const target of typeof entry === "string" ? [entry] : Object.values(entry)) expect(files).toContain(target.replace(/^\.\//, ""));
  }
  expect(files).toContain("docs/operations.md");
  expect(files.filter((file) => /^(test|bench|\.ci)\//.test(file))).toEqual([]);
  expect(files.filter((file) => file.startsWith("dist/") && !file.startsWith("dist/client/"))).toEqual([]);
});

test("plain node imports lockd/client from the installed tarball and holds a lock", async () => {
  await using server = startServer();
  const result = await run([NODE!, "consumer.mjs", String(server.port)], project, { ...process.env, PATH: nodeOnlyPath });
  expect(result.err).toBe("");
  expect(result.code).toBe(0);
  expect(JSON.parse(result.out)).toMatchObject({ bun: "undefined", token: expect.stringMatching(/^[1-9]\d*$/), releasedWhy: "released" });
}, 30_000);

test("without Bun, the lockd bin says in one line what it needs", async () => {
  const result = await run([join(project, "node_modules/.bin/lockd"), "--help"], project, { ...process.env, PATH: nodeOnlyPath });
  expect(result.code).toBe(69);
  expect(result.out).toBe("");
  expect(result.err).toMatch(/^lockd: needs Bun to run: `npm install bun`[^\n]*\n$/);
});

test("with the bun npm package installed, the lockd bin runs from a Node project without bun on PATH", async () => {
  symlinkSync(join(ROOT, "node_modules/bun"), join(project, "node_modules/bun"));
  try {
    const help = await run([join(project, "node_modules/.bin/lockd"), "--help"], project, { ...process.env, PATH: nodeOnlyPath });
    expect(help.err).toBe("");
    expect(help.code).toBe(0);
    expect(help.out).toStartWith("Usage: lockd <command>");
    // SIGTERM to the bin (a Node process) reaches the server it started.
    const outcome = await sigtermOutcome([join(project, "node_modules/.bin/lockd"), "serve"], project, { ...process.env, PATH: nodeOnlyPath });
    expect({ serverAlive: outcome.serverAlive, portsFree: outcome.portsFree, stoppedCleanly: outcome.stoppedCleanly, exitCode: outcome.exitCode }).toEqual({
      serverAlive: false,
      portsFree: true,
      stoppedCleanly: true,
      exitCode: 0,
    });
  } finally {
    rmSync(join(project, "node_modules/bun"));
  }
}, 30_000);

for (const target of ["es2022", "esnext"]) {
  test(`the packaged declarations compile under tsc --target ${target} (default libs, no @types/node, no skipLibCheck)`, async () => {
    expect(existsSync(join(project, "node_modules/@types"))).toBe(false);
    const result = await run(tsc("--target", target, "--noEmit", "consumer-types.ts"), project);
    expect(result.out + result.err).toBe("");
    expect(result.code).toBe(0);
  }, 60_000);
}

test("the packaged declarations compile in a Node.js project with @types/node and lib es2022 (no DOM)", async () => {
  mkdirSync(join(project, "node_modules/@types"));
  symlinkSync(join(ROOT, "node_modules/@types/node"), join(project, "node_modules/@types/node"));
  try {
    const result = await run(tsc("--target", "es2022", "--lib", "es2022", "--types", "node", "--noEmit", "consumer-types.ts"), project);
    expect(result.out + result.err).toBe("");
    expect(result.code).toBe(0);
  } finally {
    rmSync(join(project, "node_modules/@types"), { recursive: true });
  }
}, 60_000);

test("`await using` compiled for es2022 type-checks against the package and releases at the end of the scope under plain node", async () => {
  const built = await run(tsc("--target", "es2022", "--outDir", "built", "consumer-using.ts"), project);
  expect(built.out + built.err).toBe("");
  expect(built.code).toBe(0);
  await using server = startServer();
  const result = await run([NODE!, "built/consumer-using.js", String(server.port)], project, { ...process.env, PATH: nodeOnlyPath });
  expect(result.err).toBe("");
  expect(result.code).toBe(0);
  expect(JSON.parse(result.out)).toEqual({ heldInScope: true, releasedWhy: "released", again: "free" });
}, 60_000);

test("package-lock.json matches package.json: an install in a fresh clone rewrites nothing", async () => {
  const clone = join(dir, "lock");
  mkdirSync(clone);
  copyFileSync(join(ROOT, "package.json"), join(clone, "package.json"));
  copyFileSync(join(ROOT, "package-lock.json"), join(clone, "package-lock.json"));
  const before = await Bun.file(join(clone, "package-lock.json")).text();
  await ok(npm("install", "--package-lock-only", "--ignore-scripts"), clone);
  expect(await Bun.file(join(clone, "package-lock.json")).text()).toBe(before);
});
