// Durable token floor: reserve before issue, continue after restart, refuse
// a corrupt or unwritable store instead of starting again from 1.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileTokens, TokenStoreError, readFloor, writeFloor } from "../../src/server/tokens-file.ts";

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lockd-tokens-"));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("FileTokens", () => {
  test("a new directory starts at 1 and reserves the first block before issuing", () => {
    const dir = join(tempDir(), "data");
    const tokens = FileTokens.open(dir, 10);
    expect(readFloor(dir)).toBe(10);
    expect(tokens.next()).toBe(1);
  });

  test("crossing a block boundary reserves the next block first", () => {
    const dir = tempDir();
    const tokens = FileTokens.open(dir, 5);
    const issued = Array.from({ length: 12 }, () => tokens.next());
    expect(issued).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    expect(readFloor(dir)).toBe(15); // blocks ending 5, 10, 15
  });

  test("after a crash (no close) tokens continue above the reserved floor: skipped, never repeated", () => {
    const dir = tempDir();
    const first = FileTokens.open(dir, 100);
    for (let i = 0; i < 42; i++) first.next();
    const second = FileTokens.open(dir, 100); // the first process is gone without close()
    expect(second.next()).toBe(101);
  });

  test("after a clean close tokens continue from the last one issued", () => {
    const dir = tempDir();
    const first = FileTokens.open(dir, 100);
    for (let i = 0; i < 42; i++) first.next();
    first.close();
    expect(readFloor(dir)).toBe(42);
    expect(FileTokens.open(dir, 100).next()).toBe(43);
  });

  test("a corrupt file refuses to open, with a message naming it", () => {
    const dir = tempDir();
    writeFloor(dir, 500);
    const path = join(dir, "tokens");
    const good = readFileSync(path, "utf8");
    for (const bad of ["", "garbage\n", good.replace("floor=500", "floor=600"), good.replace(/crc=\w+/, "crc=00000000"), "lockd-tokens v1 floor=1"]) {
      writeFileSync(path, bad);
      expect(() => FileTokens.open(dir, 10)).toThrow(TokenStoreError);
      expect(() => FileTokens.open(dir, 10)).toThrow(/corrupt/);
    }
  });

  test("an unwritable data directory refuses to open (the path is under a regular file)", () => {
    const base = tempDir();
    writeFileSync(join(base, "file"), "x");
    expect(() => FileTokens.open(join(base, "file", "data"), 10)).toThrow(/cannot create the data directory/);
    expect(() => FileTokens.open(join(base, "file"), 10)).toThrow(TokenStoreError);
  });

  test("a block that cannot be reserved later is fatal, before any token past the floor is issued", () => {
    const dir = tempDir();
    const fatal: TokenStoreError[] = [];
    const tokens = FileTokens.open(dir, 2, (error) => {
      fatal.push(error);
      throw error;
    });
    expect([tokens.next(), tokens.next()]).toEqual([1, 2]);
    rmSync(dir, { recursive: true, force: true });
    writeFileSync(dir, "now a file"); // the directory is gone
    expect(() => tokens.next()).toThrow(TokenStoreError);
    expect(fatal.length).toBe(1);
    expect(tokens.last).toBe(2);
  });
});
