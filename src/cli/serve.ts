/** `lockd serve`: run the lock server and its ops server until SIGINT or SIGTERM. */
import { formatAddress } from "../net/address.ts";
import { parseOptions } from "./options/argv.ts";
import { helpRow, optionsHelp } from "./options/help.ts";
import { SERVE_OPTIONS } from "./config.ts";
import { Logger } from "../log/logger.ts";
import { resolveAdminToken } from "./secrets.ts";
import { Daemon } from "../server/daemon.ts";
import { openFileLimit, raiseOpenFileLimit } from "../process/limits.ts";
import { FileTokens, TokenStoreError } from "../tokens/file.ts";
import { LeasesFile } from "../tokens/leases.ts";
import { resolveCoordinatorUrl, serveCoordinated } from "./coordinator.ts";
import { daemonOptions, listenFailed, relaySignals } from "./serving.ts";
import { AddressError } from "../net/address.ts";
import { shardSettings } from "./shards.ts";
import type { ShardIdentity } from "../shard/identity.ts";
import { pairOf, readOptionFile, storeMessage } from "./files.ts";
import { VERSION } from "../version.ts";
import { ExitCode } from "./exit.ts";

export const SERVE_HELP = `Usage: lockd serve [options]

Runs the lock server and its ops HTTP server (health, readiness, Prometheus
metrics, lock view, admin actions; see docs/operations.md).

Stops on SIGINT or SIGTERM: readyz turns 503, the lock listener stops, every
session gets ERROR SHUTTING_DOWN and is closed, the ops server stays up for
--shutdown-grace, then the process exits 0. A server nobody called since it
started (no lock session opened, no ops request answered; probes and scrapes
count) skips the grace and exits at once; so does a standby. A second signal
exits at once with code 70. The same signal again within 1 s of the first
(monotonic clock) is not a second one: it is the same stop request arriving
twice, as when a signal sent to the whole process group (kill -INT -PGID,
timeout(1), systemd's KillMode=control-group) also reaches lockd through a
launcher that relays it (npm start, the npm bin shim). To force the exit,
send the signal again after that second, or send the other one (SIGINT
after SIGTERM, or the reverse).

Options (flag, then environment, then default):
${optionsHelp(SERVE_OPTIONS)}
${helpRow("-h, --help", "this text")}

Admin endpoints (force-release, kick) need a token: without one they answer
403. Flags beat the environment; giving both the token and the token file
on the same level (two flags, or two variables) is an error.

The data directory holds the fencing-token floor: keep it across restarts
(tokens continue above it). It also records the largest lease granted and,
at a clean stop, the names held: after a restart, no name is granted while
a holder of the last run may still believe it holds it (the lock-delay:
every name for 0.82 x the largest lease after a crash, only the names held
at a clean stop after one). --max-lease bounds it. A running server holds it exclusively (a lock
the kernel drops when the process dies): a second server on the same
directory exits with 75. See docs/operations.md.

With --reclaim-max-lease D, holders whose lease is at most D keep their
locks, with the same fencing tokens, across a clean restart (SIGTERM, then
start again on the same data directory: a rolling upgrade step): the stop
records them in the data directory and tells them to reclaim, and the next
start grants their reclaims while their names are held back by the
lock-delay (fresh claims of those names wait behind them). A crash is not
covered. D is kept in the data directory and never lowered; off (the
default) publishes nothing at the next stop. With --coordinator, the
coordinator row keeps the service's D (never lowered): a clean stop of the
active publishes its holders there and the next active grants their
reclaims; a step-down tells them to reclaim from the next active.

With --coordinator (a PostgreSQL URL), this instance is one of the active
and standbys of --service: a standby has no lock listener (its /readyz is
503) and takes over when the active's row goes unrenewed for
--coordinator-lease; tokens then come from the coordinator's row, not the
data directory. See docs/operations.md, "Running two or three instances".

Exit codes: 0 stopped cleanly; 64 bad options (or a --coordinator URL that
is not PostgreSQL); 65 the token floor or the lease record is corrupt, or
the coordinator's tables are another schema version; 66 a certificate or key file cannot be
read; 69 cannot listen, or the coordinator cannot be reached or refuses the login;
70 stopped by a second signal; 73 the data directory cannot be created or
written (a file in the way, no permission, read-only); 74 the token floor
could not be written while running; 75 another process (a running lockd
serve) holds the data directory.
`;

export async function serve(argv: readonly string[], env: Record<string, string | undefined>): Promise<number> {
  const parsed = parseOptions(SERVE_OPTIONS, argv, env);
  if (parsed.help) {
    process.stdout.write(SERVE_HELP);
    return ExitCode.OK;
  }
  if (parsed.positionals.length > 0) {
    process.stderr.write(`lockd serve: unexpected argument ${JSON.stringify(parsed.positionals[0])}\n`);
    return ExitCode.USAGE;
  }
  const options = parsed.options;
  const admin = resolveAdminToken(options, parsed.sources);
  const log = new Logger(options.logLevel);
  // The soft open-file limit up to the hard one (limits.ts): descriptors are what an ops flood and sessions share.
  const raised = raiseOpenFileLimit();
  if (raised.error !== undefined) log.warn("server.open_files_not_raised", "could not raise the open-file limit to its hard limit: going on with the soft limit", { error: raised.error, soft: raised.from });
  const limit = openFileLimit(options.opsMaxConnections); // the reserve grows with the ops connections expected
  // auto: what the open-file limit leaves for sessions (unbounded when the limit is unknown or unlimited).
  const capacity = limit.sessionCapacity ?? Infinity;
  const maxSessions = options.maxSessions ?? capacity;
  const tlsPair = pairOf(options.tlsCert, options.tlsKey, "--tls-cert", "--tls-key");
  if (options.tlsClientCa !== undefined && tlsPair === undefined) {
    process.stderr.write("lockd serve: --tls-client-ca needs --tls-cert and --tls-key\n");
    return ExitCode.USAGE;
  }
  const tls = tlsPair === undefined
    ? undefined
    : { ...tlsPair, ...(options.tlsClientCa !== undefined ? { clientCa: readOptionFile(options.tlsClientCa, "--tls-client-ca") } : {}) };
  const opsTls = pairOf(options.opsTlsCert, options.opsTlsKey, "--ops-tls-cert", "--ops-tls-key");
  let shards: ShardIdentity;
  try {
    shards = shardSettings(options.shard, options.shards, options.shardsGeneration);
  } catch (error) {
    if (!(error instanceof AddressError)) throw error;
    process.stderr.write(`lockd serve: ${error.message}\n`);
    return ExitCode.USAGE;
  }

  // --coordinator: one of the active and standbys of a service (src/cli/coordinator.ts).
  const coordinatorUrl = resolveCoordinatorUrl(options, parsed.sources);
  if (coordinatorUrl !== null) return serveCoordinated({ options, url: coordinatorUrl, admin, log, limit, maxSessions, tls, opsTls, shards });

  let tokens: FileTokens;
  try {
    tokens = FileTokens.open(options.dataDir, options.tokenBlock, (error) => {
      // No token can be issued safely any more: stop, so clients fail over.
      log.error("tokens.reserve_failed", "cannot reserve fencing tokens: stopping", { dataDir: options.dataDir, error: error.message });
      process.exit(ExitCode.IO_ERROR);
    });
  } catch (error) {
    if (!(error instanceof TokenStoreError)) throw error;
    process.stderr.write(`lockd serve: ${storeMessage(error, options.dataDir)}\n`);
    return storeExit(error);
  }
  // The last run's lease record: what this start owes its holders (the lock-delay), read under the directory's lock.
  let leases: LeasesFile;
  try {
    leases = LeasesFile.open(
      options.dataDir,
      performance.now(),
      (error) => {
        // A grant whose lease is not durable could outlive a crash unseen: stop, so clients fail over.
        log.error("leases.record_failed", "cannot record the largest lease: stopping", { dataDir: options.dataDir, error: error.message });
        process.exit(ExitCode.IO_ERROR);
      },
      { maxLeaseMs: options.reclaimMaxLease },
    );
  } catch (error) {
    tokens.abandon();
    if (!(error instanceof TokenStoreError)) throw error;
    process.stderr.write(`lockd serve: ${storeMessage(error, options.dataDir)}\n`);
    return storeExit(error);
  }

  let daemon: Daemon;
  try {
    daemon = new Daemon({ ...daemonOptions({ options, admin, log, maxSessions, tls, opsTls, shards }), tokens, leases });
  } catch (error) {
    tokens.abandon(); // nothing was reserved: the floor is as it was
    return listenFailed(error);
  }
  const unrelay = relaySignals(daemon);
  // Only now, with both listeners bound, reserve the first block and mark the run not clean
  // (both before the first grant): a start that fails burns none and leaves the record as it was.
  try {
    tokens.start();
    leases.start();
  } catch (error) {
    if (!(error instanceof TokenStoreError)) throw error;
    process.stderr.write(`lockd serve: ${storeMessage(error, options.dataDir)}\n`);
    await daemon.close();
    unrelay();
    return storeExit(error);
  }

  reclaimLog(log, leases, options.dataDir);
  log.info("server.listening", "lockd listening", {
    version: VERSION,
    listen: formatAddress({ host: daemon.server.hostname, port: daemon.server.port }),
    ops: formatAddress({ host: daemon.ops.hostname, port: daemon.ops.port }),
    ui: `${opsTls === undefined ? "http" : "https"}://${formatAddress({ host: daemon.ops.hostname, port: daemon.ops.port })}/ui`,
    ioTimeoutMs: options.ioTimeout,
    maxSessions: Number.isFinite(maxSessions) ? maxSessions : "unlimited",
    maxSessionsPerSource: options.maxSessionsPerSource ?? "off",
    shutdownGraceMs: options.shutdownGrace,
    adminToken: admin.token === null ? "none (admin endpoints answer 403)" : admin.from,
    logLevel: options.logLevel,
    dataDir: options.dataDir,
    tokensFrom: daemon.server.tokensLast + 1,
    maxLeaseMs: options.maxLease ?? "off",
    ...lockDelayFields(leases),
    ...reclaimFields(leases),
    shard: shards.shard ?? "none",
    shards: shards.shards.join(",") || "none",
    shardsGeneration: shards.generation,
    tls: tls === undefined ? "off" : tls.clientCa === undefined ? "on" : "mutual",
    opsTls: opsTls === undefined ? "off" : "on",
    opsMaxConnections: options.opsMaxConnections,
    opsIdleTimeoutMs: options.opsIdleTimeout,
    openFileLimit: { soft: limit.soft, hard: limit.hard, ...(raised.from !== null && raised.to !== null && raised.to > raised.from ? { raisedFrom: raised.from } : {}) },
    sessionCapacity: limit.sessionCapacity,
    pid: process.pid,
  });
  if (maxSessions > capacity) {
    log.warn("server.max_sessions_near_limit", "--max-sessions is near or above the open-file limit: accepts may fail before OVERLOADED can be sent", { maxSessions, openFileLimit: limit.soft });
  }

  await daemon.stopped;
  unrelay();
  return ExitCode.OK;
}

/** The startup line's account of the lock-delay this start owes the last run. */
function lockDelayFields(leases: LeasesFile): Record<string, unknown> {
  const view = leases.delay.view(performance.now());
  const last = leases.previous === null ? "none recorded" : leases.previous.clean ? "clean" : "not clean";
  if (view === null) return { lastStop: last, lockDelay: "none" };
  return { lastStop: last, lockDelayMs: view.remainingMs, lockDelayNames: view.everyName ? "every name" : view.names };
}

/** The startup line's account of reclaim: the cap in force, and the grants this start accepts reclaims of. */
function reclaimFields(leases: LeasesFile): Record<string, unknown> {
  const plan = leases.reclaim;
  if (plan.maxLeaseMs === null) return { reclaimMaxLeaseMs: "off" };
  return {
    reclaimMaxLeaseMs: plan.maxLeaseMs,
    reclaimPublished: plan.grants,
    ...(plan.grants > 0 ? { reclaimGraceMs: Math.max(0, Math.ceil(plan.graceEndsAt - performance.now())) } : {}),
  };
}

/** What reclaim does differently from the flag, said before the startup line. */
function reclaimLog(log: Logger, leases: LeasesFile, dataDir: string): void {
  const plan = leases.reclaim;
  if (plan.requestedMs !== null) {
    log.info("reclaim.max_lease_kept", "--reclaim-max-lease is below the one recorded in the data directory, which is never lowered: using the recorded one", {
      dataDir,
      requestedMs: plan.requestedMs,
      maxLeaseMs: plan.maxLeaseMs,
    });
  }
  if (!plan.publishes && plan.maxLeaseMs !== null) {
    log.info("reclaim.off_honouring", "reclaim is off: accepting the reclaims the last clean stop published (its holders were told to reclaim); this run's stop publishes none", {
      dataDir,
      grants: plan.grants,
      maxLeaseMs: plan.maxLeaseMs,
    });
  }
  if (plan.dropped !== null) {
    log.warn("reclaim.published_invalid", "the lease record's published grants are not all held back for their holders' leases: no reclaim is accepted this run", {
      dataDir,
      why: plan.dropped,
    });
  }
}

/** The exit code for a data directory that cannot be used. */
function storeExit(error: TokenStoreError): number {
  if (error.kind === "corrupt") return ExitCode.DATA_ERROR;
  if (error.kind === "busy") return ExitCode.TEMPFAIL;
  return ExitCode.CANT_CREATE;
}
