/**
 * What both kinds of `lockd serve` share (serve.ts: a single server;
 * coordinator.ts: one instance of a coordinated service): the daemon's
 * options from the parsed flags, signals relayed to the daemon, and one
 * sentence for a listener that cannot be opened.
 */
import { formatAddress } from "../net/address.ts";
import type { Logger } from "../log/logger.ts";
import type { Daemon, DaemonOptions } from "../server/daemon.ts";
import { ListenError } from "../server/daemon.ts";
import type { openFileLimit } from "../process/limits.ts";
import type { ServerTls } from "../server/server.ts";
import type { ShardIdentity } from "../shard/identity.ts";
import { VERSION } from "../version.ts";
import type { Options } from "./options/argv.ts";
import type { SERVE_OPTIONS } from "./config.ts";
import { ExitCode } from "./exit.ts";
import { DAEMON_WORDS } from "./words.ts";

export interface CoordinatedServe {
  readonly options: Options<typeof SERVE_OPTIONS>;
  readonly url: { readonly url: string; readonly from: string };
  readonly admin: { readonly token: string | null; readonly from: string };
  readonly log: Logger;
  readonly limit: ReturnType<typeof openFileLimit>;
  readonly shards: ShardIdentity;
  readonly maxSessions: number;
  readonly tls: ServerTls | undefined;
  readonly opsTls: { readonly cert: string; readonly key: string } | undefined;
}

/** What every `lockd serve` passes to its Daemon, with or without --coordinator. */
export function daemonOptions(c: Omit<CoordinatedServe, "url" | "limit">): DaemonOptions {
  const { options } = c;
  return {
    listen: options.listen,
    ops: options.ops,
    ioTimeoutMs: options.ioTimeout,
    maxSessions: c.maxSessions,
    ...(options.maxSessionsPerSource !== null ? { maxSessionsPerSource: options.maxSessionsPerSource } : {}),
    shutdownGraceMs: options.shutdownGrace,
    words: DAEMON_WORDS,
    ...(options.maxLease !== null ? { maxLeaseMs: options.maxLease } : {}),
    adminToken: c.admin.token,
    log: c.log,
    version: VERSION,
    ...(c.tls !== undefined ? { tls: c.tls } : {}),
    ...(c.opsTls !== undefined ? { opsTls: c.opsTls } : {}),
    opsLimits: { idleTimeoutMs: options.opsIdleTimeout },
    ...(options.opsAllowHost === undefined ? {} : { opsAllowHosts: options.opsAllowHost }),
    shards: c.shards,
  };
}

/** A second signal: stop now, without finishing the shutdown (EX_SOFTWARE). */
function forceExit(): never {
  process.exit(ExitCode.SOFTWARE);
}

/**
 * SIGINT and SIGTERM go to the daemon: the first shuts down, a second forces
 * the exit (a repeat of the first within Daemon's repeat window is the same
 * request, see Daemon.signal). Returns the undo.
 */
export function relaySignals(daemon: Daemon): () => void {
  const onSignal = (signal: NodeJS.Signals) => daemon.signal(signal, forceExit);
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return () => {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  };
}

/** A Daemon that could not start: a ListenError is said on stderr (exit 69); anything else is rethrown. */
export function listenFailed(error: unknown): number {
  if (!(error instanceof ListenError)) throw error;
  process.stderr.write(`lockd serve: ${listenFailure(error)}\n`);
  return ExitCode.UNAVAILABLE;
}

/** Why a listener could not be opened, in the same words for --listen and --ops. */
export function listenFailure(error: ListenError): string {
  const flag = error.which === "listen" ? "--listen" : "--ops";
  const cause = error.cause as (Error & { code?: string }) | undefined;
  const why: Record<string, string> = {
    EADDRINUSE: "address in use? (another lockd, or another program, listens there)",
    EADDRNOTAVAIL: "no network interface of this machine has that address",
    EACCES: "permission denied (ports below 1024 need privileges)",
  };
  const text = cause?.code !== undefined ? why[cause.code] : undefined;
  const reason = text === undefined ? (cause?.message ?? String(error.cause)) : `${text} [${cause!.code}]`;
  return `cannot listen on ${formatAddress(error.address)} (${flag}): ${reason}`;
}

