/**
 * README.md's first screen: the command that starts the server on a fresh
 * machine must stop on SIGTERM sent to the process it starts, leaving no
 * server behind (npm relays signals to its child only: a script that runs
 * bun under a shell without exec orphaned the server).
 */
import { expect, test } from "bun:test";
import { join, resolve } from "node:path";
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

test("the README's test command is the one CI runs", async () => {
  expect(freshMachineCommand(/test suite/)).toBe("npm test");
  const ci = await Bun.file(join(ROOT, ".ci/run")).text();
  expect(ci).toMatch(/^npm test\b/m);
});
