/**
 * The option tables of `lockd run` and `lockd shard-of`, zod-free (text.ts)
 * so that these commands load neither zod nor the server's tables.
 * Entries are OptionSpecs (argv.ts); src/cli/config.ts lists every table.
 */
import { DEFAULT_LEASE_MS } from "../../client/client.ts";
import { DEFAULT_LOCK_ADDRESS } from "../../net/address.ts";
import { MAX_LEASE_MS, MAX_LIMIT } from "../../protocol/constants.ts";
import type { OptionTable } from "./argv.ts";
import { count, duration, formatDuration, ownerLabel, path, serverMap } from "./text.ts";

/** `lockd run`. Short flags (-w, -n, -E) are flock(1)'s, mapped onto these in src/cli/run.ts. */
export const RUN_OPTIONS = {
  server: {
    flag: "--server",
    env: "LOCKD_SERVER",
    default: DEFAULT_LOCK_ADDRESS,
    help: "lock server, a list of them tried in order, or a map of shards: [gen=N;]alpha=HOST:PORT,...;beta=HOST:PORT",
    schema: serverMap,
  },
  lease: {
    flag: "--lease",
    env: "LOCKD_LEASE",
    default: formatDuration(DEFAULT_LEASE_MS),
    help: "lease: the server gives the lock away after this much silence",
    schema: duration(1, MAX_LEASE_MS),
  },
  wait: {
    flag: "--wait",
    help: "give up waiting for the lock after this long, with its unit: 30s, 500ms (default: no limit)",
    schema: duration(0, Number.MAX_SAFE_INTEGER, " (flock's -w counts seconds; lockd guesses no unit)"),
  },
  limit: {
    flag: "--limit",
    env: "LOCKD_LIMIT",
    default: "1",
    help: `a semaphore of N permits (1..${MAX_LIMIT}): up to N runs hold NAME at once, each in its own slot (LOCKD_SLOT); every run of NAME must use the same N. 1: an exclusive lock`,
    schema: count(1, MAX_LIMIT),
  },
  conflictExitCode: {
    flag: "--conflict-exit-code",
    default: "1",
    help: "exit code when --try finds the lock held or held back by a lock-delay",
    schema: count(0, 255),
  },
  owner: {
    flag: "--owner",
    env: "LOCKD_OWNER",
    help: "owner label shown to operators, default HOST/pid-PID",
    value: "LABEL",
    schema: ownerLabel,
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

/** `lockd shard-of`: the server map of `lockd run`. */
export const SHARD_OF_OPTIONS = { server: RUN_OPTIONS.server } as const satisfies OptionTable;
