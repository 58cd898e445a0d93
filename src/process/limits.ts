/**
 * The open-file limit bounds how many sessions one process can hold: every
 * session is a socket, and so is every listener and ops connection. Linux
 * tells the limit in /proc/self/limits; elsewhere it is unknown.
 *
 * `lockd serve` raises its soft limit to the hard limit at start
 * (raiseOpenFileLimit), as Go programs do since Go 1.19: the soft limit is
 * a default meant for programs that use select(2), and the hard limit is
 * what the operator allows. The ops server (Bun.serve) has no connection
 * limit, so its callers' descriptors come out of the same budget as
 * sessions: the higher the limit, the more an ops flood needs of its own
 * descriptors (and, from one address, of its ephemeral ports: about 28,000
 * towards one port) before the lock listener runs short.
 */
import { dlopen, FFIType, ptr } from "bun:ffi";
import { readFileSync } from "node:fs";
import { LIBC_NAMES } from "./libc.ts";

/**
 * The descriptors kept beside sessions, so that the lock listener can
 * always accept, and a client past the session limit gets ERROR OVERLOADED
 * rather than a failed accept (and a listener spinning on EMFILE). Three
 * parts:
 *
 * - the process itself: stdio, both listeners, the event loop's own
 *   (epoll, timers, wakeups), the data directory and the token floor's
 *   temp file, whatever the runtime opens;
 * - the ops listener's connections: --ops-max-connections of them, the
 *   callers an operator expects at once (probes, scrapers, lockd status,
 *   /ui pages). Bun.serve refuses no connection, so this is a reserve, not
 *   a cap;
 * - refusals: a connection refused with OVERLOADED holds its descriptor
 *   only until Bun closes it, inside the accept callback once the ERROR is
 *   written, so a burst of refusals needs few at a time; the rest is slack
 *   for accepts racing the close of sessions that just ended.
 */
export const PROCESS_FDS = 64;
/** The ops connections the reserve assumes by default (--ops-max-connections): the one definition the CLI's default takes. */
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

/** RLIMIT_NOFILE by platform. */
const RLIMIT_NOFILE: Record<string, number> = { linux: 7, darwin: 8, freebsd: 8 };
/** macOS refuses a soft limit above OPEN_MAX for some callers (and RLIM_INFINITY always): the fallback there. */
const DARWIN_OPEN_MAX = 10_240n;

interface Rlimits {
  get(): { soft: bigint; hard: bigint } | null;
  set(soft: bigint, hard: bigint): boolean;
}

let rlimits: Rlimits | string | undefined;

/** getrlimit and setrlimit from the C library (bun:ffi, which the compiled binary has too); a string says why not. */
function loadRlimits(): Rlimits | string {
  if (rlimits !== undefined) return rlimits;
  const resource = RLIMIT_NOFILE[process.platform];
  const names = LIBC_NAMES[process.platform] ?? [];
  if (resource === undefined || names.length === 0) return (rlimits = `setrlimit(2) is not supported on ${process.platform}`);
  const failures: string[] = [];
  for (const name of names) {
    try {
      const lib = dlopen(name, {
        getrlimit: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
        setrlimit: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
      });
      // struct rlimit { rlim_t rlim_cur, rlim_max; }: two 64-bit words on every platform listed.
      const buffer = new BigUint64Array(2);
      const at = ptr(buffer);
      return (rlimits = {
        get: () => (lib.symbols.getrlimit(resource, at) === 0 ? { soft: buffer[0]!, hard: buffer[1]! } : null),
        set: (soft, hard) => {
          buffer[0] = soft;
          buffer[1] = hard;
          return lib.symbols.setrlimit(resource, at) === 0;
        },
      });
    } catch (error) {
      failures.push(`${name}: ${(error as Error).message}`);
    }
  }
  return (rlimits = `no C library with setrlimit(2) could be loaded (${failures.join("; ")})`);
}

/** What raiseOpenFileLimit did. */
export interface RaiseResult {
  /** The soft limit before (null: it could not be read). */
  readonly from: number | null;
  /** The soft limit now (null: it could not be read). */
  readonly to: number | null;
  /** Why it could not be raised, if it could not (then the caller logs it and goes on). */
  readonly error?: string;
}

const toNumber = (value: bigint): number => (value > BigInt(Number.MAX_SAFE_INTEGER) ? Infinity : Number(value));

/**
 * Raise the soft open-file limit to the hard limit (on macOS, to OPEN_MAX
 * when the hard limit itself is refused). Never lowers it, never throws.
 * Bun (1.4.5) already does the same when it starts, so under Bun this
 * usually finds nothing to do; it is here so that the limit does not rest
 * on the runtime's habit.
 */
export function raiseOpenFileLimit(): RaiseResult {
  const lib = loadRlimits();
  if (typeof lib === "string") return { from: null, to: null, error: lib };
  const now = lib.get();
  if (now === null) return { from: null, to: null, error: "getrlimit(RLIMIT_NOFILE) failed" };
  const { soft, hard } = now;
  if (soft >= hard) return { from: toNumber(soft), to: toNumber(soft) };
  if (lib.set(hard, hard)) return { from: toNumber(soft), to: toNumber(hard) };
  if (process.platform === "darwin" && soft < DARWIN_OPEN_MAX && lib.set(DARWIN_OPEN_MAX, hard)) return { from: toNumber(soft), to: toNumber(DARWIN_OPEN_MAX) };
  return { from: toNumber(soft), to: toNumber(soft), error: `setrlimit(RLIMIT_NOFILE) to the hard limit ${toNumber(hard)} failed` };
}

/** Set the soft open-file limit (tests: to lower it, which is always allowed). False when it cannot be set. */
export function setOpenFileSoftLimit(soft: number): boolean {
  const lib = loadRlimits();
  if (typeof lib === "string") return false;
  const now = lib.get();
  return now !== null && lib.set(BigInt(soft), now.hard);
}
