// The single server's lease record (<data-dir>/leases): what a start owes
// the last run, written before the first grant and at a clean stop.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { delayFor, roundLease } from "../../src/core/delay.ts";
import { LeasesFile, readLeases, startDelay, writeLeases } from "../../src/tokens/leases.ts";
import { TokenStoreError } from "../../src/tokens/file.ts";

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lockd-leases-"));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const fatal = (error: TokenStoreError): never => {
  throw error;
};

describe("what a start owes the last run", () => {
  test("no record: nothing", () => {
    expect(startDelay(null)).toEqual({ everyNameMs: 0, names: [], carryLeaseMs: 0, clean: true });
  });

  test("not clean: every name waits 0.82 x the larger of the run's largest lease and what it carried", () => {
    expect(startDelay({ maxLeaseMs: 10_000, carryLeaseMs: 20_000, clean: false, held: null })).toEqual({ everyNameMs: 16_400, names: [], carryLeaseMs: 20_000, clean: false });
  });

  test("clean: the published names, each for its holder's lease; too many to list: every name", () => {
    expect(startDelay({ maxLeaseMs: 5000, carryLeaseMs: 0, clean: true, held: [["a", 5000], ["b", 1000]] })).toEqual({
      everyNameMs: 0,
      names: [["a", 4100], ["b", 820]],
      carryLeaseMs: 5000,
      clean: true,
    });
    expect(startDelay({ maxLeaseMs: 5000, carryLeaseMs: 0, clean: true, held: "*" }).everyNameMs).toBe(4100);
  });
});

describe("a run's record", () => {
  test("start marks it not clean before any grant; a raise is written before the grant it covers; a clean stop publishes the held names", () => {
    const dir = tempDir();
    const first = LeasesFile.open(dir, 0, fatal);
    first.start();
    expect(readLeases(dir)).toEqual({ maxLeaseMs: 0, carryLeaseMs: 0, clean: false, held: null });
    expect(first.delay.covers(7000)).toBe(true); // synchronous: written now
    expect(readLeases(dir)!.maxLeaseMs).toBe(roundLease(7000));
    expect(first.delay.covers(3000)).toBe(true);
    expect(readLeases(dir)!.maxLeaseMs).toBe(roundLease(7000)); // never lowered during a run
    first.close([["held", 7000]]);
    expect(readLeases(dir)).toEqual({ maxLeaseMs: 7000, carryLeaseMs: 0, clean: true, held: [["held", 7000]] });

    // The next start owes "held" its holder's lease, and carries it until that wait is over.
    const second = LeasesFile.open(dir, 1000, fatal);
    expect(second.delay.delayOf("held", 1000)).toBe(delayFor(7000));
    expect(second.delay.delayOf("other", 1000)).toBe(0);
    second.start();
    expect(readLeases(dir)).toEqual({ maxLeaseMs: 0, carryLeaseMs: 7000, clean: false, held: null });
    second.delayOver();
    expect(readLeases(dir)!.carryLeaseMs).toBe(0);
  });

  test("a run killed before its clean stop leaves a record that is not clean: the next start holds back every name", () => {
    const dir = tempDir();
    const first = LeasesFile.open(dir, 0, fatal);
    first.start();
    first.delay.covers(20_000);
    // (no close: SIGKILL)
    const second = LeasesFile.open(dir, 500, fatal);
    expect(second.delay.delayOf("any", 500)).toBe(delayFor(roundLease(20_000)));
    expect(second.delay.view(500)).toMatchObject({ why: "restart", everyName: true });
  });

  test("a start that failed before `start` leaves the record as it was", () => {
    const dir = tempDir();
    writeLeases(dir, { maxLeaseMs: 1000, carryLeaseMs: 0, clean: true, held: [["a", 1000]] });
    const before = readFileSync(join(dir, "leases"), "utf8");
    const failed = LeasesFile.open(dir, 0, fatal);
    failed.close([]); // a daemon closed before its start: nothing written
    expect(readFileSync(join(dir, "leases"), "utf8")).toBe(before);
  });

  test("a corrupt record stops start-up with a sentence that says what to do", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "leases"), 'lockd-leases v1 {"maxLeaseMs":1} crc=00000000\n');
    expect(() => readLeases(dir)).toThrow(TokenStoreError);
    try {
      readLeases(dir);
    } catch (error) {
      expect((error as TokenStoreError).kind).toBe("corrupt");
      expect((error as Error).message).toContain("0.8 x the longest lease");
    }
    // A well-formed line whose checksum is right but whose content is not a record is corrupt too.
    const body = 'lockd-leases v1 {"maxLeaseMs":"x"}';
    writeFileSync(join(dir, "leases"), `${body} crc=${(Bun.hash.crc32(body) >>> 0).toString(16).padStart(8, "0")}\n`);
    expect(() => readLeases(dir)).toThrow(/corrupt/);
  });

  test("names with any characters round-trip", () => {
    const dir = tempDir();
    const held: [string, number][] = [["a b/\"c\"\\ é 🔒", 5], ["crc=00000000\nx", 6]];
    writeLeases(dir, { maxLeaseMs: 6, carryLeaseMs: 0, clean: true, held });
    expect(readLeases(dir)!.held).toEqual(held);
  });
});
