/** `lockd floor`: show or raise the fencing-token floor in a data directory (the server must be stopped). */
import { FLOOR_OPTIONS } from "./config.ts";
import { parseOptions } from "./options/argv.ts";
import { helpRow, optionsHelp } from "./options/help.ts";
import { DirLock } from "../tokens/dir-lock.ts";
import { TokenStoreError, lockDataDir, readFloor, writeFloor } from "../tokens/file.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";
import { storeMessage } from "./files.ts";

export const FLOOR_HELP = `Usage: lockd floor [--data-dir DIR] [N]

Without N: prints the fencing-token floor stored in DIR (no token above it
has been issued; the next start issues floor+1 or later).
With N: raises the floor to N, creating DIR if it is missing; the next
start then issues tokens above N. Use it when a data directory was lost:
pick N above any token ever issued, the highest you can find (for
example the last lockd_fencing_token_last you scraped, plus a margin). The
floor never goes down. Raising it needs the server stopped: while a server
holds DIR, lockd floor N refuses (exit 75), since that server would write
its own floor over N when it stops.

Options:
${optionsHelp(FLOOR_OPTIONS)}
${helpRow("-h, --help", "this text")}

Exit codes: 0 done; 64 bad arguments, or N below the current floor;
65 the stored floor is corrupt; 73 the directory cannot be written;
75 a running server holds the directory.
`;

export function floor(argv: readonly string[], env: Record<string, string | undefined>, out = process.stdout, err = process.stderr): number {
  const parsed = parseOptions(FLOOR_OPTIONS, argv, env);
  if (parsed.help) {
    out.write(FLOOR_HELP);
    return ExitCode.OK;
  }
  const { dataDir } = parsed.options;
  if (parsed.positionals.length > 1) throw new CliError("one floor value at most (lockd floor --help)", ExitCode.USAGE);
  try {
    const wanted = parsed.positionals[0];
    if (wanted === undefined) {
      const current = readFloor(dataDir);
      const holder = DirLock.holder(dataDir);
      if (holder !== null) {
        err.write(`lockd floor: a server (${holder === 0 ? "pid unknown" : `pid ${holder}`}) holds ${dataDir}: this is the end of the block it reserved; it records the last token it issued when it stops\n`);
      }
      out.write(`${current}\n`);
      return ExitCode.OK;
    }
    const n = /^\d{1,16}$/.test(wanted) ? Number(wanted) : Number.NaN;
    if (!Number.isSafeInteger(n)) throw new CliError(`"${wanted}" is not a whole number up to 2^53-1`, ExitCode.USAGE);
    // Hold the directory as a server would, so no server starts (or runs) while we write.
    const lock = lockDataDir(dataDir);
    try {
      const current = readFloor(dataDir);
      if (n < current) throw new CliError(`the floor is ${current}; it never goes down (tokens must never repeat)`, ExitCode.USAGE);
      writeFloor(dataDir, n);
      out.write(`floor ${current} -> ${n}\n`);
      return ExitCode.OK;
    } finally {
      lock.release();
    }
  } catch (error) {
    if (!(error instanceof TokenStoreError)) throw error;
    if (error.kind === "busy") throw new CliError(`${error.message}; stop that server first (it would write its own floor over this one when it stops)`, ExitCode.TEMPFAIL);
    throw new CliError(storeMessage(error, dataDir), error.kind === "corrupt" ? ExitCode.DATA_ERROR : ExitCode.CANT_CREATE);
  }
}
