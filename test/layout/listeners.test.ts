// Which room listens: Bun.listen is the lock listener's alone, and the ops
// server is a Bun.serve (the design's; no HTTP parser of our own).
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const SRC = join(import.meta.dir, "../../src");

test("Bun.listen is the lock listener's alone, and the ops server is a Bun.serve", () => {
  const files = [...new Bun.Glob("**/*.ts").scanSync(SRC)].sort();
  const uses = (pattern: RegExp) => files.filter((file) => pattern.test(readFileSync(join(SRC, file), "utf8").replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "")));
  expect(uses(/\bBun\.listen\s*[(<]/)).toEqual(["server/server.ts"]);
  expect(uses(/\bBun\.serve\s*[(<]/).length).toBe(1);
  expect(uses(/\bBun\.serve\s*[(<]/)[0]).toStartWith("ops/");
});
