// Reclaim in the single server's lease record (<data-dir>/leases): the cap
// M kept raise-only, the clean stop's reclaimable grants, and what the next
// start accepts (tokens/leases.ts, protocol.md section 14).
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { delayFor, roundLease } from "../../src/core/delay.ts";
import type { ReclaimEntry } from "../../src/core/engine.ts";
import { NO_SLOT, SHARED_CLAIM } from "../../src/core/session.ts";
import { crc } from "../../src/tokens/durable.ts";
import { TokenStoreError } from "../../src/tokens/file.ts";
import { LeasesFile, readLeases, writeLeases } from "../../src/tokens/leases.ts";

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lockd-leases-reclaim-"));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const fatal = (error: TokenStoreError): never => {
  throw error;
};

const on = (ms: number) => ({ maxLeaseMs: ms });
const OFF = { maxLeaseMs: null };

/** A run on `dir` that grants nothing and stops cleanly holding `held` with reclaimable `grants`. */
function cleanRun(dir: string, setting: { maxLeaseMs: number | null }, held: Array<[string, number]>, grants: Map<string, ReclaimEntry[]> | null, now = 0): LeasesFile {
  const run = LeasesFile.open(dir, now, fatal, setting);
  run.start();
  run.close(held, grants);
  return run;
}

const grant = (token: number, leaseMs: number, slot = NO_SLOT, limit = 1): ReclaimEntry => ({ token, slot, limit, leaseMs });

describe("a clean stop with reclaim on", () => {
  test("publishes its grants with the held names; the next start accepts them, and its grace ends with the last published name's delay", () => {
    const dir = tempDir();
    const grants = new Map([
      ["a", [grant(7, 5000)]],
      ["s", [grant(8, 2000, SHARED_CLAIM), grant(9, 3000, SHARED_CLAIM)]],
      ["sem", [grant(10, 4000, 1, 3)]],
    ]);
    cleanRun(dir, on(10_000), [["a", 5000], ["s", 3000], ["sem", 4000], ["long", 60_000]], grants);
    const record = readLeases(dir)!;
    expect(record.clean).toBe(true);
    expect(record.reclaimMaxLeaseMs).toBe(10_000);
    expect(record.reclaim).toEqual([
      ["a", [[7, NO_SLOT, 1, 5000]]],
      ["s", [[8, SHARED_CLAIM, 1, 2000], [9, SHARED_CLAIM, 1, 3000]]],
      ["sem", [[10, 1, 3, 4000]]],
    ]);

    const next = LeasesFile.open(dir, 1000, fatal, on(10_000));
    const plan = next.reclaim;
    expect(plan.maxLeaseMs).toBe(10_000);
    expect(plan.publishes).toBe(true);
    expect(plan.grants).toBe(4);
    expect(plan.dropped).toBeNull();
    expect(plan.published).toEqual(grants);
    // The grace: until the last published name stops being held back ("a", 0.82 x 5 s); "long" was not reclaimable.
    expect(plan.graceEndsAt).toBe(1000 + delayFor(5000));
    // Each published name is held back for at least 0.8 x its longest published lease (reclaims are granted only then).
    for (const [name, lease] of [["a", 5000], ["s", 3000], ["sem", 4000]] as const) expect(next.delay.delayOf(name, 1000)).toBeGreaterThanOrEqual(0.8 * lease);
    // Reclaimed holders are this run's: a lease covering any reclaim (at most M) is durable from the start, before any grant.
    next.start();
    expect(readLeases(dir)).toMatchObject({ clean: false, maxLeaseMs: roundLease(10_000), reclaimMaxLeaseMs: 10_000 });
    expect(readLeases(dir)!.reclaim).toBeUndefined(); // a crash from here on leaves nothing to reclaim
    expect(next.delay.covers(10_000)).toBe(true);
    // A crash now: the next start waits for every name as long as any reclaimed holder may believe.
    const crashed = LeasesFile.open(dir, 2000, fatal, on(10_000));
    expect(crashed.delay.delayOf("a", 2000)).toBeGreaterThanOrEqual(0.8 * 10_000);
  });

  test("after a crash (no clean stop since the publishing one), nothing is accepted", () => {
    const dir = tempDir();
    cleanRun(dir, on(10_000), [["a", 5000]], new Map([["a", [grant(7, 5000)]]]));
    const second = LeasesFile.open(dir, 0, fatal, on(10_000));
    expect(second.reclaim.grants).toBe(1);
    second.start();
    // (SIGKILL: no close)
    const third = LeasesFile.open(dir, 0, fatal, on(10_000));
    expect(third.reclaim).toMatchObject({ maxLeaseMs: 10_000, grants: 0, graceEndsAt: 0 });
    expect(third.reclaim.published.size).toBe(0);
    expect(third.delay.view(0)).toMatchObject({ why: "restart", everyName: true });
  });

  test("a stop without grants to publish (reclaim off, or too many) writes none", () => {
    const dir = tempDir();
    cleanRun(dir, on(10_000), [["a", 5000]], null);
    expect(readLeases(dir)!.reclaim).toBeUndefined();
    expect(LeasesFile.open(dir, 0, fatal, on(10_000)).reclaim.grants).toBe(0);
  });
});

describe("M is kept in the data directory and never lowered", () => {
  test("a run with a lower M uses the recorded one, and says what it asked for", () => {
    const dir = tempDir();
    cleanRun(dir, on(10_000), [["a", 8000]], new Map([["a", [grant(7, 8000)]]]));
    const lower = LeasesFile.open(dir, 0, fatal, on(2000));
    expect(lower.reclaim).toMatchObject({ maxLeaseMs: 10_000, requestedMs: 2000, publishes: true, grants: 1 });
    lower.start();
    expect(readLeases(dir)!.reclaimMaxLeaseMs).toBe(10_000);
  });

  test("a run with a higher M raises the record", () => {
    const dir = tempDir();
    cleanRun(dir, on(10_000), [], new Map());
    const higher = LeasesFile.open(dir, 0, fatal, on(30_000));
    expect(higher.reclaim).toMatchObject({ maxLeaseMs: 30_000, requestedMs: null });
    higher.start();
    expect(readLeases(dir)!.reclaimMaxLeaseMs).toBe(30_000);
  });

  test("off on a directory that had it: the last stop's grants are still accepted (their holders were told so), M stays recorded, this run publishes none", () => {
    const dir = tempDir();
    cleanRun(dir, on(10_000), [["a", 5000]], new Map([["a", [grant(7, 5000)]]]));
    const off = LeasesFile.open(dir, 0, fatal, OFF);
    expect(off.reclaim).toMatchObject({ maxLeaseMs: 10_000, publishes: false, grants: 1 });
    off.start();
    off.close([["a", 5000]], new Map([["a", [grant(7, 5000)]]]));
    expect(readLeases(dir)).toMatchObject({ clean: true, reclaimMaxLeaseMs: 10_000 });
    expect(readLeases(dir)!.reclaim).toBeUndefined();
    // The run after it: off, nothing to honour: reclaim is off in its engine.
    expect(LeasesFile.open(dir, 0, fatal, OFF).reclaim).toMatchObject({ maxLeaseMs: null, publishes: false, grants: 0 });
  });

  test("off on a directory that never had it: nothing changes in the record", () => {
    const dir = tempDir();
    cleanRun(dir, OFF, [["a", 5000]], null);
    expect(readLeases(dir)).toEqual({ maxLeaseMs: 5000, carryLeaseMs: 0, clean: true, held: [["a", 5000]] });
  });
});

describe("a published set the start does not trust", () => {
  test("a published name not held back for 0.8 x its grant's lease: no reclaim at all", () => {
    const dir = tempDir();
    // Not a record lockd writes: "a" is held for 1 s but its grant's lease is 5 s.
    writeLeases(dir, { maxLeaseMs: 1000, carryLeaseMs: 0, clean: true, held: [["a", 1000]], reclaimMaxLeaseMs: 10_000, reclaim: [["a", [[7, NO_SLOT, 1, 5000]]]] });
    const plan = LeasesFile.open(dir, 0, fatal, on(10_000)).reclaim;
    expect(plan).toMatchObject({ dropped: "not-held-back", grants: 0, graceEndsAt: 0, maxLeaseMs: 10_000 });
    expect(plan.published.size).toBe(0);
  });

  test("every name held back (too many names to list) covers every published grant", () => {
    const dir = tempDir();
    writeLeases(dir, { maxLeaseMs: roundLease(5000), carryLeaseMs: 0, clean: true, held: "*", reclaimMaxLeaseMs: 10_000, reclaim: [["a", [[7, NO_SLOT, 1, 5000]]]] });
    const plan = LeasesFile.open(dir, 0, fatal, on(10_000)).reclaim;
    expect(plan).toMatchObject({ dropped: null, grants: 1, graceEndsAt: delayFor(roundLease(5000)) });
  });

  test("a malformed reclaim field makes the record corrupt", () => {
    const dir = tempDir();
    const body = `lockd-leases v1 ${JSON.stringify({ maxLeaseMs: 1, carryLeaseMs: 0, clean: true, held: [], reclaim: [["a", [[7, -1, 1]]]] })}`;
    writeFileSync(join(dir, "leases"), `${body} crc=${crc(body)}\n`);
    expect(() => readLeases(dir)).toThrow(/corrupt/);
  });
});
