/** Exit codes of the `lockd` command (sysexits-style where a meaning exists). */
export const ExitCode = {
  OK: 0,
  /** Generic failure. */
  FAILURE: 1,
  /** EX_USAGE: bad flags or arguments. */
  USAGE: 64,
  /** EX_UNAVAILABLE: the server cannot be reached, or cannot listen. */
  UNAVAILABLE: 69,
  /** EX_DATAERR: `lockd serve`: the token floor in the data directory is corrupt. */
  DATA_ERROR: 65,
  /** EX_NOINPUT: a file an option names (certificate, key, token file) cannot be read. */
  NO_INPUT: 66,
  /** EX_SOFTWARE: internal error; also the exit of a forced (second-signal) stop. */
  SOFTWARE: 70,
  /** EX_CANTCREAT: `lockd serve`: the data directory cannot be created or written. */
  CANT_CREATE: 73,
  /** EX_IOERR: `lockd serve`: the token floor could not be written while running (the server stops). */
  IO_ERROR: 74,
  /**
   * EX_TEMPFAIL: try again later. `lockd run`: --wait passed without the
   * lock. `lockd serve`, `lockd floor N`: a running server holds the data directory.
   */
  TEMPFAIL: 75,
  /**
   * `lockd run`: the lock was lost while the command ran (the command was
   * sent SIGTERM). Borrowed from EX_PROTOCOL: the remote end ended our claim.
   */
  LOCK_LOST: 76,
  /**
   * `lockd run`: the server ended the claim while it waited (an operator's
   * KICK): COMMAND never ran. (76 is for a lock lost while COMMAND ran.)
   */
  CLAIM_ENDED: 79,
  /**
   * EX_CONFIG: `lockd status` with a shard map: an ops server is not the
   * shard the map says it is (or not a shard at all, or of another map).
   */
  WRONG_SHARD: 78,
  /** EX_NOPERM: the ops server refused the admin token (or has none configured). */
  NOPERM: 77,
  /** `lockd run`: the command could not be started (as in shells). */
  CANNOT_EXECUTE: 126,
  COMMAND_NOT_FOUND: 127,
} as const;

/**
 * Ending the CLI's process without losing its last output lines.
 *
 * Once process.stdout or process.stderr is a pipe, Bun writes it without
 * blocking (it sets O_NONBLOCK) and keeps in memory what the pipe cannot
 * take yet; process.exit() drops that memory. A server whose log goes to a
 * slow reader (a log shipper, journald under load, any full pipe) lost its
 * last lines that way, "token floor saved" and "stopped" among them.
 * Measured with Bun 1.4: 5,001 lines into a pipe first read 0.3 s later,
 * process.exit() delivered 592 of them, an exit at the end of the event
 * loop all 5,001.
 *
 * So commands end that way: the exit code is set and the process exits when
 * the event loop is empty, which includes the pending writes. A bound keeps
 * a reader that never reads (or a handle left open by mistake) from holding
 * the process: after `boundMs` it exits anyway, with the same code.
 */
export const EXIT_DRAIN_BOUND_MS = 2_000;

export function exitWhenDrained(code: number, boundMs: number = EXIT_DRAIN_BOUND_MS): void {
  process.exitCode = code;
  const now = () => process.exit(code);
  setTimeout(now, boundMs).unref();
  // The command has ended: a stop signal while the output drains means "stop
  // waiting", not a death by that signal that would replace the exit code.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, now);
}
