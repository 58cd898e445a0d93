/**
 * docs/protocol.md section 8.5 names, in brackets, the conformance scenario
 * that holds every client to each decision: each name must be a scenario of
 * scenarios.json, so the page cannot point at a check that does not exist.
 */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "../..");

test("every scenario named in docs/protocol.md section 8.5 exists in scenarios.json", () => {
  const page = readFileSync(join(ROOT, "docs/protocol.md"), "utf8");
  const start = page.indexOf("### 8.5 ");
  expect(start).toBeGreaterThan(0);
  const section = page.slice(start, page.indexOf("\n## ", start)).replace(/\s+/g, " ");
  const names = [...section.matchAll(/\[([^\]]+)\]/g)].flatMap((m) => m[1]!.split("; "));
  const scenarios = new Set<string>(JSON.parse(readFileSync(join(import.meta.dir, "scenarios.json"), "utf8")).scenarios.map((s: { name: string }) => s.name));
  expect(names.length).toBeGreaterThanOrEqual(10);
  expect(names.filter((n) => !scenarios.has(n))).toEqual([]);
});
