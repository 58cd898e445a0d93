/**
 * The open-file limit bounds how many sessions one process can hold: every
 * session is a socket, and so is every listener and ops connection. Linux
 * tells the limit in /proc/self/limits; elsewhere it is unknown.
 */
import { readFileSync } from "node:fs";

/**
 * File descriptors kept for everything that is not a session: stdio,
 * listeners, ops connections, the data dir, and slack for a burst of
 * accepts, so that a client past the capacity gets OVERLOADED rather than a
 * failed accept.
 */
export const RESERVED_FDS = 256;

export interface OpenFileLimit {
  /** The soft limit (what the process may use now), or null when unknown. */
  readonly soft: number | null;
  /** The hard limit (the most the soft limit can be raised to without privilege), or null. */
  readonly hard: number | null;
  /** Sessions that fit under the soft limit, or null when unknown. */
  readonly sessionCapacity: number | null;
}

export function parseLimits(text: string): OpenFileLimit {
  const line = text.split("\n").find((l) => l.startsWith("Max open files"));
  const fields = line?.slice("Max open files".length).trim().split(/\s+/) ?? [];
  const value = (field: string | undefined) => (field === undefined ? null : field === "unlimited" ? Infinity : Number(field) || null);
  const soft = value(fields[0]);
  const hard = value(fields[1]);
  return { soft, hard, sessionCapacity: soft === null ? null : Math.max(0, soft - RESERVED_FDS) };
}

export function openFileLimit(): OpenFileLimit {
  try {
    return parseLimits(readFileSync("/proc/self/limits", "utf8"));
  } catch {
    return { soft: null, hard: null, sessionCapacity: null };
  }
}
