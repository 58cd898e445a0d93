/**
 * The heartbeat schedule of protocol.md section 8.2, and the pacing of
 * reconnects, as pure functions of the lease the client chose, the round
 * trips it measured and (for the jitter) a random number. No clock and no
 * state here: the claim machine (machine.ts) and the load bench feed in
 * numbers and get numbers back, so tests can check the arithmetic directly.
 *
 *     baseInterval  = lease / 4
 *     clientTimeout = lease * 0.8
 *     safeRTT       = smoothedRTT * 2      (EWMA of round trips, alpha 0.2)
 *     interval      = clamp(baseInterval - safeRTT, minHeartbeatInterval, baseInterval)
 *
 * The upper bound wins the clamp: with a lease under 4 x MIN_HEARTBEAT_INTERVAL_MS
 * the base interval is already below the floor, and sending less often than
 * baseInterval would spend the margin the pessimism rule relies on.
 */

/** EWMA weight of a new round-trip sample. */
export const RTT_ALPHA = 0.2;

/**
 * Floor of the heartbeat interval in ms: however slow the round trips, a
 * client never heartbeats in a tight loop. (The protocol names the floor but
 * leaves its value to the client.)
 */
export const MIN_HEARTBEAT_INTERVAL_MS = 1;

/** lease / 4: how often a client with a zero round trip heartbeats. */
export function baseInterval(leaseMs: number): number {
  return leaseMs / 4;
}

/**
 * lease * 0.8: how long after *sending* its last answered frame a client
 * still counts its claim as confirmed.
 */
export function clientTimeout(leaseMs: number): number {
  return leaseMs * 0.8;
}

/** The smoothed RTT after one more sample; the first sample is taken as is. */
export function smoothRtt(smoothedMs: number | undefined, sampleMs: number): number {
  return smoothedMs === undefined ? sampleMs : smoothedMs + RTT_ALPHA * (sampleMs - smoothedMs);
}

/** Delay from a heartbeat reply to the next heartbeat. */
export function heartbeatInterval(leaseMs: number, smoothedRttMs: number, minIntervalMs = MIN_HEARTBEAT_INTERVAL_MS): number {
  const base = baseInterval(leaseMs);
  return Math.min(base, Math.max(minIntervalMs, base - 2 * smoothedRttMs));
}

/** Where a jittered pause draws from: a number in [0, 1), like Math.random. */
export type Random = () => number;

/**
 * Pause after round `round` (1, 2, ...) of failures over every address:
 * half fixed, half random, 50 ms doubling to 2 s (base = min(2000, 50 x 2^round);
 * the pause is base/2 + random() x base/2).
 */
export function backoff(round: number, random: Random): number {
  const base = Math.min(2000, 50 * 2 ** Math.min(round, 10));
  return base / 2 + random() * (base / 2);
}

/** Pause before the next address of a round: 10-50 ms, jittered so that many clients do not move in step. */
export function nextAddressPause(random: Random): number {
  return 10 + random() * 40;
}
