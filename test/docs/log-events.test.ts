/**
 * Log event codes are API: the table in docs/operations.md ("Logs"), the
 * table of codes in src/log/events.ts and the codes the Logger's call sites
 * in src pass are one and the same set, with the same levels.
 */
import { expect, test } from "bun:test";
import { join, resolve } from "node:path";
import { LOG_EVENTS } from "../../src/log/events.ts";

const ROOT = resolve(import.meta.dir, "../..");

/** The Logs section's table: code -> level, in order. */
async function documented(): Promise<[string, string][]> {
  const text = await Bun.file(join(ROOT, "docs/operations.md")).text();
  const from = text.indexOf("\n## Logs\n");
  const to = text.indexOf("\n## ", from + 1);
  expect(from).toBeGreaterThan(0);
  return [...text.slice(from, to).matchAll(/^\| `([^`]+)` \| (\w+) \|/gm)].map((m) => [m[1]!, m[2]!]);
}

/** Every Logger call in src: [level, code, where]. A call whose code is not a string literal is reported as code "?". */
async function used(): Promise<[string, string, string][]> {
  const calls: [string, string, string][] = [];
  for (const file of new Bun.Glob("src/**/*.ts").scanSync(ROOT)) {
    const text = await Bun.file(join(ROOT, file)).text();
    // log.info(…), this.options.log.warn(…), options.log.limited(limit, "warn", …)
    for (const m of text.matchAll(/\blog\.(debug|info|warn|error)\(\s*(?:"([^"]*)")?/g)) calls.push([m[1]!, m[2] ?? "?", file]);
    for (const m of text.matchAll(/\blog\.limited\(\s*[\w.]+,\s*"(\w+)",\s*(?:"([^"]*)")?/g)) calls.push([m[1]!, m[2] ?? "?", file]);
  }
  return calls;
}

test("every code in the docs' table is in src/log/events.ts at the same level, once, and the other way round", async () => {
  const docs = await documented();
  expect(docs.length).toBeGreaterThan(0);
  const codes = docs.map(([code]) => code);
  expect(codes.filter((code, i) => codes.indexOf(code) !== i)).toEqual([]); // each once
  expect(Object.fromEntries(docs)).toEqual({ ...LOG_EVENTS });
});

test("every code is room.what in lower snake case", () => {
  for (const code of Object.keys(LOG_EVENTS)) expect(code).toMatch(/^[a-z]+(_[a-z]+)*\.[a-z]+(_[a-z]+)*$/);
});

test("every Logger call in src passes a code of the table, at its level; and every code of the table is logged somewhere", async () => {
  const calls = await used();
  expect(calls.length).toBeGreaterThanOrEqual(Object.keys(LOG_EVENTS).length);
  const table = LOG_EVENTS as Record<string, string>;
  expect(calls.filter(([level, code]) => table[code] !== level).map(([level, code, file]) => `${file}: ${level} ${code}`)).toEqual([]);
  const logged = new Set(calls.map(([, code]) => code));
  expect(Object.keys(LOG_EVENTS).filter((code) => !logged.has(code))).toEqual([]);
});
