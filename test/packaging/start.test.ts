/**
 * README.md's first screen: the command that starts the server on a fresh
 * machine must stop on SIGTERM sent to the process it starts, leaving no
 * server behind (npm relays signals to its child only: a script that runs
 * bun under a shell without exec orphaned the server).
 */
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { forEachLine } from "../helpers/lines.ts";
import { sigtermOutcome } from "./sigterm.ts";

const ROOT = resolve(import.meta.dir, "../..");
const README = await Bun.file(join(ROOT, "README.md")).text();

/** The README's "fresh machine" lines: `npm install && COMMAND   # comment`. */
function freshMachineCommand(purpose: RegExp): string {
  for (const line of README.split("\n")) {
    const match = /^npm install && (.+?)\s+#\s*(.*)$/.exec(line);
    if (match !== null && purpose.test(match[2]!)) return match[1]!;
  }
  throw new Error(`README.md has no "npm install && COMMAND  # ${purpose.source}" line`);
}

test("the README's start command stops on SIGTERM and leaves no server running", async () => {
  const command = freshMachineCommand(/^the server/);
  // Spawned as the user's shell would: plain words, no shell syntax to interpret.
  expect(command).toMatch(/^[\w./:= -]+$/);
  const outcome = await sigtermOutcome(command.split(/\s+/), ROOT);
  expect({ serverAlive: outcome.serverAlive, portsFree: outcome.portsFree, stoppedCleanly: outcome.stoppedCleanly }).toEqual({
    serverAlive: false,
    portsFree: true,
    stoppedCleanly: true,
  });
  expect(outcome.exitCode).toBe(0);
}, 30_000);

const SCRIPT = Bun.which("script");
const noScript = SCRIPT === null ? " (skipped: util-linux script(1), which gives the command a terminal, is not installed)" : "";

test.skipIf(SCRIPT === null)(`Ctrl-C at a terminal stops the README's start command once: a clean stop, not the second-signal exit${noScript}`, async () => {
  // The terminal sends SIGINT to the whole foreground group (npm, the bin, bun);
  // npm also relays it. The server must see it once, or it exits 70 at once.
  //
  // The log (stderr) goes through a FIFO, not the terminal: script(1) stops
  // reading the terminal 10 ms after its child exits, and Linux hands what a
  // process wrote to its terminal over to script's side from a kernel worker,
  // which on a loaded machine can come later than that. The last lines
  // ("stopped") were lost once in CI. stdin and stdout stay the terminal, so
  // the processes are still its foreground group and Ctrl-C reaches them all.
  const command = freshMachineCommand(/^the server/);
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-ctrlc-"));
  const fifo = join(dataDir, "log.fifo");
  expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
  // cat opens the FIFO for reading first; it sees EOF once every writer (npm, the bin, bun) has exited.
  const log = Bun.spawn(["cat", fifo], { stdout: "pipe", stderr: "inherit" });
  //
  // script(1) runs the command with `$SHELL -c`. The shell execs npm, so the
  // terminal's foreground group is what a user's shell would make of
  // `npm start`: npm, the bin, bun, and no shell. Without exec, a shell that
  // waits for npm gets the SIGINT too: dash (/bin/sh, script's default where
  // SHELL is unset, as in CI) dies of it, and the run ended with exit 130
  // whatever the server did; bash waited and hid that. SHELL is set, so the
  // test is the same on every machine.
  const proc = Bun.spawn([SCRIPT!, "-qfec", `exec ${command} 2>${fifo}`, "/dev/null"], {
    cwd: ROOT,
    stdin: "pipe",
    stdout: "ignore",
    stderr: "ignore",
    env: { ...process.env, SHELL: "/bin/sh", LOCKD_LISTEN: "127.0.0.1:0", LOCKD_OPS: "127.0.0.1:0", LOCKD_DATA_DIR: dataDir, LOCKD_SHUTDOWN_GRACE: "0s" },
  });
  const guard = setTimeout(() => {
    proc.kill("SIGKILL");
    log.kill("SIGKILL");
  }, 20_000);
  const lines: string[] = [];
  const events: string[] = [];
  let serverPid = 0;
  let onListening: () => void = () => {};
  const listening = new Promise<void>((resolve) => (onListening = resolve));
  const reading = forEachLine(log.stdout, (line) => {
    lines.push(line);
    if (!line.startsWith("{")) return;
    const entry = JSON.parse(line) as { event: string; pid?: number };
    events.push(entry.event);
    if (entry.event === "server.listening") {
      serverPid = entry.pid!;
      onListening();
    }
  });
  try {
    await Promise.race([listening, proc.exited]);
    expect(serverPid).toBeGreaterThan(0);
    proc.stdin.write("\x03");
    await proc.stdin.flush();
    const code = await proc.exited;
    await reading;
    // One comparison, so a failure shows everything at once.
    expect({ stopped: events.includes("shutdown.stopped"), second: events.includes("shutdown.forced"), code, lines }).toEqual({
      stopped: true,
      second: false,
      code: 0,
      lines,
    });
  } finally {
    clearTimeout(guard);
    proc.kill("SIGKILL");
    log.kill("SIGKILL");
    try {
      if (serverPid !== 0) process.kill(serverPid, "SIGKILL");
    } catch {
      // already gone, as it should be
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 30_000);

test("the README's test command is the one CI runs", async () => {
  expect(freshMachineCommand(/test suite/)).toBe("npm test");
  const ci = await Bun.file(join(ROOT, ".ci/run")).text();
  expect(ci).toMatch(/^npm test\b/m);
});
