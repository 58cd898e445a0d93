// The source tree as a map: each folder of src/ is one room with the rooms
// it may import listed below (README.md's layout table says what each is
// for), and no import circle anywhere.
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";

const SRC = join(import.meta.dir, "../../src");

/** Room -> the rooms it may import. A file directly in src/ is its own room. */
const MAY_IMPORT: Record<string, readonly string[]> = {
  protocol: [],
  core: ["protocol"],
  net: [],
  shard: ["net", "protocol", "core"],
  tokens: ["core"],
  process: [],
  log: [],
  "version.ts": [],
  failover: ["core", "net", "shard", "log"],
  ops: ["core", "protocol", "net", "shard", "process", "log"],
  server: ["core", "protocol", "net", "shard", "tokens", "failover", "ops", "process", "log"],
  client: ["protocol", "net", "shard"],
  cli: ["protocol", "core", "net", "shard", "tokens", "failover", "ops", "server", "process", "client", "log", "version.ts"],
};

function sources(): string[] {
  return [...new Bun.Glob("**/*.ts").scanSync(SRC)].filter((f) => !f.endsWith(".d.ts")).sort();
}

function roomOf(file: string): string {
  const first = file.split("/")[0]!;
  return file.includes("/") ? first : first;
}

/** The src/ files `file` imports (relative imports of .ts files only). */
function importsOf(file: string): string[] {
  const text = readFileSync(join(SRC, file), "utf8");
  const out: string[] = [];
  // `import type` is erased at build time: it makes no circle at run time, and a room may name another's types.
  for (const m of text.matchAll(/(?:import(?!\s+type\s)|export(?!\s+type\s))\s[^;]*?from\s+["'](\.{1,2}\/[^"']+\.ts)["']|import\(\s*["'](\.{1,2}\/[^"']+\.ts)["']\s*\)/g)) {
    const spec = m[1] ?? m[2]!;
    out.push(normalize(relative(SRC, join(SRC, dirname(file), spec))));
  }
  return out;
}

test("every room imports only the rooms it may", () => {
  const wrong: string[] = [];
  for (const file of sources()) {
    const room = roomOf(file);
    const allowed = MAY_IMPORT[room];
    expect({ file, known: allowed !== undefined }).toEqual({ file, known: true });
    for (const target of importsOf(file)) {
      const other = roomOf(target);
      if (other !== room && !allowed!.includes(other)) wrong.push(`${file} -> ${target}`);
    }
  }
  expect(wrong).toEqual([]);
});

test("no import circle in src/", () => {
  const graph = new Map(sources().map((f) => [f, importsOf(f)]));
  const state = new Map<string, "open" | "done">();
  const circles: string[] = [];
  const visit = (file: string, path: string[]): void => {
    const s = state.get(file);
    if (s === "done") return;
    if (s === "open") {
      circles.push([...path.slice(path.indexOf(file)), file].join(" -> "));
      return;
    }
    state.set(file, "open");
    for (const next of graph.get(file) ?? []) visit(next, [...path, file]);
    state.set(file, "done");
  };
  for (const file of graph.keys()) visit(file, []);
  expect(circles).toEqual([]);
});

test("the README's layout table names every room, and each room's folder opens with what it is", () => {
  const readme = readFileSync(join(import.meta.dir, "../../README.md"), "utf8");
  for (const room of Object.keys(MAY_IMPORT)) {
    const path = room.endsWith(".ts") ? `src/${room}` : `src/${room}/`;
    expect({ room, inReadme: readme.includes(`\`${path}\``) }).toEqual({ room, inReadme: true });
  }
});
