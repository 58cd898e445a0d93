/**
 * The Go and Python clients against real shard servers: alpha and beta of
 * the map alpha,beta,gamma at generation 1 (gamma not started). Each holds
 * locks on both running shards with the servers' map, and gets its
 * WRONG_SHARD error, naming both maps, with an older map (alpha,beta at
 * generation 0) for a name that moved to gamma. The tests themselves are
 * clients/go/shard_e2e_test.go and clients/python/tests/test_shard_e2e.py;
 * a missing toolchain is a skip that says so.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { ChildServer } from "../fixtures/ops-child.ts";

const ROOT = join(import.meta.dir, "../..");
const goBin = Bun.which("go");
const python = Bun.which("python3");
const servers: ChildServer[] = [];
let env: Record<string, string> = {};

beforeAll(async () => {
  const ports: number[] = [];
  for (const shard of ["alpha", "beta"]) {
    const child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--shard", shard, "--shards", "alpha,beta,gamma", "--shards-generation", "1"]);
    servers.push(child);
    ports.push((await child.addresses()).listenPort);
  }
  env = {
    // gamma's address is never dialled: no test name is on gamma with this map.
    LOCKD_TEST_SHARD_MAP: `gen=1;alpha=127.0.0.1:${ports[0]};beta=127.0.0.1:${ports[1]};gamma=127.0.0.1:9`,
    LOCKD_TEST_STALE_MAP: `alpha=127.0.0.1:${ports[0]};beta=127.0.0.1:${ports[1]}`,
  };
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s[Symbol.asyncDispose]()));
});

async function run(cmd: string[], cwd: string): Promise<{ code: number; output: string }> {
  const proc = Bun.spawn(cmd, { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, ...env, GOPROXY: "off", GOFLAGS: "-mod=mod", PYTHONDONTWRITEBYTECODE: "1" } });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 120_000);
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  return { code, output: out + err };
}

if (!goBin) console.warn("shards: SKIPPING the Go client against real shards: `go` is not on PATH");
test.skipIf(!goBin)("Go: locks on both shards with the servers' map; WRONG_SHARD naming both maps with a stale one", async () => {
  const { code, output } = await run([goBin!, "test", "-count=1", "-v", "-run", "TestShardsAgainstRealServers", "."], join(ROOT, "clients/go"));
  expect(output).toContain("--- PASS: TestShardsAgainstRealServers");
  expect(code, output).toBe(0);
}, 130_000);

if (!python) console.warn("shards: SKIPPING the Python client against real shards: `python3` is not on PATH");
test.skipIf(!python)("Python: locks on both shards with the servers' map; WRONG_SHARD naming both maps with a stale one", async () => {
  const { code, output } = await run([python!, "-m", "unittest", "-v", "tests.test_shard_e2e"], join(ROOT, "clients/python"));
  expect(output).toContain("test_locks_on_both_shards_and_wrong_shard_for_a_stale_map");
  expect(output).toContain("... ok");
  expect(code, output).toBe(0);
}, 130_000);
