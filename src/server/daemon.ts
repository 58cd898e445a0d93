/**
 * Daemon: the lock listener and the ops server as one process, with the
 * controlled shutdown of design.md section 6 in one place:
 *
 *   1. readyz answers 503 (load balancers stop sending new clients);
 *   2. the protocol listener stops, every session gets ERROR SHUTTING_DOWN
 *      and is closed (LockServer.stop: bounded by io-timeout), no lock
 *      changes hands;
 *   3. the ops server stays up for the grace period, so probes and scrapes
 *      see the whole window (including the final counters); skipped by a
 *      standby, and by a server nobody has called since it started (no
 *      lock session opened, no ops request answered, probes included):
 *      no one is there to see the window;
 *   4. the ops server stops and `stopped` resolves; `lockd serve` exits 0.
 *
 * A second stop request exits at once (`lockd serve`: exit code 70), whatever
 * phase it is in. One request often arrives more than once: a signal sent to
 * a whole process group (kill -INT -PGID, timeout(1), systemd's
 * KillMode=control-group) reaches this process directly and again through
 * whatever started it (the npm bin shim, npm, a supervisor) relaying it. So
 * the same signal again within `signalRepeatWindowMs` of the first (1 s,
 * monotonic clock) is the same request (logged at info); a different
 * signal, or the same one later, is a second request.
 * Tests drive the same sequence in-process through `shutdown()`.
 *
 * The lock-delay (core/delay.ts): a single server with a data directory
 * gets it from the last run's lease record (tokens/leases.ts), and a clean
 * stop publishes the names held at its moment there; with a coordinator,
 * each term gets its own from the role layer.
 *
 * Reclaim (protocol.md section 14), a single server only: the lease record
 * says what this run does (LeasesFile.reclaim): the engine's cap and the
 * grants the last clean stop published, whose holders may reclaim them
 * while their names are held back (the reclaim grace, counted for the views
 * by ReclaimGrace). A clean stop with reclaim on writes its reclaimable
 * grants into the record with the held names, in one durable write, before
 * any session hears of the stop; only then does the listener stop, with
 * SHUTTING_DOWN and the RECLAIM flag for those holders. A set too large to
 * publish (or a write that fails) is not published, and nobody gets the flag.
 *
 * With `coordinator` (lockd serve --coordinator) the lock listener belongs
 * to the role layer (failover/shell.ts): it exists only while this instance is the
 * active of its service, step 2 is the role layer's stop (which also
 * releases the coordinator row), and readiness means "active".
 */
import { type Address, formatAddress } from "../net/address.ts";
import { type LockDelay, MAX_PUBLISHED_NAMES } from "../core/delay.ts";
import { Engine, type EngineWords, type GrantGuard, PLAIN_ENGINE_WORDS, type ReclaimEntry } from "../core/engine.ts";
import { CLOSED_BY_PEER, type Session } from "../core/session.ts";
import type { TokenSource } from "../core/tokens.ts";
import { ErrorCode, errorCodeName } from "../protocol/constants.ts";
import { type Logger, RateLimit } from "../log/logger.ts";
import { AdminAuth } from "../ops/admin.ts";
import type { Conn } from "./conn.ts";
import { type OpsLimits, OpsServer, type OpsWords, PLAIN_OPS_WORDS } from "../ops/server.ts";
import { FailoverShell, type FailoverOptions, type TermReclaim } from "../failover/shell.ts";
import { advertisedOps } from "../failover/holder.ts";
import { hostOf, isLoopbackHost } from "../net/address.ts";
import { LockServer, type ServerEvents, type ServerTls } from "./server.ts";
import { shardGuard } from "../shard/guard.ts";
import { NO_SHARDS, type ShardIdentity } from "../shard/identity.ts";
import { tokensInGeneration } from "../shard/tokens.ts";
import { MemoryTokens } from "../core/tokens.ts";
import type { FileTokens } from "../tokens/file.ts";
import type { LeasesFile } from "../tokens/leases.ts";
import { EngineLocks, remoteOf } from "./locks.ts";
import { ReclaimGrace } from "../failover/grace.ts";
import type { LockDelayView } from "../ops/sources.ts";

/** How the daemon's messages name its settings (the CLI's flags); omitted: plain words. */
export interface DaemonWords {
  readonly engine: EngineWords;
  readonly ops: OpsWords;
  /** The advertised ops address setting, after "set". */
  readonly advertiseOps: string;
}

export const PLAIN_DAEMON_WORDS: DaemonWords = { engine: PLAIN_ENGINE_WORDS, ops: PLAIN_OPS_WORDS, advertiseOps: "the advertised ops address" };

export interface DaemonOptions {
  /** How messages name settings. */
  readonly words?: DaemonWords;
  /** DNS names the ops server answers for besides IP addresses, localhost and the advertised ops name (--ops-allow-host). */
  readonly opsAllowHosts?: readonly string[];
  readonly listen: Address;
  readonly ops: Address;
  readonly ioTimeoutMs: number;
  readonly maxSessions?: number;
  /** Live sessions from one peer address beyond this get OVERLOADED. Omitted: no per-source limit. */
  readonly maxSessionsPerSource?: number;
  readonly shutdownGraceMs: number;
  readonly adminToken: string | null;
  readonly log: Logger;
  readonly version: string;
  /** Durable fencing tokens; their floor is written on a clean shutdown. Omitted: tokens from memory. */
  readonly tokens?: FileTokens;
  /** The lease record of the data directory (the lock-delay a start owes the last run). Omitted: no delay. */
  readonly leases?: LeasesFile;
  /** Leases above this are BAD_REQUEST (--max-lease). Omitted: no cap. */
  readonly maxLeaseMs?: number;
  /** TLS (and mutual TLS) on the lock listener. */
  readonly tls?: ServerTls;
  /** HTTPS on the ops server. */
  readonly opsTls?: { readonly cert: string; readonly key: string };
  /** Connection limit, idle timeout and /metrics reuse of the ops server (defaults: DEFAULT_OPS_LIMITS). */
  readonly opsLimits?: Partial<OpsLimits>;
  /**
   * Run as one instance of a coordinated service (failover/shell.ts): no lock
   * listener until this instance is active; tokens from the coordinator.
   */
  readonly coordinator?: Omit<FailoverOptions, "listen" | "log" | "ioTimeoutMs">;
  /**
   * With `coordinator`: the ops address (HOST:PORT) this instance names in
   * the row while active, for its standbys to show (--advertise-ops).
   * Omitted: the ops server's bound address, unless it is a wildcard
   * (failover/holder.ts advertisedOps).
   */
  readonly advertiseOps?: string;
  /** This server's shard of a map, and the generation tokens carry. Omitted: no shards, generation 0. */
  readonly shards?: ShardIdentity;
  /**
   * The first stop signal repeated within this many ms (monotonic clock) is
   * the same stop request delivered twice, not a second one (default
   * SIGNAL_REPEAT_WINDOW_MS; see `signal`).
   */
  readonly signalRepeatWindowMs?: number;
}

/** How long a repeat of the first stop signal counts as the same request: 1 s. */
export const SIGNAL_REPEAT_WINDOW_MS = 1000;

export type DaemonPhase = "running" | "draining" | "grace" | "stopped";

/** A listener could not be opened; `which` says which one (the CLI names its flag). */
export class ListenError extends Error {
  readonly code = "LISTEN_FAILED";
  constructor(
    readonly which: "listen" | "ops",
    readonly address: Address,
    cause: unknown,
  ) {
    super(`cannot listen on ${formatAddress(address)} (the ${which === "listen" ? "lock" : "ops"} listener): ${(cause as Error)?.message ?? cause}`, { cause });
    this.name = "ListenError";
  }
}

export class Daemon {
  readonly ops: OpsServer;
  phase: DaemonPhase = "running";
  /** Resolves when the ops server has stopped (after the grace period). */
  readonly stopped: Promise<void>;
  /** Resolves when the sessions are closed and the grace period begins. */
  readonly graceStarted: Promise<void>;
  private resolveStopped!: () => void;
  private resolveGrace!: () => void;
  private graceTimer: ReturnType<typeof setTimeout> | null = null;
  private endGrace: (() => void) | null = null;
  /** close() was called: skip (or cut short) the grace period. */
  private closing = false;
  /** A lock session has opened since start (on any term's listener). */
  private hadSession = false;
  private shuttingDown: Promise<void> | null = null;
  /** The first stop signal and when it arrived (monotonic ms); null before any. */
  private firstSignal: { readonly name: string; readonly at: number } | null = null;
  /** The reclaim grace after a clean stop that published grants (null: none). */
  readonly reclaimGrace: ReclaimGrace | null = null;
  private reclaimGraceTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly options: DaemonOptions) {
    this.stopped = new Promise((resolve) => (this.resolveStopped = resolve));
    this.graceStarted = new Promise((resolve) => (this.resolveGrace = resolve));
    const plan = options.coordinator === undefined ? options.leases?.reclaim : undefined;
    if (plan !== undefined && plan.maxLeaseMs !== null && plan.grants > 0) this.reclaimGrace = new ReclaimGrace(plan.published, plan.graceEndsAt);
    if (options.coordinator !== undefined) {
      this.roles = new FailoverShell({
        ...options.coordinator,
        log: options.log,
        ioTimeoutMs: options.ioTimeoutMs,
        listen: (tokens, guard, delay, reclaim) => this.listen(tokens, guard, delay, reclaim),
      });
    } else {
      try {
        this.fixedServer = this.listen(options.tokens, null, options.leases?.delay ?? null);
      } catch (error) {
        throw new ListenError("listen", options.listen, error);
      }
    }
    const roles = this.roles;
    const fixed = this.fixedServer;
    // A standby that never was active shows an empty table: an engine with no sessions, read as the others are.
    const idle = roles === null ? null : new EngineLocks(new Engine<Conn>({ send() {}, close() {} }, { ioTimeoutMs: options.ioTimeoutMs }, performance.now()));
    try {
      this.ops = new OpsServer({
        hostname: options.ops.host,
        port: options.ops.port,
        // With roles, the current term's table (or the last term's, or an empty one before any): read at each use.
        get locks() {
          return fixed?.locks ?? roles!.locks ?? idle!;
        },
        auth: new AdminAuth(options.adminToken),
        log: options.log,
        version: options.version,
        shard: options.shards ?? NO_SHARDS,
        isReady: () => this.ready,
        words: (options.words ?? PLAIN_DAEMON_WORDS).ops,
        // The advertised ops address is how operators reach this instance: its name is known too.
        allowHosts: [...(options.opsAllowHosts ?? []), ...(options.advertiseOps === undefined ? [] : [hostOf(options.advertiseOps)])],
        trouble: () => this.trouble,
        lockDelay: () => this.lockDelay(),
        ...(roles === null ? {} : { roles }),
        ...(options.opsTls === undefined ? {} : { tls: options.opsTls }),
        ...(options.opsLimits === undefined ? {} : { limits: options.opsLimits }),
      });
    } catch (error) {
      void fixed?.stop();
      throw new ListenError("ops", options.ops, error);
    }
    // The holder names the ops server's address as bound (port 0 picked one by now), or --advertise-ops.
    if (roles !== null) {
      const words = options.words ?? PLAIN_DAEMON_WORDS;
      const ops = advertisedOps(options.advertiseOps ?? null, { host: this.ops.hostname, port: this.ops.port });
      if (ops !== null && options.advertiseOps === undefined && isLoopbackHost(this.ops.hostname)) {
        // Right when every instance runs on this machine; from any other host it names that host itself.
        options.log.warn("failover.advertise_loopback", `advertising a loopback ops address: standbys on other hosts would send operators to themselves; if the instances run on several machines, set ${words.advertiseOps} to the HOST:PORT others reach this one by`, { ops });
      } else if (ops === null) {
        // Said once, at start, by every instance (any of them may become the active): standbys could not say where it is.
        options.log.warn("failover.advertise_none", `advertising no ops address: the ops listener binds a wildcard address, so when this instance is active its standbys cannot say where its /readyz and /ui answer; set ${words.advertiseOps} to the HOST:PORT others reach it by`, {
          ops: formatAddress({ host: this.ops.hostname, port: this.ops.port }),
        });
      }
      roles.start(ops);
    }
    this.armReclaimGrace();
  }

  /** The role layer, with --coordinator; null otherwise. */
  readonly roles: FailoverShell | null = null;
  private readonly fixedServer: LockServer | null = null;

  /** The lock server: the only one without --coordinator; the current term's with it (throws while standby). */
  get server(): LockServer {
    const server = this.fixedServer ?? this.roles?.server ?? null;
    if (server === null) throw new Error("this instance is a standby: it has no lock listener");
    return server;
  }

  /** The lock-delay as it stands now, with the reclaim grace while one runs (null: none runs, or not serving). */
  lockDelay(): LockDelayView | null {
    if (this.roles !== null) return this.roles.lockDelay();
    if (this.phase !== "running") return null;
    const now = performance.now();
    const view = this.options.leases?.delay.view(now) ?? null;
    const grace = this.reclaimGrace?.view(now) ?? null;
    return view === null || grace === null ? view : { ...view, reclaim: grace };
  }

  /** The timer that logs the reclaim grace's end (what came back, what did not). */
  private armReclaimGrace(): void {
    const grace = this.reclaimGrace;
    if (grace === null) return;
    this.reclaimGraceTimer = setTimeout(() => {
      this.reclaimGraceTimer = null;
      // setTimeout may fire a little early: the view's own clock decides.
      if (grace.view(performance.now()) !== null) return this.armReclaimGrace();
      this.options.log.info("reclaim.grace_over", "reclaim grace over: published grants not reclaimed by now are lost to their holders", {
        published: grace.published,
        reclaimed: grace.reclaimed,
        unclaimed: grace.unclaimed,
        unclaimedNames: grace.unclaimedNames(),
      });
    }, Math.max(0, Math.ceil(grace.endsAt - performance.now())));
  }

  private listen(tokens: TokenSource | undefined, guard: GrantGuard | null, delay: LockDelay | null, termReclaim: TermReclaim | null = null): LockServer {
    const options = this.options;
    const log = options.log;
    const leases = options.leases;
    // Reclaim: a single server's, from its lease record (the CLI refuses it with a coordinator).
    const plan = guard === null && options.coordinator === undefined ? leases?.reclaim : undefined;
    const grace = this.reclaimGrace;
    return new LockServer({
      hostname: options.listen.host,
      port: options.listen.port,
      ioTimeoutMs: options.ioTimeoutMs,
      maxSessions: options.maxSessions,
      maxSessionsPerSource: options.maxSessionsPerSource,
      events: sessionLog(options.log, () => (this.hadSession = true)),
      // Tokens carry the shard map's generation (0: as they are), whichever source issues them.
      tokens: tokensInGeneration(tokens ?? new MemoryTokens(), options.shards?.generation ?? 0, () => this.tokensExhausted()),
      ...(options.shards === undefined ? {} : { shardGuard: shardGuard(options.shards) }),
      ...(guard === null ? {} : { grantGuard: guard }),
      ...(delay === null ? {} : {
        delay,
        onDelayOver: () => {
          log.info("lock_delay.over", "lock-delay over: every name may be granted", { why: delay.why });
          if (guard === null) leases?.delayOver(); // the data directory stops carrying the last run's leases
        },
      }),
      ...(options.maxLeaseMs === undefined ? {} : { maxLeaseMs: options.maxLeaseMs }),
      ...(options.words === undefined ? {} : { words: options.words.engine }),
      ...(options.tls === undefined ? {} : { tls: options.tls }),
      ...(plan === undefined || plan.maxLeaseMs === null ? {} : { reclaim: { maxLeaseMs: plan.maxLeaseMs, published: plan.published } }),
      ...(grace === null ? {} : { onReclaimed: (token: number) => grace.reclaim(token) }),
      // A coordinated term's (failover/shell.ts): the row's cap, a clean stop's published set, open reclaims in a takeover's grace.
      ...(termReclaim === null ? {} : { reclaim: termReclaim.options, onReclaimed: termReclaim.onReclaimed }),
    });
  }

  /**
   * The token counter reached the end of the map's generation: said once,
   * and the server is not ready from now on (every claim is refused with
   * TOKENS_EXHAUSTED; a restart with a higher generation is the way on).
   */
  private tokensExhausted(): void {
    if (this.exhausted) return;
    this.exhausted = true;
    const generation = this.options.shards?.generation ?? 0;
    this.options.log.error("tokens.exhausted", "the fencing-token counter reached the end of the map's generation: no claim can be granted; restart every server of the map with a higher shards generation", {
      generation,
      lastToken: this.fixedServer?.locks.tokensLast ?? this.roles?.server?.locks.tokensLast ?? null,
    });
  }

  /** Why this server is not ready though running (the token counter's end), or null. */
  get trouble(): string | null {
    return this.exhausted ? "tokens_exhausted" : null;
  }

  private exhausted = false;

  /** Serving: running, and (with --coordinator) active with its listener open. */
  get ready(): boolean {
    return !this.exhausted && this.phase === "running" && (this.roles === null || (this.roles.role === "active" && this.roles.server !== null));
  }

  /** The controlled shutdown (see the top of this file). Idempotent. */
  shutdown(reason: string): Promise<void> {
    this.shuttingDown ??= this.drain(reason);
    return this.shuttingDown;
  }

  /**
   * A stop signal arrived at `now` (monotonic ms): the first starts the
   * shutdown. The same signal again within the repeat window of the first
   * is that request delivered through a second path (direct and relayed),
   * and changes nothing; any other signal, or the same one after the
   * window, calls `forceExit` at once (the CLI's: exit with its code for a
   * forced stop).
   */
  signal(name: string, forceExit: () => void, now: number = performance.now()): void {
    const first = this.firstSignal;
    if (first === null) {
      this.firstSignal = { name, at: now };
      void this.shutdown(name);
      return;
    }
    const windowMs = this.options.signalRepeatWindowMs ?? SIGNAL_REPEAT_WINDOW_MS;
    const sinceMs = now - first.at;
    if (name === first.name && sinceMs < windowMs) {
      this.options.log.info("shutdown.signal_repeated", "same signal again within the repeat window: the same stop request, shutdown continues", {
        signal: name,
        sinceMs: Math.round(sinceMs),
        windowMs,
        phase: this.phase,
      });
      return;
    }
    this.options.log.warn("shutdown.forced", "second signal: exiting at once", { signal: name, first: first.name, sinceMs: Math.round(sinceMs), phase: this.phase });
    forceExit();
  }

  /** Stop everything now, without the grace period (tests, errors). */
  async close(): Promise<void> {
    this.closing = true;
    void this.shutdown("close");
    if (this.graceTimer !== null) clearTimeout(this.graceTimer);
    this.endGrace?.();
    await this.stopped;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * The clean stop's record, before any session hears of the stop: the
   * names held now (`held`, null: too many to list), so that the next start
   * holds back only those, and with reclaim on the reclaimable grants, so
   * that it accepts their reclaims. Returns whether the grants were
   * published (then, and only then, their holders get the RECLAIM flag).
   */
  private persistLeases(server: LockServer, held: Array<[string, number]> | null): boolean {
    const leases = this.options.leases;
    if (leases === undefined) return false;
    const log = this.options.log;
    const reclaim = leases.reclaim.publishes && server.reclaimOn ? this.reclaimToPublish(server) : null;
    try {
      leases.close(held ?? "*", reclaim);
      log.info("leases.held_saved", "held names published for the next start", { dataDir: leases.dir, names: held === null ? "every name (too many to list)" : held.length });
    } catch (error) {
      // Not fatal: the record still says "not clean", so the next start holds back every name (and accepts no reclaim).
      log.warn("leases.held_save_failed", "could not publish the held names; the next start holds back every name for the largest lease", { error: (error as Error).message });
      if (reclaim !== null) log.warn("reclaim.not_published", "reclaimable grants not published: their holders get a plain SHUTTING_DOWN and lose their locks", { why: "write_failed", grants: count(reclaim) });
      return false;
    }
    if (reclaim === null) return false;
    log.info("reclaim.published", "reclaimable grants published: their holders may reclaim them from the next start", { dataDir: leases.dir, grants: count(reclaim), names: reclaim.size });
    return true;
  }

  /** The reclaimable grants to publish, or null when there are too many (said in the log). */
  private reclaimToPublish(server: LockServer): Map<string, ReclaimEntry[]> | null {
    const grants = server.reclaimableGrants();
    const n = count(grants);
    if (n <= MAX_PUBLISHED_NAMES) return grants;
    this.options.log.warn("reclaim.not_published", "reclaimable grants not published: their holders get a plain SHUTTING_DOWN and lose their locks", { why: "too_many", grants: n, limit: MAX_PUBLISHED_NAMES });
    return null;
  }

  /** No more grants can happen: record the last token, so the next start skips none. */
  private persistTokens(): void {
    const tokens = this.options.tokens;
    if (tokens === undefined) return;
    try {
      tokens.close();
      this.options.log.info("tokens.floor_saved", "token floor saved", { dataDir: tokens.dir, lastToken: tokens.last });
    } catch (error) {
      // Not fatal: the reserved floor on disk is still above every token issued.
      this.options.log.warn("tokens.floor_save_failed", "could not save the token floor; the next start skips to the reserved floor", { error: (error as Error).message });
    }
  }

  private async drain(reason: string): Promise<void> {
    const log = this.options.log;
    this.phase = "draining";
    const roles = this.roles;
    const sessions = (roles === null ? this.server : roles.server)?.sessionCount ?? 0;
    // The grace period lets probes and scrapes see a stopping active's last
    // figures. A standby serves no sessions and its /readyz was 503 all along:
    // it has nothing to show, and waits for nothing.
    const standby = roles !== null && roles.role === "standby";
    if (standby) log.info("shutdown.standby_begins", "shutting down: a standby, no sessions", { reason });
    else log.info("shutdown.begins", "shutting down: readyz is 503, closing sessions", { reason, sessions });
    if (this.reclaimGraceTimer !== null) clearTimeout(this.reclaimGraceTimer);
    this.reclaimGraceTimer = null;
    if (roles !== null) await roles.stop();
    else {
      const server = this.server;
      // Before the sessions end, synchronously: no grant can happen between the record and the stop.
      const published = this.persistLeases(server, server.held(MAX_PUBLISHED_NAMES));
      await server.stop(published);
      this.persistTokens();
    }
    this.phase = "grace";
    // Nobody has called since start (npm start, then Ctrl-C): no prober or scraper
    // waits to see the window. Asked once the sessions are closed, so a probe
    // during the drain counts.
    const graceMs = this.options.shutdownGraceMs;
    const idle = !standby && graceMs > 0 && !this.hadSession && !this.ops.called;
    if (standby) log.info("shutdown.grace_skipped", "a standby served no sessions: stopping without the grace period", { graceMs, why: "standby" });
    else if (idle) log.info("shutdown.grace_skipped", "no lock session and no ops request since start: stopping without the grace period", { graceMs, why: "idle" });
    else log.info("shutdown.grace", "sessions closed; ops server stays up for the grace period", { graceMs });
    this.resolveGrace();
    if (!this.closing && !standby && !idle) {
      await new Promise<void>((resolve) => {
        this.endGrace = resolve;
        this.graceTimer = setTimeout(resolve, this.options.shutdownGraceMs);
      });
    }
    this.graceTimer = null;
    await this.ops.stop();
    this.phase = "stopped";
    log.info("shutdown.stopped", "stopped");
    this.resolveStopped();
  }
}

/** Grants in a published set. */
function count(grants: ReadonlyMap<string, readonly ReclaimEntry[]>): number {
  let n = 0;
  for (const entries of grants.values()) n += entries.length;
  return n;
}

/** End reasons that mean a misbehaving client: warned about, rate-limited. */
const PROTOCOL_ENDS = new Set<number>([ErrorCode.PROTOCOL_ERROR, ErrorCode.BAD_REQUEST, ErrorCode.UNSUPPORTED_VERSION]);

/**
 * Session lifecycle logging. At the default level this does one comparison
 * per session end and nothing else (and tells `onOpened` of each session
 * opened: the shutdown keeps its grace once there was one); debug lines are
 * built only when debug is on; client-caused warnings pass a rate limit
 * first.
 */
function sessionLog(log: Logger, onOpened: () => void): ServerEvents {
  const debug = log.enabled("debug");
  const ioTimeouts = new RateLimit(10, 1000);
  const protocolErrors = new RateLimit(10, 1000);
  const fields = (session: Session<Conn>) => ({
    session: session.id,
    remote: remoteOf(session.conn),
    lock: session.lock?.name ?? null,
    owner: session.owner,
    reason: session.endReason === CLOSED_BY_PEER ? "closed" : errorCodeName(session.endReason),
  });
  return {
    opened(session) {
      onOpened();
      if (debug) log.debug("session.opened", "session opened", { session: session.id, remote: remoteOf(session.conn) });
    },
    ended(session) {
      const reason = session.endReason;
      if (reason === ErrorCode.IO_TIMEOUT) log.limited(ioTimeouts, "warn", "session.io_timeout", "session ended: io-timeout", () => fields(session));
      else if (PROTOCOL_ENDS.has(reason)) log.limited(protocolErrors, "warn", "session.protocol_error", "session ended: protocol error", () => fields(session));
      else if (debug) log.debug("session.ended", "session ended", fields(session));
    },
  };
}
