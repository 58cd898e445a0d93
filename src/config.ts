/**
 * Configuration: one table of options per command is the single source of
 * truth for flags, LOCKD_* environment variables, defaults, help text and
 * validation (a zod schema per option). Precedence: flag, then environment,
 * then default. Every bad value is reported, one line each, naming where it
 * came from, before anything starts.
 */
import { z } from "zod";
import { AddressError, parseAddress, parseAddressList, type Address } from "./address.ts";
import { isLogLevel, LOG_LEVEL_NAMES } from "./log.ts";
import { MAX_LEASE_MS, MAX_OWNER_LENGTH } from "./protocol/constants.ts";
import { DEFAULT_TOKEN_BLOCK } from "./server/tokens-file.ts";

// --- value types ------------------------------------------------------------

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "250ms", "5s", "1.5s", "2m", "1h", "1d", or a bare number of ms. NaN if malformed. */
export function parseDuration(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (match === null) return Number.NaN;
  return Math.round(Number(match[1]) * DURATION_UNITS[match[2] ?? "ms"]!);
}

/** Human form of a duration in ms, the inverse of parseDuration for round values. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of [["d", 86_400_000], ["h", 3_600_000], ["m", 60_000], ["s", 1000]] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

/** One address (see src/address.ts for the grammar). */
export type HostPort = Address;

/**
 * The placeholder `--help` shows for a value of each kind (HOST:PORT,
 * DURATION, FILE, N, ...): set by the schema factories below, so an option
 * built from them gets the right one without saying so.
 */
const PLACEHOLDERS = new WeakMap<z.ZodType<unknown, string>, string>();

function kind<T extends z.ZodType<unknown, string>>(placeholder: string, schema: T): T {
  PLACEHOLDERS.set(schema, placeholder);
  return schema;
}

/** The --help placeholder of an option: its own, else its schema's, else VALUE. */
export function placeholderOf(spec: OptionSpec): string {
  return spec.value ?? PLACEHOLDERS.get(spec.schema) ?? "VALUE";
}

export const duration = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  kind("DURATION", z.string().transform((text, ctx) => {
    const ms = parseDuration(text);
    if (Number.isNaN(ms)) {
      ctx.addIssue({ code: "custom", message: `"${text}" is not a duration (examples: 250ms, 5s, 2m)` });
      return z.NEVER;
    }
    if (ms < min || ms > max) {
      ctx.addIssue({ code: "custom", message: `${text} is out of range ${formatDuration(min)}..${formatDuration(max)}` });
      return z.NEVER;
    }
    return ms;
  }));

function addressSchema<T>(placeholder: string, parse: (text: string) => T) {
  return kind(
    placeholder,
    z.string().transform((text, ctx): T => {
      try {
        return parse(text);
      } catch (error) {
        if (!(error instanceof AddressError)) throw error;
        ctx.addIssue({ code: "custom", message: error.message });
        return z.NEVER;
      }
    }),
  );
}

/** One address to connect to: HOST:PORT, [IPv6]:PORT, or :PORT (host 127.0.0.1). */
export const hostPort = addressSchema("HOST:PORT", (text) => parseAddress(text));

/** One address to listen on: as hostPort, and port 0 picks a free port. */
export const listenAddress = addressSchema("HOST:PORT", (text) => parseAddress(text, { allowPortZero: true }));

/** Addresses to try in order: HOST:PORT[,HOST:PORT...]. */
export const hostPortList = addressSchema("HOST:PORT[,...]", (text) => parseAddressList(text));

export const count = (min: number, max: number) =>
  kind("N", z.string().transform((text, ctx) => {
    const n = /^\s*\d+\s*$/.test(text) ? Number(text) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      ctx.addIssue({ code: "custom", message: `"${text}" is not a whole number in ${min}..${max}` });
      return z.NEVER;
    }
    return n;
  }));

// --- option tables -------------------------------------------------------------

export interface OptionSpec {
  /** --flag */
  readonly flag: string;
  /** LOCKD_* variable, if the option can come from the environment. */
  readonly env?: string;
  /** Default as the user would type it; undefined when there is none. */
  readonly default?: string;
  readonly help: string;
  readonly schema: z.ZodType<unknown, string>;
  /** Placeholder in --help (default: the schema's kind, e.g. DURATION). */
  readonly value?: string;
}

export type OptionTable = Record<string, OptionSpec>;

/** The parsed value of every option of a table. */
export type Options<T extends OptionTable> = {
  -readonly [K in keyof T]: T[K]["default"] extends string ? z.output<T[K]["schema"]> : z.output<T[K]["schema"]> | undefined;
};

export const logLevel = kind("LEVEL", z.string().transform((text, ctx) => {
  const level = text.trim().toLowerCase();
  if (!isLogLevel(level)) {
    ctx.addIssue({ code: "custom", message: `"${text}" is not a log level (one of ${LOG_LEVEL_NAMES.join(", ")})` });
    return z.NEVER;
  }
  return level;
}));

/** "auto" (parsed as null: the caller decides), or a value of `schema`. */
export const autoOr = <T>(schema: z.ZodType<T, string>) =>
  kind(`${PLACEHOLDERS.get(schema) ?? "VALUE"}|auto`, z.string().transform((text, ctx): T | null => {
    if (text.trim() === "auto") return null;
    const result = schema.safeParse(text);
    if (result.success) return result.data;
    for (const issue of result.error.issues) ctx.addIssue({ code: "custom", message: `${issue.message} (or auto)` });
    return z.NEVER;
  }));

/** "off" (parsed as null: no limit), or a value of `schema`. */
export const offOr = <T>(schema: z.ZodType<T, string>) =>
  kind(`${PLACEHOLDERS.get(schema) ?? "VALUE"}|off`, z.string().transform((text, ctx): T | null => {
    if (text.trim() === "off") return null;
    const result = schema.safeParse(text);
    if (result.success) return result.data;
    for (const issue of result.error.issues) ctx.addIssue({ code: "custom", message: `${issue.message} (or off)` });
    return z.NEVER;
  }));

/** An admin token given inline: non-empty, no whitespace (it travels in an HTTP header). */
export const secret = kind("TOKEN", z.string().transform((text, ctx) => {
  if (!/^[\x21-\x7e]+$/.test(text)) {
    ctx.addIssue({ code: "custom", message: "the admin token must be non-empty printable ASCII without spaces" });
    return z.NEVER;
  }
  return text;
}));

/** A file path that must name something; the file is read later. */
export const path = kind("FILE", z.string().transform((text, ctx) => {
  if (text.trim() === "") {
    ctx.addIssue({ code: "custom", message: "an empty path" });
    return z.NEVER;
  }
  return text;
}));

/** A coordinator URL: non-empty, no whitespace (its scheme is checked at start). */
export const coordinatorUrl = kind("URL", z.string().transform((text, ctx) => {
  if (!/^\S+$/.test(text)) {
    ctx.addIssue({ code: "custom", message: "the coordinator URL must be non-empty, without spaces (example: postgres://lockd@db.internal:5432/lockd)" });
    return z.NEVER;
  }
  return text;
}));

/** A service name: 1..255 printable ASCII characters. */
export const serviceName = kind("NAME", z.string().refine((text) => /^[\x21-\x7e]{1,255}$/.test(text), "a service name is 1 to 255 printable ASCII characters without spaces"));

/** Where `lockd serve` puts its ops server. */
const OPS_LISTEN = {
  flag: "--ops",
  env: "LOCKD_OPS",
  default: "127.0.0.1:7701",
  help: "ops HTTP server (health, metrics, admin); port 0 picks a free one",
  schema: listenAddress,
} as const satisfies OptionSpec;

/** Where `lockd status` and the admin verbs find the ops server: one, or a list tried in order. */
const OPS_ADDRESSES = {
  flag: "--ops",
  env: "LOCKD_OPS",
  default: "127.0.0.1:7701",
  help: "ops HTTP server; a list is tried in order until one answers",
  schema: hostPortList,
} as const satisfies OptionSpec;

const ADMIN_TOKEN = {
  flag: "--admin-token",
  env: "LOCKD_ADMIN_TOKEN",
  help: "bearer token for admin endpoints (prefer the file form: flags show in ps)",
  schema: secret,
} as const satisfies OptionSpec;

const ADMIN_TOKEN_FILE = {
  flag: "--admin-token-file",
  env: "LOCKD_ADMIN_TOKEN_FILE",
  help: "file holding the admin token (trailing newline ignored)",
  schema: path,
} as const satisfies OptionSpec;

export const SERVE_OPTIONS = {
  listen: {
    flag: "--listen",
    env: "LOCKD_LISTEN",
    default: "127.0.0.1:7700",
    help: "lock protocol listener; port 0 picks a free one",
    schema: listenAddress,
  },
  ops: OPS_LISTEN,
  ioTimeout: {
    flag: "--io-timeout",
    env: "LOCKD_IO_TIMEOUT",
    default: "5s",
    help: "limit for one read or write: the first frame, the rest of a started frame, draining output",
    schema: duration(1, 3_600_000),
  },
  maxSessions: {
    flag: "--max-sessions",
    env: "LOCKD_MAX_SESSIONS",
    default: "auto",
    help: "live sessions beyond this are refused with OVERLOADED; auto is the open-file limit minus 256 kept for the process, ops connections and refusals",
    schema: autoOr(count(1, 100_000_000)),
  },
  maxSessionsPerSource: {
    flag: "--max-sessions-per-source",
    env: "LOCKD_MAX_SESSIONS_PER_SOURCE",
    default: "off",
    help: "live sessions from one client IP address beyond this are refused with OVERLOADED (for untrusted networks)",
    schema: offOr(count(1, 100_000_000)),
  },
  shutdownGrace: {
    flag: "--shutdown-grace",
    env: "LOCKD_SHUTDOWN_GRACE",
    default: "5s",
    help: "on SIGTERM/SIGINT, how long the ops server stays up after the sessions are closed",
    schema: duration(0, 3_600_000),
  },
  adminToken: ADMIN_TOKEN,
  adminTokenFile: ADMIN_TOKEN_FILE,
  logLevel: {
    flag: "--log-level",
    env: "LOCKD_LOG_LEVEL",
    default: "info",
    help: "debug, info, warn or error (debug logs every session: not for busy servers)",
    schema: logLevel,
  },
  dataDir: {
    flag: "--data-dir",
    env: "LOCKD_DATA_DIR",
    default: "./lockd-data",
    help: "durable state: the fencing-token floor (keep it: tokens must never go back)",
    schema: path,
  },
  tokenBlock: {
    flag: "--token-block",
    env: "LOCKD_TOKEN_BLOCK",
    default: String(DEFAULT_TOKEN_BLOCK),
    help: "tokens reserved per durable write of the floor; a crash skips at most this many",
    schema: count(1, 1_000_000_000_000),
  },
  tlsCert: {
    flag: "--tls-cert",
    env: "LOCKD_TLS_CERT",
    help: "PEM certificate chain file: serve the lock protocol over TLS (needs --tls-key)",
    schema: path,
  },
  tlsKey: {
    flag: "--tls-key",
    env: "LOCKD_TLS_KEY",
    help: "PEM private key file for --tls-cert",
    schema: path,
  },
  tlsClientCa: {
    flag: "--tls-client-ca",
    env: "LOCKD_TLS_CLIENT_CA",
    help: "PEM CA file: require client certificates signed by it (mutual TLS)",
    schema: path,
  },
  opsTlsCert: {
    flag: "--ops-tls-cert",
    env: "LOCKD_OPS_TLS_CERT",
    help: "PEM certificate chain file: serve the ops endpoints over HTTPS (needs --ops-tls-key)",
    schema: path,
  },
  opsTlsKey: {
    flag: "--ops-tls-key",
    env: "LOCKD_OPS_TLS_KEY",
    help: "PEM private key file for --ops-tls-cert",
    schema: path,
  },
  opsMaxConnections: {
    flag: "--ops-max-connections",
    env: "LOCKD_OPS_MAX_CONNECTIONS",
    default: "64",
    help: "ops connections open at once; more are answered 503 and closed at accept (each is a descriptor from the 256 kept beside sessions)",
    schema: count(1, 1024),
  },
  opsIdleTimeout: {
    flag: "--ops-idle-timeout",
    env: "LOCKD_OPS_IDLE_TIMEOUT",
    default: "5s",
    help: "close an ops connection after this long without a request, or with a request or answer stuck",
    schema: duration(100, 300_000),
  },
  coordinator: {
    flag: "--coordinator",
    env: "LOCKD_COORDINATOR",
    help: "PostgreSQL URL of the coordinator: run as one active of a service with standbys (prefer the file form for a URL with a password)",
    schema: coordinatorUrl,
  },
  coordinatorFile: {
    flag: "--coordinator-file",
    env: "LOCKD_COORDINATOR_FILE",
    help: "file holding the --coordinator URL (trailing newline ignored)",
    schema: path,
  },
  service: {
    flag: "--service",
    env: "LOCKD_SERVICE",
    default: "default",
    help: "with --coordinator: the service this instance serves (one active per service)",
    schema: serviceName,
  },
  coordinatorLease: {
    flag: "--coordinator-lease",
    env: "LOCKD_COORDINATOR_LEASE",
    default: "4s",
    help: "with --coordinator: a standby takes over after this long without a renewal; the active stops at 0.8 x",
    schema: duration(200, 600_000),
  },
} as const satisfies OptionTable;

/** `lockd status`: read-only, no token needed. */
export const STATUS_OPTIONS = {
  ops: OPS_ADDRESSES,
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

/** `lockd force-release`, `lockd kick`. */
export const ADMIN_OPTIONS = {
  ...STATUS_OPTIONS,
  adminToken: ADMIN_TOKEN,
  adminTokenFile: ADMIN_TOKEN_FILE,
} as const satisfies OptionTable;

/** `lockd run`. Short flags (-w, -n, -E) are flock(1)'s, mapped onto these in src/cli/run.ts. */
export const RUN_OPTIONS = {
  server: {
    flag: "--server",
    env: "LOCKD_SERVER",
    default: "127.0.0.1:7700",
    help: "lock server, or a list of them tried in order",
    schema: hostPortList,
  },
  lease: {
    flag: "--lease",
    env: "LOCKD_LEASE",
    default: "5s",
    help: "lease: the server gives the lock away after this much silence",
    schema: duration(1, MAX_LEASE_MS),
  },
  wait: {
    flag: "--wait",
    help: "give up waiting for the lock after this long (default: no limit)",
    schema: duration(0),
  },
  conflictExitCode: {
    flag: "--conflict-exit-code",
    default: "1",
    help: "exit code when --try finds the lock held",
    schema: count(0, 255),
  },
  owner: {
    flag: "--owner",
    env: "LOCKD_OWNER",
    help: "owner label shown to operators, default HOST/pid-PID",
    value: "LABEL",
    schema: z.string().refine((text) => new TextEncoder().encode(text).length <= MAX_OWNER_LENGTH, `owner must be at most ${MAX_OWNER_LENGTH} bytes of UTF-8`),
  },
  killAfter: {
    flag: "--kill-after",
    default: "10s",
    help: "on lock loss (and for processes COMMAND leaves behind): SIGTERM, then SIGKILL this long later",
    schema: duration(0),
  },
  tlsCa: {
    flag: "--tls-ca",
    env: "LOCKD_TLS_CA",
    help: "PEM CA file to verify the server's certificate; given, the claim uses TLS",
    schema: path,
  },
  tlsCert: {
    flag: "--tls-cert",
    env: "LOCKD_CLIENT_TLS_CERT",
    help: "PEM client certificate file, for servers that require mutual TLS (needs --tls-key)",
    schema: path,
  },
  tlsKey: {
    flag: "--tls-key",
    env: "LOCKD_CLIENT_TLS_KEY",
    help: "PEM private key file for --tls-cert",
    schema: path,
  },
} as const satisfies OptionTable;

// --- parsing ------------------------------------------------------------------------

export class ConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(problems.join("\n"));
    this.name = "ConfigError";
  }
}

export interface Parsed<T extends OptionTable> {
  readonly options: Options<T>;
  /** Arguments that are not options, in order (everything after `--` included). */
  readonly positionals: string[];
  readonly help: boolean;
  /** Where each option's value came from. */
  readonly sources: Record<keyof T, OptionSource>;
}

export type OptionSource = "flag" | "env" | "default" | "unset";

/**
 * Parse `argv` (flags as `--flag value` or `--flag=value`) and `env` against
 * `table`. Boolean flags are those in `switches`. Throws ConfigError listing
 * every problem.
 */
export function parseOptions<T extends OptionTable>(
  table: T,
  argv: readonly string[],
  env: Record<string, string | undefined>,
  switches: Record<string, string> = {},
): Parsed<T> & { switches: Set<string> } {
  const byFlag = new Map<string, string>();
  for (const [key, spec] of Object.entries(table)) byFlag.set(spec.flag, key);
  const raw = new Map<string, { value: string; from: string }>();
  const positionals: string[] = [];
  const on = new Set<string>();
  const problems: string[] = [];
  let help = false;

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg === "-h" || arg === "--help") {
      help = true;
      continue;
    }
    if (switches[arg] !== undefined) {
      on.add(switches[arg]);
      continue;
    }
    if (!arg.startsWith("-") || arg === "-") {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const key = byFlag.get(flag);
    if (key === undefined) {
      problems.push(`unknown option ${flag}`);
      continue;
    }
    let value: string | undefined;
    if (eq > 0) value = arg.slice(eq + 1);
    else if (i + 1 < argv.length && !looksLikeFlag(argv[i + 1]!)) value = argv[++i];
    if (value === undefined) {
      problems.push(`${flag} needs a value (write ${flag}=${placeholderOf(table[key]!)} for one that starts with -)`);
      continue;
    }
    raw.set(key, { value, from: flag });
  }

  const options: Record<string, unknown> = {};
  const sources: Record<string, OptionSource> = {};
  for (const [key, spec] of Object.entries(table)) {
    let source = raw.get(key);
    const fromEnv = spec.env === undefined ? undefined : env[spec.env];
    if (source === undefined && fromEnv !== undefined && fromEnv !== "") source = { value: fromEnv, from: spec.env! };
    if (source === undefined && spec.default !== undefined) source = { value: spec.default, from: "default" };
    sources[key] = source === undefined ? "unset" : source.from === spec.flag ? "flag" : source.from === "default" ? "default" : "env";
    if (source === undefined) {
      options[key] = undefined;
      continue;
    }
    const result = spec.schema.safeParse(source.value);
    if (result.success) options[key] = result.data;
    else for (const issue of result.error.issues) problems.push(`${source.from === spec.flag ? spec.flag : `${spec.flag} (from ${source.from})`}: ${issue.message}`);
  }
  if (problems.length > 0 && !help) throw new ConfigError(problems);
  return { options: options as Options<T>, positionals, help, switches: on, sources: sources as Record<keyof T, OptionSource> };
}

/** The column where a help row's text starts. */
const HELP_COLUMN = 32;

/** `--wait -n`: the next argument is another flag, not this one's value. */
function looksLikeFlag(arg: string): boolean {
  return arg.length > 1 && arg.startsWith("-") && !/^-\d/.test(arg);
}

/** One row of a help text, aligned with optionsHelp's rows: `helpRow("-h, --help", "this text")`. */
export function helpRow(left: string, text: string): string {
  const lead = `  ${left}`;
  return lead.length < HELP_COLUMN ? `${lead.padEnd(HELP_COLUMN)} ${text}` : `${lead}\n${" ".repeat(HELP_COLUMN + 1)}${text}`;
}

/** The options section of a --help text, generated from the table. */
export function optionsHelp(table: OptionTable): string {
  const rows = Object.values(table).map((spec) => {
    const left = `  ${spec.flag} ${placeholderOf(spec)}`;
    const extra = [spec.default !== undefined ? `default ${spec.default}` : "", spec.env !== undefined ? `env ${spec.env}` : ""]
      .filter(Boolean)
      .join("; ");
    // A flag too long for the column gets its text on the next line, aligned.
    return helpRow(left.slice(2), `${spec.help}${extra ? ` (${extra})` : ""}`);
  });
  return rows.join("\n");
}
