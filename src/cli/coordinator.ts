/**
 * `lockd serve --coordinator`: the URL (inline or from a file, like the
 * admin token), the instance id, and the store opened and checked before
 * anything listens. Every problem is one line and an exit code.
 */
import { formatAddress } from "../net/address.ts";
import { hostname } from "node:os";
import { ConfigError, type OptionSource } from "./options/argv.ts";
import { type CoordinatorFlags, type ReadFile, resolveCoordinatorSource } from "./secrets.ts";
import { CoordinatorConfigError, PgCoordinatorStore, redactUrl } from "../failover/store.ts";
import { asynchronousWarning } from "../failover/replication.ts";
import { Daemon } from "../server/daemon.ts";
import { NO_SHARDS } from "../shard/identity.ts";
import { activeHolder, type HolderMap, holderMapOf, MAX_ADVERTISED_OPS, ownMapOf, releasedHolder } from "../failover/holder.ts";
import { readFloor, TokenStoreError } from "../tokens/file.ts";
import { VERSION } from "../version.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";
import { SHARD_WORDS } from "./words.ts";
import { type CoordinatedServe, daemonOptions, listenFailed, relaySignals } from "./serving.ts";

/**
 * The coordinator URL and where it came from, or null without one. Flags
 * beat the environment; on the same level the inline URL and the file are
 * mutually exclusive.
 */
export function resolveCoordinatorUrl(
  options: CoordinatorFlags,
  sources: {
    readonly coordinator: OptionSource;
    readonly coordinatorFile: OptionSource;
    readonly service?: OptionSource;
    readonly coordinatorLease?: OptionSource;
    readonly advertiseOps?: OptionSource;
  },
  read?: ReadFile,
): { url: string; from: string } | null {
  const url = resolveCoordinatorSource(options, sources, read);
  if (url === null) {
    // --service and --coordinator-lease mean nothing alone: say so rather than run a single server.
    const stray = [
      ...(sources.service === "flag" || sources.service === "env" ? [sources.service === "flag" ? "--service" : "LOCKD_SERVICE"] : []),
      ...(sources.coordinatorLease === "flag" || sources.coordinatorLease === "env" ? [sources.coordinatorLease === "flag" ? "--coordinator-lease" : "LOCKD_COORDINATOR_LEASE"] : []),
      ...(sources.advertiseOps === "flag" || sources.advertiseOps === "env" ? [sources.advertiseOps === "flag" ? "--advertise-ops" : "LOCKD_ADVERTISE_OPS"] : []),
    ];
    if (stray.length > 0) throw new ConfigError([`${stray.join(" and ")} need${stray.length === 1 ? "s" : ""} --coordinator (or LOCKD_COORDINATOR, LOCKD_COORDINATOR_FILE)`]);
  }
  return url;
}

/** host/pid-N/random: unique per process, readable in the coordinator table. */
export function instanceId(): string {
  const random = Array.from(crypto.getRandomValues(new Uint8Array(4)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hostname()}/pid-${process.pid}/${random}`.slice(0, 255);
}

/** Open and check the store; a problem becomes a CliError with its exit code. */
export async function openCoordinator(
  url: string,
  service: string,
  instance: string,
  leaseMs: number,
  block: number,
  map: HolderMap = holderMapOf(NO_SHARDS),
  reclaimMaxLeaseMs: number | null = null,
): Promise<PgCoordinatorStore> {
  try {
    return await PgCoordinatorStore.open({
      url,
      service,
      instance: activeHolder(instance, map),
      releasedHolder: releasedHolder(map),
      leaseMs,
      block,
      connectTimeoutS: Math.max(1, Math.ceil(leaseMs / 1000)),
      ...(reclaimMaxLeaseMs === null ? {} : { reclaimMaxLeaseMs }),
    });
  } catch (error) {
    if (!(error instanceof CoordinatorConfigError)) throw error;
    const code = error.kind === "usage" ? ExitCode.USAGE : error.kind === "schema" ? ExitCode.DATA_ERROR : ExitCode.UNAVAILABLE;
    // A URL that is wrong as such is the flag's fault: say which.
    throw new CliError(error.kind === "usage" ? `--coordinator: ${error.message}` : error.message, code);
  }
}


/**
 * `lockd serve --coordinator`: open and check the coordinator, start the
 * daemon with its role layer, log the startup line (with the role, once the
 * coordinator has answered), and run until stopped. The flags were parsed
 * by serve.ts; this is its second half for a coordinated service.
 */
export async function serveCoordinated(c: CoordinatedServe): Promise<number> {
  const { options, log } = c;
  // Tokens come from the coordinator's row. A data directory's floor (a server that ran
  // without --coordinator before) seeds the row when this instance creates it.
  let initialFloor: number;
  try {
    initialFloor = readFloor(options.dataDir);
  } catch (error) {
    if (!(error instanceof TokenStoreError)) throw error;
    process.stderr.write(`lockd serve: ${error.message}\n`);
    return ExitCode.DATA_ERROR;
  }
  // The active names its ops address in the row (failover/holder.ts advertisedOps), which keeps room for the instance id and map.
  const advertiseOps = options.advertiseOps === undefined ? undefined : formatAddress(options.advertiseOps);
  if (advertiseOps !== undefined && advertiseOps.length > MAX_ADVERTISED_OPS) {
    process.stderr.write(`lockd serve: --advertise-ops: ${JSON.stringify(advertiseOps)} is longer than ${MAX_ADVERTISED_OPS} characters (the coordinator row keeps room for the instance id and shard map): give a shorter name or an IP address\n`);
    return ExitCode.USAGE;
  }
  const instance = instanceId();
  const leaseMs = options.coordinatorLease;
  // The row's holder names the map this instance serves: a standby with another map refuses to take over
  // (and says which shards it serves: its own map carries the shard list, the holder only its hash).
  const map = ownMapOf(c.shards);
  const store = await openCoordinator(c.url.url, options.service, instance, leaseMs, options.tokenBlock, map, options.reclaimMaxLease);

  let daemon: Daemon;
  try {
    daemon = new Daemon({
      ...daemonOptions(c),
      ...(advertiseOps === undefined ? {} : { advertiseOps }),
      coordinator: { store, service: options.service, instance, leaseMs, block: Math.max(2, options.tokenBlock), initialFloor, map, words: SHARD_WORDS, reclaimMaxLeaseMs: options.reclaimMaxLease },
    });
  } catch (error) {
    await store.close().catch(() => {});
    return listenFailed(error);
  }
  const unrelay = relaySignals(daemon);

  const connected = store.server();
  if (connected !== null) {
    log.info("coordinator.connected", "coordinator: connected to a writable server of the list", {
      service: options.service,
      server: connected.server,
      replication: connected.replication.mode,
      replicas: connected.replication.replicas,
      skipped: store.skippedAtStart().map((s) => `${s.server} ${s.why}`),
      reconnect: false,
    });
  }
  const roles = daemon.roles!;
  // The role is known after the coordinator's first answer (bounded: it may be gone already).
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([roles.started, new Promise<void>((resolve) => (timer = setTimeout(resolve, leaseMs)))]);
  clearTimeout(timer);
  const server = roles.server;
  const view = roles.view();
  log.info("server.started", "lockd started", {
    version: VERSION,
    role: view.role,
    // A standby: the service's epoch and active as it last read them from the row.
    epoch: view.epoch,
    active: view.active,
    // Where the active's ops server answers (its /readyz, /ui), as it advertises it; null: unknown.
    activeOps: view.activeOps,
    service: options.service,
    instance,
    coordinator: redactUrl(c.url.url),
    coordinatorFrom: c.url.from,
    coordinatorLeaseMs: leaseMs,
    // This instance's cap; the row keeps the service's (raise-only), which a term serves.
    reclaimMaxLeaseMs: options.reclaimMaxLease ?? "off",
    // The server of the URL's list in use, and what it says about its replication (docs/operations.md).
    coordinatorServer: store.server()?.server ?? null,
    replication: store.server()?.replication ?? null,
    listen: server === null ? `${formatAddress(options.listen)} (when active)` : formatAddress({ host: server.hostname, port: server.port }),
    ops: formatAddress({ host: daemon.ops.hostname, port: daemon.ops.port }),
    ui: `${c.opsTls === undefined ? "http" : "https"}://${formatAddress({ host: daemon.ops.hostname, port: daemon.ops.port })}/ui`,
    ioTimeoutMs: options.ioTimeout,
    maxSessions: Number.isFinite(c.maxSessions) ? c.maxSessions : "unlimited",
    maxSessionsPerSource: options.maxSessionsPerSource ?? "off",
    opsMaxConnections: options.opsMaxConnections,
    opsIdleTimeoutMs: options.opsIdleTimeout,
    shutdownGraceMs: options.shutdownGrace,
    adminToken: c.admin.token === null ? "none (admin endpoints answer 403)" : c.admin.from,
    logLevel: options.logLevel,
    // Read once at start, for the floor of a row this instance creates; never written or locked.
    dataDir: options.dataDir,
    // As clients see it (with the map's generation), from the current term's server.
    tokensFrom: server === null ? "the coordinator's floor, when active" : server.tokensLast + 1,
    shard: c.shards.shard ?? "none",
    shards: c.shards.shards.join(",") || "none",
    shardsGeneration: c.shards.generation,
    tokenBlock: Math.max(2, options.tokenBlock),
    tls: c.tls === undefined ? "off" : c.tls.clientCa === undefined ? "on" : "mutual",
    opsTls: c.opsTls === undefined ? "off" : "on",
    openFileLimit: { soft: c.limit.soft, hard: c.limit.hard },
    sessionCapacity: c.limit.sessionCapacity,
    pid: process.pid,
  });

  // The one coordinator failure that breaks mutual exclusion is two writable primaries: say so once, at start.
  const report = store.server()?.replication;
  if (report?.mode === "asynchronous") {
    log.warn("coordinator.replication_async", asynchronousWarning(report), { service: options.service, server: store.server()!.server, ...report });
  }

  await daemon.stopped;
  unrelay();
  return ExitCode.OK;
}
