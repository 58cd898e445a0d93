import { describe, expect, test } from "bun:test";
import { MIN_HEARTBEAT_INTERVAL_MS, PAUSE_BOUNDS, RTT_ALPHA, baseInterval, clientTimeout, heartbeatInterval, reconnectPause, smoothRtt } from "../../src/client/schedule.ts";
import backoff from "../conformance/backoff.json";

describe("schedule (protocol.md section 8.2)", () => {
  test("baseInterval is lease/4 and clientTimeout lease*0.8, for leases from 1 ms to the u32 maximum", () => {
    for (const lease of [1, 3, 4, 10, 100, 1000, 5000, 30_000, 3_600_000, 0xffff_ffff]) {
      expect(baseInterval(lease)).toBe(lease / 4);
      expect(clientTimeout(lease)).toBeCloseTo(lease * 0.8, 6);
      // The pessimism margin: the client gives up strictly before the server's lease ends.
      expect(clientTimeout(lease)).toBeLessThan(lease);
    }
  });

  test("interval = baseInterval - 2 x smoothed RTT between the clamps", () => {
    const cases: [lease: number, rtt: number, expected: number][] = [
      [5000, 0, 1250], // no RTT: the upper clamp, baseInterval itself
      [5000, 0.2, 1249.6],
      [5000, 10, 1230],
      [5000, 100, 1050],
      [1000, 50, 150],
      [1000, 124, 2],
      [1000, 124.5, 1], // exactly at the floor
      [1000, 200, MIN_HEARTBEAT_INTERVAL_MS], // RTT larger than the interval: the lower clamp
      [1000, 1e6, MIN_HEARTBEAT_INTERVAL_MS],
      [60_000, 1, 14_998],
    ];
    for (const [lease, rtt, expected] of cases) {
      expect(heartbeatInterval(lease, rtt)).toBeCloseTo(expected, 6);
    }
  });

  test("the interval never exceeds baseInterval, never drops below the floor unless the lease forces it", () => {
    for (const lease of [1, 2, 3, 4, 5, 8, 40, 400, 4000, 40_000]) {
      for (const rtt of [0, 0.1, 0.5, 1, 5, 50, 500, 5000]) {
        const interval = heartbeatInterval(lease, rtt);
        expect(interval).toBeLessThanOrEqual(baseInterval(lease));
        expect(interval).toBeGreaterThanOrEqual(Math.min(MIN_HEARTBEAT_INTERVAL_MS, baseInterval(lease)));
      }
    }
    // Lease 2 ms: baseInterval 0.5 ms is below the 1 ms floor; the upper bound wins.
    expect(heartbeatInterval(2, 0)).toBe(0.5);
    expect(heartbeatInterval(2, 10)).toBe(0.5);
    // A custom floor.
    expect(heartbeatInterval(1000, 200, 20)).toBe(20);
  });

  test("smoothed RTT is an EWMA with alpha 0.2, seeded by the first sample", () => {
    expect(RTT_ALPHA).toBe(0.2);
    let rtt = smoothRtt(undefined, 10);
    expect(rtt).toBe(10);
    rtt = smoothRtt(rtt, 20);
    expect(rtt).toBeCloseTo(12, 9);
    rtt = smoothRtt(rtt, 2);
    expect(rtt).toBeCloseTo(10, 9);
    // Converges on a steady RTT.
    for (let i = 0; i < 100; i++) rtt = smoothRtt(rtt, 50);
    expect(rtt).toBeCloseTo(50, 3);
  });
});

describe("reconnect pacing (protocol.md section 8.5) on test/conformance/backoff.json, which the Go and Python clients check too", () => {
  test("the first set's bounds are the defaults", () => {
    expect(backoff.sets[0]!.bounds).toEqual({ ...PAUSE_BOUNDS });
  });

  for (const set of backoff.sets) {
    test(`every vector: ${set.note}`, () => {
      expect(set.vectors.length).toBeGreaterThan(0);
      for (const v of set.vectors) {
        expect({ ...v, pauseMs: reconnectPause(v.failures, v.addresses, v.draw, set.bounds) }).toEqual(v);
      }
    });
  }

  test("the default bounds are the default", () => {
    for (const v of backoff.sets[0]!.vectors) expect(reconnectPause(v.failures, v.addresses, v.draw)).toBe(v.pauseMs);
  });

  test("within a round the pause is in [min, max); after one, in [base/2, base), base doubling to the cap", () => {
    for (const draw of [0, 0.5, 0.999999]) {
      for (const addresses of [1, 2, 5]) {
        let previousBase = 0;
        for (let failures = 1; failures <= 40 * addresses; failures++) {
          const pause = reconnectPause(failures, addresses, draw);
          if (failures % addresses !== 0) {
            expect(pause).toBeGreaterThanOrEqual(PAUSE_BOUNDS.nextAddressMinMs);
            expect(pause).toBeLessThan(PAUSE_BOUNDS.nextAddressMaxMs);
            continue;
          }
          const base = reconnectPause(failures, addresses, 0) * 2;
          expect(base).toBe(Math.min(PAUSE_BOUNDS.backoffMaxMs, PAUSE_BOUNDS.backoffBaseMs * 2 ** (failures / addresses)));
          expect(base).toBeGreaterThanOrEqual(previousBase);
          expect(pause).toBeGreaterThanOrEqual(base / 2);
          expect(pause).toBeLessThan(base);
          previousBase = base;
        }
      }
    }
  });
});
