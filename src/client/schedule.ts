/**
 * The heartbeat schedule of protocol.md section 8.2, and the pacing of
 * reconnects (section 8.5), as pure functions of the lease the client
 * chose, the round trips it measured and (for the jitter) a random draw. No
 * clock and no state here: the claim machine (machine.ts) and the load bench
 * feed in numbers and get numbers back, so tests can check the arithmetic
 * directly.
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
 * The bounds of the reconnect pacing (protocol.md section 8.5), in ms. The
 * pause before the next address of a round is drawn from
 * [nextAddressMinMs, nextAddressMaxMs); the backoff after a whole round
 * starts from backoffBaseMs, doubles per round and stops at backoffMaxMs.
 */
export interface PauseBounds {
  readonly nextAddressMinMs: number;
  readonly nextAddressMaxMs: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
}

/** The bounds every bundled client uses: 10-50 ms within a round, 50 ms doubling to 2 s after one. */
export const PAUSE_BOUNDS: PauseBounds = { nextAddressMinMs: 10, nextAddressMaxMs: 50, backoffBaseMs: 50, backoffMaxMs: 2000 };

/**
 * The pause before the next connect after failure number `failures`
 * (1, 2, ...; failures in a row since a server last answered) over a list of
 * `addresses` addresses, for one `draw` in [0, 1):
 *
 *     failures % addresses != 0 (the round goes on):
 *         nextAddressMinMs + draw * (nextAddressMaxMs - nextAddressMinMs)
 *     else (round k = failures / addresses is done):
 *         base = min(backoffMaxMs, backoffBaseMs * 2^k)
 *         base / 2 + draw * base / 2
 *
 * The one rule of the three bundled clients (this one, clients/go's
 * ReconnectPause, clients/python's reconnect_pause), each checked on the
 * vectors of test/conformance/backoff.json, which were generated from this
 * function. The doubling stops at the cap, so no round number overflows.
 */
export function reconnectPause(failures: number, addresses: number, draw: number, bounds: PauseBounds = PAUSE_BOUNDS): number {
  if (failures % addresses !== 0) return bounds.nextAddressMinMs + draw * (bounds.nextAddressMaxMs - bounds.nextAddressMinMs);
  let base = bounds.backoffBaseMs;
  for (let round = failures / addresses; round > 0 && base < bounds.backoffMaxMs; round--) base *= 2;
  base = Math.min(base, bounds.backoffMaxMs);
  return base / 2 + draw * (base / 2);
}
