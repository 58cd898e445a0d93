// The soak's checker must be able to fail: each kind of violation it exists
// to catch is fed to it here, next to clean histories it must accept.
import { describe, expect, test } from "bun:test";
import { Checker } from "./checker.ts";

const grant = (key: string, lock: number, token: number, at: number) => ({ k: "g", s: key, l: lock, t: String(token), a: at });
const end = (key: string, at: number, why = "released") => ({ k: "e", s: key, e: at, w: why });

function check(lines: Record<string, unknown>[], kills: [string, number][] = []) {
  const checker = new Checker();
  for (const line of lines) checker.line(line);
  for (const [tag, at] of kills) checker.killed(tag, at);
  return checker.verdict();
}

describe("soak checker", () => {
  test("accepts handovers in token order, on several locks", () => {
    const v = check([grant("a.0.0", 1, 1, 100), grant("b.0.0", 2, 2, 101), end("a.0.0", 150), grant("b.1.0", 1, 3, 150.5), end("b.1.0", 200), end("b.0.0", 300)]);
    expect(v).toMatchObject({ holds: 3, locks: 2, duplicateTokens: 0, overlaps: 0, tokenOrder: 0, unended: 0 });
  });

  test("flags overlapping holds of one lock", () => {
    const v = check([grant("a.0.0", 1, 1, 100), grant("b.0.0", 1, 2, 120), end("a.0.0", 150), end("b.0.0", 200)]);
    expect(v.overlaps).toBe(1);
    expect(v.examples[0]).toContain("granted 30.000 ms before a.0.0");
  });

  test("flags an overlap hidden behind a short hold: the latest end counts, not the previous one", () => {
    const v = check([grant("a.0.0", 1, 1, 100), end("a.0.0", 500), grant("b.0.0", 1, 2, 200), end("b.0.0", 210), grant("c.0.0", 1, 3, 300), end("c.0.0", 310)]);
    expect(v.overlaps).toBe(2);
  });

  test("counts sub-tolerance overlaps apart (clock noise between processes)", () => {
    const v = check([grant("a.0.0", 1, 1, 100), end("a.0.0", 150.4), grant("b.0.0", 1, 2, 150), end("b.0.0", 200)]);
    expect([v.overlaps, v.overlapsWithinTolerance]).toEqual([0, 1]);
  });

  test("flags a token granted twice and tokens going backwards on a lock", () => {
    const twice = check([grant("a.0.0", 1, 5, 100), end("a.0.0", 110), grant("b.0.0", 2, 5, 120), end("b.0.0", 130)]);
    expect(twice.duplicateTokens).toBe(1);
    const backwards = check([grant("a.0.0", 1, 9, 100), end("a.0.0", 110), grant("b.0.0", 1, 7, 120), end("b.0.0", 130)]);
    expect(backwards.tokenOrder).toBe(1);
  });

  test("a killed process's holds end at the kill; a hold that never ends elsewhere is flagged", () => {
    const killed = check([grant("w1g0.3.0", 1, 1, 100), grant("w2g1.0.0", 1, 2, 300), end("w2g1.0.0", 310)], [["w1g0", 250]]);
    expect([killed.overlaps, killed.unended]).toEqual([0, 0]);
    const killedLate = check([grant("w1g0.3.0", 1, 1, 100), grant("w2g1.0.0", 1, 2, 300), end("w2g1.0.0", 310)], [["w1g0", 400]]);
    expect(killedLate.overlaps).toBe(1);
    const open = check([grant("w1g0.3.0", 1, 1, 100)]);
    expect(open.unended).toBe(1);
  });

  test("a killed process that had been stopped past a hold's deadline: the hold ended at that deadline, not at the kill", () => {
    const g = (key: string, lock: number, token: number, at: number, lease: number) => ({ ...grant(key, lock, token, at), L: lease });
    // w1 holds lock 1 from 100 with a 1000 ms lease, is stopped at 200 for 2000 ms (deadline 200 + 800 = 1000),
    // and killed at 2300, right after it resumed and before it could log the loss. The server granted w2 at 1500.
    const lines = [g("w1g0.3.0", 1, 1, 100, 1000), g("w2g1.0.0", 1, 2, 1500, 1000), end("w2g1.0.0", 1600)];
    const run = (stalls: [number, number][]) => {
      const checker = new Checker();
      for (const line of lines) checker.line(line);
      for (const [stopped, resumed] of stalls) checker.stalled("w1g0", stopped, resumed);
      checker.killed("w1g0", 2300);
      return checker.verdict();
    };
    expect(run([[200, 2200]]).overlaps).toBe(0);
    // Without the stall the same history is an overlap: the hold would have lasted until the kill.
    expect(run([]).overlaps).toBe(1);
    // A stall shorter than the deadline bounds nothing: the hold may have gone on after it.
    expect(run([[200, 700]]).overlaps).toBe(1);
    // A grant while the hold could still have been confirmed is still flagged.
    const early = new Checker();
    for (const line of [g("w1g0.3.0", 1, 1, 100, 1000), g("w2g1.0.0", 1, 2, 900, 1000), end("w2g1.0.0", 950)]) early.line(line);
    early.stalled("w1g0", 200, 2200);
    early.killed("w1g0", 2300);
    expect(early.verdict().overlaps).toBe(1);
  });

  test("flags a grant reported after its own deadline (the hold ends before it starts)", () => {
    const v = check([grant("a.0.0", 1, 1, 100), end("a.0.0", 60, "unconfirmed")]);
    expect(v.endedBeforeStart).toBe(1);
  });
});
