/** Exit codes of the `lockd` command (sysexits-style where a meaning exists). */
export const ExitCode = {
  OK: 0,
  /** Generic failure. */
  FAILURE: 1,
  /** EX_USAGE: bad flags or arguments. */
  USAGE: 64,
  /** EX_UNAVAILABLE: the server cannot be reached, or cannot listen. */
  UNAVAILABLE: 69,
  /** EX_SOFTWARE: internal error; also the exit of a forced (second-signal) stop. */
  SOFTWARE: 70,
  /** EX_TEMPFAIL: try again later. */
  TEMPFAIL: 75,
  /** EX_NOPERM: the ops server refused the admin token (or has none configured). */
  NOPERM: 77,
} as const;
