/** `lockd floor`: show or raise the fencing-token floor in a data directory (the server must be stopped). */
import { parseOptions, path, type OptionTable } from "../config.ts";
import { TokenStoreError, readFloor, writeFloor } from "../server/tokens-file.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./ops-client.ts";

export const FLOOR_OPTIONS = {
  dataDir: {
    flag: "--data-dir",
    env: "LOCKD_DATA_DIR",
    default: "./lockd-data",
    help: "the server's data directory",
    schema: path,
  },
} as const satisfies OptionTable;

export const FLOOR_HELP = `Usage: lockd floor [--data-dir DIR] [N]

Without N: prints the fencing-token floor stored in DIR (no token above it
has been issued; the next start issues floor+1 or later).
With N: raises the floor to N, so the next start issues tokens above N. Use
it when a data directory was lost: pick N above any token ever issued (for
example the last lockd_fencing_token_last you scraped, plus a margin). The
floor never goes down. Run it while the server is stopped.

Options:
  --data-dir DIR   the server's data directory (default ./lockd-data; env LOCKD_DATA_DIR)
  -h, --help       this text

Exit codes: 0 done; 64 bad arguments, or N below the current floor;
65 the stored floor is corrupt; 73 the directory cannot be written.
`;

export function floor(argv: readonly string[], env: Record<string, string | undefined>, out = process.stdout): number {
  const parsed = parseOptions(FLOOR_OPTIONS, argv, env);
  if (parsed.help) {
    out.write(FLOOR_HELP);
    return ExitCode.OK;
  }
  const { dataDir } = parsed.options;
  if (parsed.positionals.length > 1) throw new CliError("one floor value at most (lockd floor --help)", ExitCode.USAGE);
  try {
    const current = readFloor(dataDir);
    const wanted = parsed.positionals[0];
    if (wanted === undefined) {
      out.write(`${current}\n`);
      return ExitCode.OK;
    }
    const n = /^\d{1,16}$/.test(wanted) ? Number(wanted) : Number.NaN;
    if (!Number.isSafeInteger(n)) throw new CliError(`"${wanted}" is not a whole number up to 2^53-1`, ExitCode.USAGE);
    if (n < current) throw new CliError(`the floor is ${current}; it never goes down (tokens must never repeat)`, ExitCode.USAGE);
    writeFloor(dataDir, n);
    out.write(`floor ${current} -> ${n}\n`);
    return ExitCode.OK;
  } catch (error) {
    if (!(error instanceof TokenStoreError)) throw error;
    throw new CliError(error.message, error.kind === "corrupt" ? ExitCode.DATA_ERROR : ExitCode.CANT_CREATE);
  }
}
