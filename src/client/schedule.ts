/**
 * The heartbeat schedule of protocol.md section 6, as pure functions of the
 * lease the client chose and the round trips it measured. No clock and no
 * state here: the connection feeds in numbers and gets numbers back, so
 * tests can check the arithmetic for any lease and RTT directly.
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
