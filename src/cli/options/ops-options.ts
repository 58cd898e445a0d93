/**
 * The option tables of `lockd status` and the admin verbs (force-release,
 * kick), zod-free (text.ts) so that these commands load neither zod nor the
 * server's tables; and the admin-token options `lockd serve` shares.
 * Entries are OptionSpecs (argv.ts); src/cli/config.ts lists every table.
 */
import { DEFAULT_OPS_ADDRESS } from "../../net/address.ts";
import type { OptionSpec, OptionTable } from "./argv.ts";
import { duration, path, secret, serverMap } from "./text.ts";

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

/** `lockd force-release`, `lockd kick`. `--ops` may be a map too (the one LOCKD_OPS holds for status). */
export const ADMIN_OPTIONS = {
  ...STATUS_OPTIONS,
  adminToken: ADMIN_TOKEN,
  adminTokenFile: ADMIN_TOKEN_FILE,
} as const satisfies OptionTable;
