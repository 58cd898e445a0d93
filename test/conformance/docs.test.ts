/**
 * The Go and Python examples of docs/clients.md, run as written against a
 * real `lockd serve` (LOCKD_SERVER points at it): each must exit 0 and
 * print the fencing token it was granted.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ChildServer } from "../fixtures/ops-child.ts";

const ROOT = join(import.meta.dir, "../..");
const text = await Bun.file(join(ROOT, "docs/clients.md")).text();
const blocks = (lang: string) => [...text.matchAll(new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```", "gm"))].map((m) => m[1]!);
const goBin = Bun.which("go");
const python = Bun.which("python3");

if (!goBin) console.warn("docs/clients.md: SKIPPING the Go example: `go` is not on PATH");
if (!python) console.warn("docs/clients.md: SKIPPING the Python examples: `python3` is not on PATH");

let server: ChildServer;
let address = "";
beforeAll(async () => {
  server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"]);
  address = `127.0.0.1:${(await server.addresses()).listenPort}`;
});
afterAll(async () => {
  await server?.[Symbol.asyncDispose]();
});

async function run(cmd: string[], cwd: string): Promise<{ code: number; out: string }> {
  const proc = Bun.spawn(cmd, { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, LOCKD_SERVER: address, PYTHONDONTWRITEBYTECODE: "1", GOPROXY: "off" } });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 120_000);
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  return { code, out: out + err };
}

test("docs/clients.md has one Go and three Python examples", () => {
  expect(blocks("go").length).toBe(1);
  expect(blocks("python").length).toBe(3);
});

test.skipIf(!goBin)("docs/clients.md: the Go example runs and holds the lock", async () => {
  const dir = mkdtempSync(join(ROOT, "clients/go/_docexample-"));
  try {
    writeFileSync(join(dir, "main.go"), blocks("go")[0]!);
    const { code, out } = await run([goBin!, "run", `./${dir.split("/").pop()}`], join(ROOT, "clients/go"));
    expect(out).toMatch(/^holding jobs\/nightly with fencing token [1-9]\d*\n$/);
    expect(code).toBe(0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 150_000);

test.skipIf(!python)("docs/clients.md: the Python examples run and hold the lock", async () => {
  const [blocking, asyncio] = blocks("python");
  const one = await run([python!, "-c", blocking!], join(ROOT, "clients/python"));
  expect(one.out).toMatch(/^holding jobs\/nightly with fencing token [1-9]\d*\n$/);
  expect(one.code).toBe(0);
  const two = await run([python!, "-c", asyncio!], join(ROOT, "clients/python"));
  expect(two.out).toMatch(/^holding with fencing token [1-9]\d*\n$/);
  expect(two.code).toBe(0);
}, 60_000);

test.skipIf(!python)("docs/clients.md: the Python semaphore and shared example runs and holds both", async () => {
  const { code, out } = await run([python!, "-c", blocks("python")[2]!], join(ROOT, "clients/python"));
  expect(out).toMatch(/^holding jobs\/render slots 0 1 with fencing tokens [1-9]\d* [1-9]\d*\nreading config with fencing tokens [1-9]\d* [1-9]\d*\n$/);
  expect(code).toBe(0);
}, 60_000);
