// A bad value of force-release's --token or --session is named in the
// refusal, so the user sees what was read (a shell variable expanded to
// something else, a pasted label).
import { expect, test } from "bun:test";
import { COMMAND_OPTIONS } from "../../src/cli/config.ts";
import { ConfigError, parseOptions, type OptionTable } from "../../src/cli/options/argv.ts";

function problems(argv: readonly string[]): readonly string[] {
  try {
    parseOptions(COMMAND_OPTIONS["force-release"] as OptionTable, argv, {});
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return error.problems;
  }
  return [];
}

test("--token abc: the refusal quotes the value and says what a fencing token is", () => {
  expect(problems(["--token", "abc"])).toEqual([
    '--token: "abc" is not a fencing token (a whole number 1..2^64-1, as lockd status shows the holder\'s); the admin token is --admin-token-file or --admin-token',
  ]);
  expect(problems(["--token", "0"])).toEqual([expect.stringContaining('--token: "0" is not a fencing token')]);
  expect(problems(["--token", "42"])).toEqual([]);
});

test("--session x: the refusal quotes the value", () => {
  expect(problems(["--session", "x"])).toEqual(['--session: "x" is not a session id (a positive whole number)']);
});
