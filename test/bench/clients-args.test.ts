/** bench/clients.ts's argument parsing (the bench itself is a measurement, never run as a test). */
import { expect, test } from "bun:test";
import { parseArgs } from "../../bench/clients.ts";

test("bench:clients takes --rounds and --warmup, with defaults", () => {
  expect(parseArgs([])).toEqual({ rounds: 200, warmup: 20 });
  expect(parseArgs(["--rounds", "5", "--warmup", "0"])).toEqual({ rounds: 5, warmup: 0 });
});

test("bench:clients names the flag it cannot use", () => {
  expect(() => parseArgs(["--rounds", "0"])).toThrow(/--rounds needs a whole number >= 1/);
  expect(() => parseArgs(["--warmup", "x"])).toThrow(/--warmup needs a whole number/);
  expect(() => parseArgs(["--samples", "3"])).toThrow(/unknown option --samples/);
});
