/**
 * The option tables of `lockd status` and the admin verbs (force-release,
 * kick, with their preconditions), zod-free (text.ts) so that these commands load neither zod nor the
 * server's tables; and the admin-token options `lockd serve` shares.
 * Entries are OptionSpecs (argv.ts); src/cli/config.ts lists every table.
 */
import { DEFAULT_OPS_ADDRESS } from "../../net/address.ts";
import { parseFencingToken, parseSessionId } from "../../ops/admin.ts";
import type { OptionSpec, OptionTable } from "./argv.ts";
import { duration, path, secret, serverMap, textValue, ValueProblem } from "./text.ts";

export const ADMIN_TOKEN = {
  flag: "--admin-token",
  env: "LOCKD_ADMIN_TOKEN",
  help: "bearer token for admin endpoints (prefer the file form: flags show in ps)",
  schema: secret,
} as const satisfies OptionSpec;

export const ADMIN_TOKEN_FILE = {
  flag: "--admin-token-file",
  env: "LOCKD_ADMIN_TOKEN_FILE",
  help: "file holding the admin token (trailing newline ignored)",
  schema: path,
} as const satisfies OptionSpec;

/** `lockd status`: read-only, no token needed. `--ops` may be a map of shards' ops servers. */
export const STATUS_OPTIONS = {
  ops: {
    flag: "--ops",
    env: "LOCKD_OPS",
    default: DEFAULT_OPS_ADDRESS,
    help: "ops HTTP server (a list is tried in order), or each shard's: alpha=HOST:PORT;beta=HOST:PORT",
    schema: serverMap,
  },
  opsCa: {
    flag: "--ops-ca",
    env: "LOCKD_OPS_CA",
    help: "PEM CA file to verify an HTTPS ops server; given, the verbs speak HTTPS",
    schema: path,
  },
  timeout: {
    flag: "--timeout",
    env: "LOCKD_OPS_TIMEOUT",
    default: "5s",
    help: "give up on an ops server after this long (per address of a list)",
    schema: duration(1, 3_600_000),
  },
} as const satisfies OptionTable;

/**
 * A bad --token value as the refusal shows it: quoted when it looks like a
 * number or is short ("abc"); otherwise only its length, since the admin
 * token given for --token by mistake must not land on stderr (and in logs).
 */
function shownValue(text: string): string {
  if (/^[\d\s.,_+\-eExX]*$/.test(text) || text.length <= 6) return JSON.stringify(text.slice(0, 40));
  return `a ${text.length}-character value (not repeated: it may be a secret, such as the admin token)`;
}

/** `lockd force-release`, `lockd kick`. `--ops` may be a map too (the one LOCKD_OPS holds for status). */
export const ADMIN_OPTIONS = {
  ...STATUS_OPTIONS,
  adminToken: ADMIN_TOKEN,
  adminTokenFile: ADMIN_TOKEN_FILE,
} as const satisfies OptionTable;

/** The holder force-release means (no environment variable: a precondition is for one action, never a setting). */
export const FORCE_RELEASE_OPTIONS = {
  ...ADMIN_OPTIONS,
  token: {
    flag: "--token",
    help: "release the holder whose fencing token is N (lockd status shows it); none holds with it: exit 1, nothing released",
    value: "N",
    schema: textValue("N", (text) => {
      const token = parseFencingToken(text);
      if (token === null) throw new ValueProblem(`${shownValue(text)} is not a fencing token (a whole number 1..2^64-1, as lockd status shows the holder's); the admin token is --admin-token-file or --admin-token`);
      return token;
    }),
  },
  session: {
    flag: "--session",
    help: "release holder session ID (lockd status shows it); it holds NAME no more: exit 1, nothing released",
    value: "ID",
    schema: textValue("ID", (text) => {
      const id = parseSessionId(text);
      if (id === null) throw new ValueProblem(`"${text.slice(0, 40)}" is not a session id (a positive whole number)`);
      return id;
    }),
  },
} as const satisfies OptionTable;

/** The lock kick's session must be waiting for. */
export const KICK_OPTIONS = {
  ...ADMIN_OPTIONS,
  lock: {
    flag: "--lock",
    help: "kick only if the session waits for lock NAME; another lock: exit 1, nothing kicked",
    value: "NAME",
    // Checked by the server (400, exit 64), as NAME is.
    schema: textValue("NAME", (text) => text),
  },
} as const satisfies OptionTable;
