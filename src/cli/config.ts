/**
 * The option tables of the `lockd` commands. Each entry is an OptionSpec
 * (src/cli/options/argv.ts): flag, LOCKD_* variable, default, help and the
 * schema of its value; `--help` is laid out from them
 * (src/cli/options/help.ts). Here: `lockd serve`'s and `lockd floor`'s,
 * whose values are zod schemas (src/cli/options/values.ts). The client
 * commands' tables live beside the parser (src/cli/options/run-options.ts,
 * ops-options.ts), zod-free, so that `lockd run` and the ops verbs load
 * neither zod nor this file; COMMAND_OPTIONS lists every table.
 */
import { z } from "zod/mini";
import { DEFAULT_LOCK_ADDRESS, DEFAULT_OPS_ADDRESS } from "../net/address.ts";
import { DEFAULT_OPS_CONNECTIONS, DEFAULT_OPS_IDLE_TIMEOUT_MS, RESERVED_FDS } from "../process/limits.ts";
import { MAX_GENERATION } from "../shard/map.ts";
import type { OptionSpec, OptionTable } from "./options/argv.ts";
import { ADMIN_OPTIONS, ADMIN_TOKEN, ADMIN_TOKEN_FILE, FORCE_RELEASE_OPTIONS, KICK_OPTIONS, STATUS_OPTIONS } from "./options/ops-options.ts";
import { RUN_OPTIONS, SHARD_OF_OPTIONS } from "./options/run-options.ts";
import { advertisedAddress, autoOr, coordinatorUrl, count, duration, formatDuration, hostNames, listenAddress, logLevel, offOr, path, serviceName } from "./options/values.ts";

export { ADMIN_OPTIONS, FORCE_RELEASE_OPTIONS, KICK_OPTIONS, RUN_OPTIONS, SHARD_OF_OPTIONS, STATUS_OPTIONS };

/** Where `lockd serve` puts its ops server. */
const OPS_LISTEN = {
  flag: "--ops",
  env: "LOCKD_OPS",
  default: DEFAULT_OPS_ADDRESS,
  help: "ops HTTP server (health, metrics, admin); port 0 picks a free one",
  schema: listenAddress,
} as const satisfies OptionSpec;

export const SERVE_OPTIONS = {
  listen: {
    flag: "--listen",
    env: "LOCKD_LISTEN",
    default: DEFAULT_LOCK_ADDRESS,
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
    help: `live sessions beyond this are refused with OVERLOADED; auto is the open-file limit minus ${RESERVED_FDS} kept for the process, ops connections and refusals`,
    schema: autoOr(count(1, 100_000_000)),
  },
  maxSessionsPerSource: {
    flag: "--max-sessions-per-source",
    env: "LOCKD_MAX_SESSIONS_PER_SOURCE",
    default: "off",
    help: "live sessions from one client IP address beyond this are refused with OVERLOADED (for untrusted networks)",
    schema: offOr(count(1, 100_000_000)),
  },
  maxLease: {
    flag: "--max-lease",
    env: "LOCKD_MAX_LEASE",
    default: "off",
    help: "an ACQUIRE with a longer lease is refused with BAD_REQUEST; bounds the lock-delay after a failover or an unclean restart (0.82 x the largest lease in use)",
    schema: offOr(duration(1, 0xffff_ffff)),
  },
  reclaimMaxLease: {
    flag: "--reclaim-max-lease",
    env: "LOCKD_RECLAIM_MAX_LEASE",
    default: "off",
    help: "holders with leases up to this keep their locks and tokens across a clean restart on the data directory (recorded there, never lowered); with --coordinator, the service's cap is kept in the coordinator row and holders also keep their locks through a clean stop or step-down of the active",
    schema: offOr(duration(1, 0xffff_ffff)),
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
    help: "durable state: the fencing-token floor (keep it: tokens must never go back) and the lease record of the lock-delay",
    schema: path,
    value: "DIR",
  },
  tokenBlock: {
    flag: "--token-block",
    env: "LOCKD_TOKEN_BLOCK",
    default: "100000",
    help: "tokens reserved per durable write of the floor; a crash skips at most this many",
    schema: count(1, 1_000_000_000_000),
  },
  shard: {
    flag: "--shard",
    env: "LOCKD_SHARD",
    help: "this server's shard of --shards: ACQUIREs for names of other shards get ERROR WRONG_SHARD",
    value: "NAME",
    schema: z.string(),
  },
  shards: {
    flag: "--shards",
    env: "LOCKD_SHARDS",
    help: "every shard's name (alpha,beta), or the clients' whole server map (gen=N;alpha=HOST:PORT;beta=HOST:PORT)",
    value: "NAMES|MAP",
    schema: z.string(),
  },
  shardsGeneration: {
    flag: "--shards-generation",
    env: "LOCKD_SHARDS_GENERATION",
    help: `the map's generation, 0..${MAX_GENERATION}: raise it at every change of the map (tokens are generation * 2^48 + counter)`,
    schema: count(0, MAX_GENERATION),
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
    default: String(DEFAULT_OPS_CONNECTIONS),
    help: "ops connections expected at once (probes, scrapers, pages): --max-sessions auto keeps this many descriptors aside for them; the ops server refuses none beyond it",
    schema: count(1, 1024),
  },
  opsAllowHost: {
    flag: "--ops-allow-host",
    env: "LOCKD_OPS_ALLOW_HOST",
    help: "DNS names the ops server answers for (the Host of a request: an ingress, this host's name); IP addresses, localhost and the --advertise-ops name always; others get 421 (probes are answered whatever their Host)",
    schema: hostNames,
  },
  opsIdleTimeout: {
    flag: "--ops-idle-timeout",
    env: "LOCKD_OPS_IDLE_TIMEOUT",
    default: formatDuration(DEFAULT_OPS_IDLE_TIMEOUT_MS),
    help: "close an ops connection after this long with no byte either way after a request (whole seconds, 1s..255s; checked every 4 s)",
    schema: duration(1000, 255_000),
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
  advertiseOps: {
    flag: "--advertise-ops",
    env: "LOCKD_ADVERTISE_OPS",
    help: "with --coordinator: the ops address the active names in the coordinator row, for standbys to show (not a wildcard); default: the --ops address unless it binds a wildcard (0.0.0.0, ::)",
    schema: advertisedAddress,
  },
} as const satisfies OptionTable;

/** `lockd floor`: the data directory of `lockd serve`. */
export const FLOOR_OPTIONS = {
  dataDir: { ...SERVE_OPTIONS.dataDir, help: "the server's data directory", value: "DIR" },
} as const satisfies OptionTable;

/** Every command's table, by command (test/cli/durations.test.ts walks them). */
export const COMMAND_OPTIONS = {
  serve: SERVE_OPTIONS,
  run: RUN_OPTIONS,
  status: STATUS_OPTIONS,
  "force-release": FORCE_RELEASE_OPTIONS,
  kick: KICK_OPTIONS,
  floor: FLOOR_OPTIONS,
  "shard-of": SHARD_OF_OPTIONS,
} as const satisfies Record<string, OptionTable>;
