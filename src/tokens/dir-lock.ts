/**
 * DirLock: one server per data directory, enforced by the kernel.
 *
 * `<data-dir>/lock` is opened and locked with flock(2) (LOCK_EX | LOCK_NB).
 * The kernel drops the lock when the process dies, however it dies (SIGKILL,
 * OOM, power cut of a VM): there is no stale pid file to clean up, and a
 * restarted server gets the directory at once. The file's contents (the
 * holder's pid, host and start time) are only for the message a second
 * server prints; the lock is the flock, not the text.
 *
 * Bun's node:fs has no flock, so it is called from the C library through
 * bun:ffi (this works in the `bun build --compile` binary too). Where no C
 * library with flock can be loaded the directory cannot be locked and
 * `acquire` refuses with a message saying so, rather than run unguarded: two
 * servers on one directory can make fencing tokens go back.
 *
 * flock locks belong to the open file description, not to the process: a
 * second `acquire` in the same process conflicts too, and closing another
 * descriptor of the same file does not drop the lock (fcntl locks would).
 * Like all flock locks they are advisory and local: they do not protect a
 * directory on a network file system shared by two machines.
 */
import { dlopen, FFIType, read } from "bun:ffi";
import { closeSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";

const FILE = "lock";
const LOCK_SH = 1;
const LOCK_EX = 2;
const LOCK_NB = 4;

export class DirLockError extends Error {
  constructor(
    message: string,
    /** "held": another process holds it; "unsupported": flock cannot be called here; "io": the file cannot be opened. */
    readonly kind: "held" | "unsupported" | "io",
    /** The holder's pid as it recorded it ("held" only; null when unrecorded). */
    readonly holderPid: number | null = null,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "DirLockError";
  }
}

interface Libc {
  flock(fd: number, operation: number): number;
  errno(): number;
  readonly wouldBlock: number;
}

/** The C libraries tried, by platform: glibc, musl (Alpine), macOS, FreeBSD. */
const LIBC_NAMES: Record<string, readonly string[]> = {
  linux: ["libc.so.6", "libc.musl-x86_64.so.1", "libc.musl-aarch64.so.1", "/lib/ld-musl-x86_64.so.1", "/lib/ld-musl-aarch64.so.1", "libc.so"],
  darwin: ["libc.dylib", "/usr/lib/libSystem.B.dylib"],
  freebsd: ["libc.so.7"],
};
/** EWOULDBLOCK by platform. */
const WOULD_BLOCK: Record<string, number> = { linux: 11, darwin: 35, freebsd: 35 };

let libc: Libc | string | undefined;

/** Load flock from the C library once; a string says why it cannot be. */
function loadLibc(): Libc | string {
  if (libc !== undefined) return libc;
  const names = LIBC_NAMES[process.platform] ?? [];
  if (names.length === 0) return (libc = `flock(2) is not supported on ${process.platform}`);
  const errnoSymbol = process.platform === "linux" ? "__errno_location" : "__error";
  const failures: string[] = [];
  for (const name of names) {
    try {
      const lib = dlopen(name, {
        flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
        [errnoSymbol]: { args: [], returns: FFIType.ptr },
      });
      const flock = lib.symbols.flock as (fd: number, operation: number) => number;
      const errnoAt = lib.symbols[errnoSymbol] as () => number | null;
      return (libc = {
        flock,
        errno: () => {
          const at = errnoAt();
          return at === null ? 0 : read.i32(at, 0);
        },
        wouldBlock: WOULD_BLOCK[process.platform] ?? 11,
      });
    } catch (error) {
      failures.push(`${name}: ${(error as Error).message}`);
    }
  }
  return (libc = `no C library with flock(2) could be loaded (${failures.join("; ")})`);
}

/** The pid a holder recorded in `<dir>/lock`, or null. */
function recordedPid(path: string): number | null {
  try {
    const match = /^pid=(\d+)/.exec(readFileSync(path, "utf8"));
    return match === null ? null : Number(match[1]);
  } catch {
    return null;
  }
}

function heldMessage(dir: string, pid: number | null): string {
  const who = pid === null ? "another process" : `another process (pid ${pid})`;
  return `the data directory ${dir} is in use by ${who}: one data directory serves one lockd server at a time`;
}

export class DirLock {
  private constructor(
    readonly dir: string,
    private fd: number | null,
  ) {}

  /**
   * Lock `dir` (which must exist) for this process, recording our pid in the
   * lock file. Throws DirLockError: "held" names the holder's pid.
   */
  static acquire(dir: string): DirLock {
    const lib = loadLibc();
    if (typeof lib === "string") throw new DirLockError(`cannot lock the data directory ${dir}: ${lib}`, "unsupported");
    const path = join(dir, FILE);
    let fd: number;
    try {
      fd = openSync(path, "a+", 0o644); // O_RDWR|O_CREAT|O_APPEND: never truncates a holder's record before we hold the lock
    } catch (error) {
      throw new DirLockError(`cannot open the lock file ${path}: ${(error as Error).message}`, "io", null, { cause: error });
    }
    if (lib.flock(fd, LOCK_EX | LOCK_NB) !== 0) {
      const errno = lib.errno();
      closeSync(fd);
      if (errno === lib.wouldBlock || errno === 0) {
        const pid = recordedPid(path);
        throw new DirLockError(heldMessage(dir, pid), "held", pid);
      }
      throw new DirLockError(`cannot lock ${path}: flock failed (errno ${errno})`, "io");
    }
    try {
      ftruncateSync(fd, 0);
      writeSync(fd, `pid=${process.pid} host=${hostname()} since=${new Date().toISOString()}\n`);
    } catch {
      // The record is informational; the flock is what holds the directory.
    }
    return new DirLock(dir, fd);
  }

  /**
   * Whether a process holds `dir` now: its pid (or 0 when unrecorded), or
   * null when it is free (or cannot be checked). Takes a shared lock for an
   * instant, so it never blocks a holder; creates nothing.
   */
  static holder(dir: string): number | null {
    const lib = loadLibc();
    if (typeof lib === "string") return null;
    const path = join(dir, FILE);
    let fd: number;
    try {
      fd = openSync(path, "r");
    } catch {
      return null; // no lock file: no server ever ran here (or it cannot be read)
    }
    try {
      if (lib.flock(fd, LOCK_SH | LOCK_NB) === 0) return null;
      return recordedPid(path) ?? 0;
    } finally {
      closeSync(fd); // drops the shared lock if we got it
    }
  }

  get held(): boolean {
    return this.fd !== null;
  }

  /** Drop the lock (closing the descriptor releases it). Idempotent. */
  release(): void {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    closeSync(fd);
  }
}
