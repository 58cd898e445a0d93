// Command-line flags are the CLI's: no file outside src/cli names one in
// its code (messages that must point at a setting get the words from the
// CLI, which knows how the user spelt it). Comments may explain.
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const SRC = join(import.meta.dir, "../../src");

/** The string and template literals of a TypeScript file (comments skipped), one per entry. */
function strings(text: string): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    const next = text[i + 1];
    if (c === "/" && next === "/") {
      while (i < text.length && text[i] !== "\n") i++;
    } else if (c === "/" && next === "*") {
      const end = text.indexOf("*/", i + 2);
      i = end < 0 ? text.length : end + 2;
    } else if (c === '"' || c === "'" || c === "`") {
      let j = i + 1;
      while (j < text.length && text[j] !== c) j += text[j] === "\\" ? 2 : 1;
      out.push(text.slice(i, j + 1));
      i = j + 1;
    } else {
      i++;
    }
  }
  return out;
}

test("no file outside src/cli names a command-line flag", () => {
  const found: string[] = [];
  for (const file of new Bun.Glob("**/*.ts").scanSync(SRC)) {
    if (file.startsWith("cli/") || file.endsWith(".d.ts")) continue;
    for (const literal of strings(readFileSync(join(SRC, file), "utf8"))) {
      for (const m of literal.matchAll(/(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*/g)) found.push(`${file}: ${m[0]} in ${literal.slice(0, 80)}`);
    }
  }
  expect(found).toEqual([]);
});
