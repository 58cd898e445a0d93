/**
 * README.md's "Using it" commands, started as cron or a supervisor would
 * (no terminal), must stop on SIGTERM sent to the process they start,
 * leaving nothing behind: `lockd run` passes it on to COMMAND, exits, and
 * the lock is free again; `lockd serve` through the same command stops
 * cleanly. (`npx lockd ...` failed this: npm exec does not pass SIGTERM on,
 * so COMMAND kept running with the lock, and a server kept running.)
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { LockClient } from "../../src/client/index.ts";
import { forEachLine } from "../helpers/lines.ts";
import { startDaemon, type TestDaemon } from "../ops/harness.ts";
import { sigtermOutcome } from "./sigterm.ts";

const ROOT = resolve(import.meta.dir, "../..");
const README = await Bun.file(join(ROOT, "README.md")).text();

/** The words before `run` in the README's `... run nightly-report -- ./report.sh` line: how it says to start lockd. */
function documentedLockd(): string[] {
  const using = README.slice(README.indexOf("## Using it"));
  const block = /```sh\n([\s\S]*?)```/.exec(using)?.[1] ?? "";
  const line = block.split("\n").find((l) => / run \S+ -- /.test(l));
  if (line === undefined) throw new Error('README.md, "Using it": no "... run NAME -- COMMAND" line');
  const words = line.slice(0, line.indexOf(" run ")).trim().split(/\s+/);
  // Plain words, as a shell would run them; a path is relative to the repository (where the README is read).
  expect(words.join(" ")).toMatch(/^[\w./-]+( [\w./-]+)*$/);
  return words.map((w, i) => (i === 0 && w.includes("/") ? resolve(ROOT, w) : w));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The parent pid, from /proc/PID/stat. */
function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

let server: TestDaemon;
beforeAll(() => {
  server = startDaemon();
});
afterAll(async () => {
  await server?.[Symbol.asyncDispose]();
});

test("the README's lockd run stops on SIGTERM: COMMAND and lockd run are gone and the lock is free", async () => {
  const lockd = documentedLockd();
  const name = `signals-${process.pid}`;
  const proc = Bun.spawn([...lockd, "run", name, "--", "sh", "-c", "echo started $$; exec sleep 300"], {
    cwd: ROOT,
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, LOCKD_SERVER: `127.0.0.1:${server.port}` },
  });
  const guard = setTimeout(() => proc.kill("SIGKILL"), 20_000);
  let commandPid = 0;
  let runPid = 0;
  let onStarted: () => void = () => {};
  const started = new Promise<void>((resolve) => (onStarted = resolve));
  const reading = forEachLine(proc.stdout, (line) => {
    const m = /^started (\d+)$/.exec(line);
    if (m !== null) {
      commandPid = Number(m[1]);
      onStarted();
    }
  });
  const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
  try {
    await Promise.race([started, proc.exited]);
    if (commandPid === 0) throw new Error(`COMMAND did not start (exit ${proc.exitCode}): ${await new Response(proc.stderr).text()}`);
    // The process that started COMMAND: lockd run itself (under the shim, the bun child).
    runPid = parentOf(commandPid);
    expect(alive(runPid)).toBe(true);

    process.kill(proc.pid, "SIGTERM");
    const code = await proc.exited;
    // (stdout is not read to its end here: a COMMAND left running would hold it open.)
    // COMMAND died of the SIGTERM passed on to it; lockd run exits 128 + 15 as it did.
    expect({ code, commandAlive: alive(commandPid), runAlive: alive(runPid) }).toEqual({ code: 143, commandAlive: false, runAlive: false });
    // The lock is free: a claim is granted once the server has seen the connection close.
    const lock = await client.acquire(name, { lease: 5000, wait: 10_000 });
    await lock.release();
  } finally {
    clearTimeout(guard);
    proc.kill("SIGKILL");
    for (const pid of [commandPid, runPid]) if (pid !== 0 && alive(pid)) process.kill(pid, "SIGKILL");
    await reading;
  }
}, 30_000);

test("the README's lockd, as lockd serve, stops cleanly on SIGTERM and leaves no server", async () => {
  const outcome = await sigtermOutcome([...documentedLockd(), "serve"], ROOT);
  expect({ serverAlive: outcome.serverAlive, portsFree: outcome.portsFree, stoppedCleanly: outcome.stoppedCleanly, exitCode: outcome.exitCode }).toEqual({
    serverAlive: false,
    portsFree: true,
    stoppedCleanly: true,
    exitCode: 0,
  });
}, 30_000);
