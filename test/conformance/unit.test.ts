/**
 * The Go and Python clients' own unit tests (the protocol.md test vectors
 * through each codec, the schedule's numbers, the asyncio loss test), run
 * from `npm test`. A missing toolchain is a skip that says so, never a pass.
 */
import { expect, test } from "bun:test";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "../..");
const goBin = Bun.which("go");
const python = Bun.which("python3");

async function run(cmd: string[], cwd: string, env: Record<string, string> = {}): Promise<{ code: number; output: string }> {
  const proc = Bun.spawn(cmd, { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, ...env } });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 170_000);
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  return { code, output: out + err };
}

if (!goBin) console.warn("clients: SKIPPING `go test ./...` in clients/go: `go` is not on PATH (install Debian's golang-go; .ci/run does)");
test.skipIf(!goBin)("clients/go: go test ./... (codec on the protocol.md vectors, schedule)", async () => {
  const { code, output } = await run([goBin!, "test", "-count=1", "./..."], join(ROOT, "clients/go"), { GOPROXY: "off", GOFLAGS: "-mod=mod" });
  expect(output).toContain("ok  \tlockd");
  expect(code, output).toBe(0);
}, 180_000);

if (!python) console.warn("clients: SKIPPING `python3 -m unittest` in clients/python: `python3` is not on PATH");
test.skipIf(!python)("clients/python: python3 -m unittest (codec on the protocol.md vectors, schedule, asyncio loss)", async () => {
  const { code, output } = await run([python!, "-m", "unittest", "discover", "-s", "tests", "-t", "."], join(ROOT, "clients/python"), { PYTHONDONTWRITEBYTECODE: "1" });
  expect(output).toMatch(/Ran [1-9]\d* tests/);
  expect(output).toContain("\nOK");
  expect(code, output).toBe(0);
}, 180_000);
