// Durable token floor: reserve before issue, continue after restart, refuse
// a corrupt or unwritable store instead of starting again from 1.
import { afterEach, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DirLock } from "../../src/tokens/dir-lock.ts";
import { FileTokens, TokenStoreError, readFloor, writeFloor } from "../../src/tokens/file.ts";

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
  test("a new directory starts at 1; start() reserves the first block before issuing, open() reserves nothing", () => {
    const dir = join(tempDir(), "data");
    const tokens = FileTokens.open(dir, 10);
    expect(readFloor(dir)).toBe(0);
    tokens.start();
    expect(readFloor(dir)).toBe(10);
    expect(tokens.next()).toBe(1);
    tokens.close();
  });

  test("without start() the first next() reserves the block", () => {
    const dir = tempDir();
    const tokens = FileTokens.open(dir, 10);
    expect(tokens.next()).toBe(1);
    expect(readFloor(dir)).toBe(10);
    tokens.close();
  });

  test("the directory is held while open: a second open fails (busy, naming our pid) until the first lets go", () => {
    const dir = tempDir();
    const first = FileTokens.open(dir, 10);
    let error: unknown;
    try {
      FileTokens.open(dir, 10);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(TokenStoreError);
    expect((error as TokenStoreError).kind).toBe("busy");
    expect((error as TokenStoreError).message).toBe(
      `the data directory ${dir} is in use by another process (pid ${process.pid}): one data directory serves one lockd server at a time`,
    );
    expect(DirLock.holder(dir)).toBe(process.pid);
    first.close();
    expect(DirLock.holder(dir)).toBeNull();
    FileTokens.open(dir, 10).close();
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
    first.abandon(); // the first process is gone without close(): the kernel drops its lock
    const second = FileTokens.open(dir, 100);
    expect(second.next()).toBe(101);
    second.close();
  });

  test("after a clean close tokens continue from the last one issued", () => {
    const dir = tempDir();
    const first = FileTokens.open(dir, 100);
    for (let i = 0; i < 42; i++) first.next();
    first.close();
    expect(readFloor(dir)).toBe(42);
    const second = FileTokens.open(dir, 100);
    expect(second.next()).toBe(43);
    second.close();
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

  test("a file where the data directory (or a parent of it) should be: one sentence naming the file", () => {
    const base = tempDir();
    const file = join(base, "file");
    writeFileSync(file, "x");
    // The store says what is wrong; the CLI words the advice with its flag (test/cli/data-dir.test.ts).
    expect(() => FileTokens.open(join(file, "data"), 10)).toThrow(`cannot create the data directory ${join(file, "data")}: ${file} is a file, not a directory`);
    expect(() => FileTokens.open(join(file, "data"), 10)).toThrow(expect.objectContaining({ advice: "other" }));
    expect(() => FileTokens.open(file, 10)).toThrow(`the data directory ${file} is a file, not a directory`);
    expect(() => FileTokens.open(file, 10)).toThrow(expect.objectContaining({ advice: "file" }));
  });

  test.skipIf(process.getuid?.() === 0)("a data directory the user cannot write: permission denied, said so", () => {
    const base = tempDir();
    chmodSync(base, 0o500);
    try {
      expect(() => FileTokens.open(join(base, "data"), 10)).toThrow(/cannot create the data directory .*: permission denied/);
      expect(() => FileTokens.open(base, 10)).toThrow(/cannot use the data directory .*: permission denied/);
    } finally {
      chmodSync(base, 0o700);
    }
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
    tokens.abandon();
  });
});
