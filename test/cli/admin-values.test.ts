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

test("--token with a long non-numeric value (the admin token given by mistake): its length only, never the value", () => {
  const said = problems(["--token", "verb-token"]);
  expect(said).toEqual([expect.stringContaining("--token: a 10-character value (not repeated: it may be a secret, such as the admin token) is not a fencing token")]);
  expect(said.join("\n")).not.toContain("verb-token");
  expect(problems(["--token", "99999999999999999999999"])).toEqual([expect.stringContaining('--token: "99999999999999999999999" is not a fencing token')]);
});
