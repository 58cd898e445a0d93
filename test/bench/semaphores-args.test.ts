/** bench/semaphores.ts's argument parsing (the bench itself is a measurement, never run as a test). */
import { expect, test } from "bun:test";
import { resolve } from "node:path";
import { parseArgs } from "../../bench/semaphores.ts";

test("bench:semaphores has defaults for every option", () => {
  const args = parseArgs([]);
  expect(args.baseline).toBeNull();
  expect(args.samples).toBe(300);
  expect(args.epoch).toBe(100);
  expect(args.batchSamples).toBe(100);
  expect(args.limit).toBe(4);
  expect(args.batches).toEqual([1, 10, 100]);
  expect(args.rounds).toBe(2);
  expect(args.coreSessions).toBe(1_000_000);
  expect([...args.only].sort()).toEqual(["engine", "exclusive", "memory", "semaphore", "shared"]);
});

test("bench:semaphores takes each option, the baseline as an absolute path", () => {
  const args = parseArgs(["--baseline", "../base", "--samples", "20", "--epoch", "50", "--limit", "3", "--batches", "1,5", "--only", "shared,memory", "--core-sessions", "5000"]);
  expect(args.baseline).toBe(resolve("../base"));
  expect(args.samples).toBe(20);
  expect(args.epoch).toBe(50);
  expect(args.limit).toBe(3);
  expect(args.batches).toEqual([1, 5]);
  expect([...args.only].sort()).toEqual(["memory", "shared"]);
  expect(args.coreSessions).toBe(5000);
});

test("bench:semaphores names the flag it cannot use", () => {
  expect(() => parseArgs(["--limit", "1"])).toThrow(/--limit needs a whole number 2..65535, got 1/);
  expect(() => parseArgs(["--limit", "65536"])).toThrow(/--limit needs a whole number 2..65535/);
  expect(() => parseArgs(["--samples", "5"])).toThrow(/--samples needs a whole number 10\.\./);
  expect(() => parseArgs(["--batches", "1,,3"])).toThrow(/--batches needs a whole number 1..1000, got nothing/);
  expect(() => parseArgs(["--only", "exclusive,fast"])).toThrow(/--only: unknown section "fast"/);
  expect(() => parseArgs(["--baseline"])).toThrow(/--baseline needs a directory/);
  expect(() => parseArgs(["--seconds", "3"])).toThrow(/unknown option --seconds/);
});
