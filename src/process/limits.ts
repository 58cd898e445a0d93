/**
 * The open-file limit bounds how many sessions one process can hold: every
 * session is a socket, and so is every listener and ops connection. Linux
 * tells the limit in /proc/self/limits; elsewhere it is unknown.
 */
import { readFileSync } from "node:fs";

/**
 * The descriptors kept beside sessions, so that the lock listener can
 * always accept, and a client past the session limit gets ERROR OVERLOADED
 * rather than a failed accept (and a listener spinning on EMFILE). Three
 * parts:
 *
 * - the process itself: stdio, both listeners, the event loop's own
 *   (epoll, timers, wakeups), the data directory and the token floor's
 *   temp file, whatever the runtime opens;
 * - the ops listener's connections, up to its connection limit
 *   (--ops-max-connections, which refuses beyond it at accept);
 * - refusals: a connection refused with OVERLOADED holds its descriptor
 *   only until Bun closes it, inside the accept callback once the ERROR is
 *   written, so a burst of refusals needs few at a time; the rest is slack
 *   for accepts racing the close of sessions that just ended.
 */
export const PROCESS_FDS = 64;
/**
 * The ops listener's connection limit by default (--ops-max-connections),
 * which the reserve assumes: the one definition the CLI's default takes.
 */
export const DEFAULT_OPS_CONNECTIONS = 64;
export const REFUSAL_FDS = 128;

/**
 * The ops listener's idle timeout by default (--ops-idle-timeout), in ms:
 * kept beside the connection limit it goes with, for the CLI's default.
 */
export const DEFAULT_OPS_IDLE_TIMEOUT_MS = 5000;

/** Descriptors reserved beside sessions for an ops connection limit of `opsConnections`. */
export function reservedFds(opsConnections = DEFAULT_OPS_CONNECTIONS): number {
  return PROCESS_FDS + opsConnections + REFUSAL_FDS;
}

/** The reserve with the default ops connection limit: 64 + 64 + 128 = 256 (test/server/limits.test.ts). */
export const RESERVED_FDS = reservedFds();

export interface OpenFileLimit {
  /** The soft limit (what the process may use now), or null when unknown. */
  readonly soft: number | null;
  /** The hard limit (the most the soft limit can be raised to without privilege), or null. */
  readonly hard: number | null;
  /** Sessions that fit under the soft limit, or null when unknown. */
  readonly sessionCapacity: number | null;
}

/**
 * The open-file line of /proc/self/limits, and the sessions that fit under
 * its soft limit once `reservedFds(opsConnections)` are kept aside.
 */
export function parseLimits(text: string, opsConnections = DEFAULT_OPS_CONNECTIONS): OpenFileLimit {
  const line = text.split("\n").find((l) => l.startsWith("Max open files"));
  const fields = line?.slice("Max open files".length).trim().split(/\s+/) ?? [];
  const value = (field: string | undefined) => (field === undefined ? null : field === "unlimited" ? Infinity : Number(field) || null);
  const soft = value(fields[0]);
  const hard = value(fields[1]);
  return { soft, hard, sessionCapacity: soft === null ? null : Math.max(0, soft - reservedFds(opsConnections)) };
}

export function openFileLimit(opsConnections = DEFAULT_OPS_CONNECTIONS): OpenFileLimit {
  try {
    return parseLimits(readFileSync("/proc/self/limits", "utf8"), opsConnections);
  } catch {
    return { soft: null, hard: null, sessionCapacity: null };
  }
}
