import { expect, test } from "bun:test";
import { RESERVED_FDS, openFileLimit, parseLimits } from "../../src/server/limits.ts";

test("parses the open-file line of /proc/self/limits", () => {
  const text = [
    "Limit                     Soft Limit           Hard Limit           Units",
    "Max cpu time              unlimited            unlimited            seconds",
    "Max open files            20000                40000                files",
  ].join("\n");
  expect(parseLimits(text)).toEqual({ soft: 20000, hard: 40000, sessionCapacity: 20000 - RESERVED_FDS });
  expect(parseLimits("nothing here").soft).toBeNull();
});

test("reads this process's limit on Linux", () => {
  const limit = openFileLimit();
  if (process.platform === "linux") expect(limit.soft).toBeGreaterThan(0);
});
