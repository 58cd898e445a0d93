// One server per data directory: a second `lockd serve` on it exits 75 with
// one line naming the directory and the holder's pid; `lockd floor N`
// refuses while a server holds it; a SIGKILLed server's hold is gone at once
// (the kernel drops the flock); a file in the way is said in one sentence.
import { afterEach, expect, test } from "bun:test";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readFloor } from "../../src/tokens/file.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";

const MAIN = join(import.meta.dir, "../../src/cli/main.ts");
const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lockd-datadir-"));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function serve(dataDir: string): ChildServer {
  return ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--token-block", "100"], {
    LOCKD_DATA_DIR: dataDir,
  });
}

test("a second server on the same data directory exits 75 with one line naming it and the holder; the first is unharmed", async () => {
  const dataDir = tempDir();
  await using first = serve(dataDir);
  await first.addresses();
  await using second = serve(dataDir);
  expect(await second.exit()).toBe(75);
  expect(second.raw).toEqual([
    `lockd serve: the data directory ${dataDir} is in use by another process (pid ${first.proc.pid}): one data directory serves one lockd server at a time`,
  ]);
  expect(second.lines).toEqual([]); // it never started
  expect(readFloor(dataDir)).toBe(100); // only the first server's block
  first.proc.kill("SIGTERM");
  expect(await first.exit()).toBe(0);
  expect(readFloor(dataDir)).toBe(0); // its clean stop: no token was issued
});

test("lockd floor N refuses (75) while a server holds the directory, and the floor it reads is unchanged; after the stop it works", async () => {
  const dataDir = tempDir();
  await using server = serve(dataDir);
  await server.addresses();
  const refused = await runCli(["floor", "--data-dir", dataDir, "999999"]);
  expect(refused.code).toBe(75);
  expect(refused.err).toContain(`the data directory ${dataDir} is in use by another process (pid ${server.proc.pid})`);
  expect(refused.err).toContain("stop that server first");
  const read = await runCli(["floor", "--data-dir", dataDir]);
  expect(read.code).toBe(0);
  expect(read.out).toBe("100\n");
  expect(read.err).toContain(`a server (pid ${server.proc.pid}) holds ${dataDir}`);
  server.proc.kill("SIGTERM");
  expect(await server.exit()).toBe(0);
  expect(readFloor(dataDir)).toBe(0);
  const raised = await runCli(["floor", "--data-dir", dataDir, "999999"]);
  expect(raised).toEqual({ code: 0, out: "floor 0 -> 999999\n", err: "" });
});

test("a SIGKILLed server's hold is gone at once: the next server starts on the directory, above the reserved floor", async () => {
  const dataDir = tempDir();
  {
    await using killed = serve(dataDir);
    await killed.addresses();
    killed.proc.kill("SIGKILL");
    await killed.exited;
  }
  await using next = serve(dataDir);
  const start = await next.event("server.listening");
  expect(start.tokensFrom).toBe(101);
});

test("a file where the data directory should be: exit 73 and one sentence, not EEXIST", async () => {
  const base = tempDir();
  const file = join(base, "data");
  writeFileSync(file, "not a directory");
  await using server = serve(file);
  expect(await server.exit()).toBe(73);
  expect(server.raw).toEqual([`lockd serve: --data-dir ${file} is a file, not a directory`]);
  const floor = await runCli(["floor", "--data-dir", file, "10"]);
  expect(floor.code).toBe(73);
  expect(floor.err).toBe(`lockd floor: --data-dir ${file} is a file, not a directory\n`);
});

test("a floor that cannot be written once the listeners are up: exit 73, the listeners closed, nothing reserved", async () => {
  const dataDir = tempDir();
  mkdirSync(join(dataDir, "tokens.tmp")); // the floor is written through tokens.tmp: now it cannot be
  await using server = serve(dataDir);
  expect(await server.exit()).toBe(73);
  expect(server.raw).toEqual([expect.stringContaining(`lockd serve: cannot write the token floor ${join(dataDir, "tokens")}`)]);
  expect(readFloor(dataDir)).toBe(0);
  // and the directory is free again
  rmSync(join(dataDir, "tokens.tmp"), { recursive: true });
  await using next = serve(dataDir);
  expect((await next.event("server.listening")).tokensFrom).toBe(1);
});

test("a data directory the server's user cannot write: exit 73 and 'permission denied' in one line, for serve and floor", async () => {
  const base = tempDir();
  const root = process.getuid?.() === 0;
  // Root writes anywhere: run the commands as nobody instead, in a directory only root may write.
  chmodSync(base, root ? 0o755 : 0o555);
  const as = root ? { uid: 65534, gid: 65534 } : {};
  const lockd = async (args: string[]) => {
    const proc = Bun.spawn([process.execPath, MAIN, ...args], { ...as, stdin: "ignore", stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } });
    const timer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
    try {
      const [err, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
      return { code, err };
    } finally {
      clearTimeout(timer);
    }
  };
  try {
    const advice = "permission denied: the server's user cannot write there (choose another --data-dir, or fix the directory)\n";
    expect(await lockd(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--data-dir", base])).toEqual({
      code: 73,
      err: `lockd serve: cannot use the data directory ${base}: ${advice}`,
    });
    expect(await lockd(["floor", "--data-dir", join(base, "data"), "5"])).toEqual({
      code: 73,
      err: `lockd floor: cannot create the data directory ${join(base, "data")}: ${advice}`,
    });
  } finally {
    chmodSync(base, 0o700);
  }
});
