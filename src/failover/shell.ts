/**
 * FailoverShell: the shell around the coordinator role machine (machine.ts) for
 * `lockd serve --coordinator`. It carries the machine's actions out against
 * the store (PostgreSQL), feeds the answers back with `performance.now()`,
 * and arms one timer for the machine's next wake-up. The daemon calls it;
 * everything about roles lives here.
 *
 * - standby: no lock listener. The daemon's ops server stays up; /readyz
 *   says 503 with the role.
 * - active: a LockServer listening on --listen, its tokens from the
 *   machine's blocks, and the machine's deadline checked before every grant
 *   (the engine's grant guard reads the clock then: a process paused past
 *   its deadline grants nothing when it wakes).
 * - step-down: the LockServer stops (every session gets ERROR SHUTTING_DOWN,
 *   the listener closes), and the instance is a standby again.
 * - clean stop: the active's sessions end as in a step-down, then the row is
 *   released so a standby, if one runs, takes over at its next read (the
 *   active cannot see its standbys: the row names only the active).
 *
 * - lock-delay: each term's LockServer gets a LockDelay (core/delay.ts) made
 *   from the machine's `activate.delay`; a grant whose lease the row does
 *   not cover yet waits for the machine's `raise`, and the server resumes
 *   held-back grants when it lands (or a token block does).
 *
 * Every statement is bounded by a timeout (half the coordinator lease): one
 * that does not answer in time counts as failed, whatever it does later. The
 * machine is built so that a late effect is safe (a renewal or reservation
 * that lands late changes nothing that matters, and a takeover that lands
 * late is taken over again after a lease).
 */
import { formatAddress } from "../net/address.ts";
import type { Logger } from "../log/logger.ts";
import { type DelayView, LockDelay, MAX_PUBLISHED_NAMES } from "../core/delay.ts";
import type { GrantGuard, ReclaimEntry, ReclaimOptions } from "../core/engine.ts";
import type { TokenSource } from "../core/tokens.ts";
import type { CoordinatorMetrics, LockDelayView, LockSource, RoleSource, RoleView } from "../ops/sources.ts";
import { type RoleAction, type RoleEffects, RoleMachine, Outcome, type TermDelay } from "./machine.ts";
import { activeHolder, describeRowMap, type HolderMap, holderInstance, isReleased, parseHolderOps, refusalHeadline, type ShardWords, takeoverChangesMap, takeoverRefusal } from "./holder.ts";
import type { CoordinatorStore } from "./store.ts";
import { type CoordinatorErrorKind, CoordinatorError, type CoordinatorServer } from "./servers.ts";

/** The statements, as the logs name them. */
type StatementName = "read" | "create" | "takeover" | "renew" | "raise" | "reserve" | "release";
import { asynchronousWarning } from "./replication.ts";
import { ReclaimGrace } from "./grace.ts";
import type { LockServer } from "../server/server.ts";

export interface FailoverOptions {
  readonly store: CoordinatorStore;
  readonly service: string;
  readonly instance: string;
  readonly leaseMs: number;
  readonly block: number;
  /** Creating the service's row: tokens start above this (a data directory's floor). */
  readonly initialFloor?: number;
  /**
   * The shard map this instance serves (holder.ts): it refuses to
   * take over a row whose holder served a map it must not follow. Omitted:
   * no shards, generation 0.
   */
  readonly map?: HolderMap;
  readonly log: Logger;
  /** Open the lock listener for a term (with reclaim's options when the row has a cap); throws when it cannot listen. */
  readonly listen: (tokens: TokenSource, guard: GrantGuard, delay: LockDelay, reclaim: TermReclaim | null) => LockServer;
  /**
   * This instance's reclaim cap M (ms, --reclaim-max-lease); null or
   * omitted: off. The row keeps the service's (raise-only): a term serves
   * the row's, and only an instance with its own cap publishes its holders
   * at a clean stop and tells them to reclaim at a step-down.
   */
  readonly reclaimMaxLeaseMs?: number | null;
  /** io-timeout, for the idle engine shown by the ops server while standby. */
  readonly ioTimeoutMs: number;
  /** Called when this instance becomes active (listening) or stops being active. */
  readonly onRole?: (role: "active" | "standby", epoch: number) => void;
  /** How refusals name the shard settings (the CLI's flags); omitted: plain words. */
  readonly words?: ShardWords;
  /** Time and timers (default: performance.now() and setTimeout). The simulation runs this shell on a manual one. */
  readonly clock?: ShellClock;
}

export type { CoordinatorMetrics, RoleView } from "../ops/sources.ts";

/** Reclaim in one term: the engine's options, and who is told of each reclaim granted (the grace's account). */
export interface TermReclaim {
  readonly options: ReclaimOptions;
  readonly onReclaimed: (token: number) => void;
}


/**
 * The shell's only way to time: the monotonic clock (ms), and one-shot
 * timers at a moment of that clock. Nothing here reads a wall clock.
 */
export interface ShellClock {
  now(): number;
  /** Call `fire` at `at` (or soon after); the returned function cancels it. */
  arm(at: number, fire: () => void): () => void;
}

/** performance.now() and setTimeout: what lockd runs on. */
export const REAL_CLOCK: ShellClock = {
  now: () => performance.now(),
  arm(at, fire) {
    const timer = setTimeout(fire, Math.max(0, Math.ceil(at - performance.now())));
    return () => clearTimeout(timer);
  },
};

export class FailoverShell implements GrantGuard, TokenSource, RoleSource {
  readonly machine: RoleMachine;
  /** The LockServer of the current active term, null while standby. */
  server: LockServer | null = null;
  /** The lock table of the current term, else of the last one; null before the first (the daemon shows an empty one then). */
  locks: LockSource | null = null;
  /** Resolves once the first decision is made (the row read, created or taken). */
  readonly started: Promise<void>;
  private resolveStarted!: () => void;
  private cancelTimer: (() => void) | null = null;
  private readonly clock: ShellClock;
  private pumpQueued = false;
  private stopping = false;
  /** The last term's LockServer.stop(): a new term listens only after it. */
  private lastStop: Promise<void> = Promise.resolve();
  private readonly now: () => number;
  private readonly statementTimeoutMs: number;
  /** The active last logged as seen by this standby. */
  private seenEpoch = -1;
  private seenHolder = "";
  private readonly map: HolderMap;
  /** The refusal last logged, with the row it refused (null: none). */
  private loggedRefusal: string | null = null;
  /** The row as last read or written by this instance (null: absent, or no answer yet); for the view only. */
  private rowSeen: { readonly epoch: number; readonly holder: string } | null = null;
  /** The ops address this instance advertises when active (start's argument). */
  private ops: string | null = null;
  /** A release the machine asked for while stopping: sent by stop() once the sessions are closed. */
  private releasing: Extract<RoleAction, { type: "release" }> | null = null;
  /** The current term's lock-delay (null while standby). */
  private delay: LockDelay | null = null;
  /** The current term's reclaim grace, for the views (null: none runs). */
  private grace: ReclaimGrace | null = null;
  /** A clean stop publishing reclaimable grants: no grant and no heartbeat answered from the snapshot on. */
  private frozen = false;
  /** The current streak of failed statements: how many, since when, the last, and the kind last logged. */
  private failures: { count: number; since: number; last: { readonly kind: CoordinatorErrorKind; readonly error: string } | null; logged: CoordinatorErrorKind | null } = {
    count: 0,
    since: 0,
    last: null,
    logged: null,
  };

  constructor(private readonly options: FailoverOptions) {
    const map = options.map ?? { generation: 0, shard: null, map: null };
    this.map = map;
    this.machine = new RoleMachine({
      leaseMs: options.leaseMs,
      block: options.block,
      initialFloor: options.initialFloor ?? 0,
      refuse: (holder) => takeoverRefusal(map, holder, options.words),
    }, this.effects());
    this.clock = options.clock ?? REAL_CLOCK;
    const clock = this.clock;
    this.now = () => clock.now();
    this.statementTimeoutMs = Math.max(50, options.leaseMs / 2);
    this.started = new Promise((resolve) => (this.resolveStarted = resolve));
  }

  get role(): RoleView["role"] {
    return this.machine.role;
  }

  view(): RoleView {
    const m = this.machine;
    const { service, instance } = this.options;
    const seen = this.rowSeen;
    const view: RoleView = m.role === "active"
      ? { role: m.role, epoch: m.epoch, service, instance, active: instance, activeOps: this.ops }
      : {
          role: m.role,
          epoch: seen === null ? m.epoch : seen.epoch,
          service,
          instance,
          active: seen === null ? null : holderInstance(seen.holder),
          activeOps: seen === null ? null : parseHolderOps(seen.holder),
        };
    const coordinator = this.options.store.server === undefined ? {} : { coordinator: this.options.store.server() };
    return m.role === "standby" && m.refusal !== null ? { ...view, refusal: m.refusal, ...coordinator } : { ...view, ...coordinator };
  }

  metrics(): CoordinatorMetrics {
    const m = this.machine;
    return {
      ...this.view(),
      // lockd_coordinator_epoch is documented as this instance's current or last term: not the row's.
      epoch: m.epoch,
      roundTripSeconds: m.lastRoundTripMs / 1000,
      renewalsFailed: m.renewalsFailed,
      stepDowns: m.stepDowns,
      takeovers: m.takeovers,
      leaseSeconds: this.options.leaseMs / 1000,
    };
  }

  /**
   * Begin: read the row (and take or create it as the machine decides).
   * `ops` is the ops address this instance advertises when active (the
   * daemon's, holder.ts advertisedOps; null: none), written into
   * its holder.
   */
  start(ops: string | null = null): void {
    this.ops = ops;
    // A walk of the coordinator's server list after a failure found a server: say which, and what it reported.
    let lastMode = this.options.store.server?.()?.replication.mode ?? null;
    this.options.store.onReconnect?.((server, skipped) => {
      const mode = server.replication.mode;
      // The risk is told once at start; again only when a reconnect finds it where it was not.
      if (mode === "asynchronous" && lastMode !== "asynchronous") this.options.log.warn("coordinator.replication_async", asynchronousWarning(server.replication), { service: this.options.service, server: server.server, ...server.replication });
      lastMode = mode;
      this.options.log.info("coordinator.connected", "coordinator: connected to a writable server of the list", {
        service: this.options.service,
        role: this.machine.role,
        server: server.server,
        replication: server.replication.mode,
        replicas: server.replication.replicas,
        skipped: skipped.map((s) => `${s.server} ${s.why}`),
        reconnect: true,
      });
    });
    this.options.store.setHolder(activeHolder(this.options.instance, this.map, ops));
    this.machine.start(this.now());
  }

  // --- GrantGuard and TokenSource: the hot path --------------------------------------

  /** Before every grant: the deadline, on the clock now (not the event's time). */
  mayGrant(_now: number): boolean {
    if (this.machine.mayGrant(this.now()) && !this.frozen) return true;
    if (this.frozen) return false;
    this.queuePump(); // the machine steps down (or waits for a token block) on its next turn
    return false;
  }

  /** Before every heartbeat's answer: inside the deadline (the event's time: read just now by the shell). */
  mayConfirm(now: number): boolean {
    const m = this.machine;
    if (m.role === "active" && now < m.deadline && !this.frozen) return true;
    if (this.frozen) return false;
    this.queuePump(); // past the deadline: the machine steps down on its next turn
    return false;
  }

  /** The current term's lock-delay as it stands now; null when none runs (or standby). */
  lockDelay(): LockDelayView | null {
    if (this.machine.role !== "active") return null;
    const now = this.now();
    const view = this.delay?.view(now) ?? null;
    const grace = this.grace?.view(now) ?? null;
    return view === null || grace === null ? view : { ...view, reclaim: grace };
  }

  next(): number {
    const token = this.machine.nextToken();
    if (this.machine.wantsReserve()) this.queuePump();
    return token;
  }

  get last(): number {
    return this.machine.lastToken;
  }

  // --- stop ------------------------------------------------------------------------------------

  /** Clean stop: end the sessions (SHUTTING_DOWN), release the row if active, close the store. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.cancelTimer?.();
    this.cancelTimer = null;
    if (this.server !== null && this.machine.role === "active" && this.publishes(this.server)) return this.stopPublishing(this.server);
    // The names held at this moment are published with the release: only they wait at the next active.
    const held = this.server?.held(MAX_PUBLISHED_NAMES) ?? [];
    this.machine.stop(this.now(), held ?? "*"); // a release to send, if active: `releasing`
    const server = this.server;
    this.server = null;
    if (server !== null) await server.stop();
    await this.lastStop;
    const action = this.releasing;
    this.releasing = null;
    if (action !== null) {
      const released = await this.bounded("release", this.options.store.release(action.epoch, action), 2 * this.statementTimeoutMs);
      // The active cannot see its standbys (the row names only the active): say what happens if one runs.
      if (released === true) {
        this.rowSeen = null; // the row names no active now: the view shows this instance's last term
        this.options.log.info("failover.released", "coordinator row released: a standby, if one is running, takes over at its next read", {
          service: this.options.service,
          epoch: action.epoch,
          // The next active holds back these names for their holders' leases (a holder cut off now never saw SHUTTING_DOWN).
          published: action.held === "*" ? "every name (too many to list)" : action.held.length,
        });
      } else {
        this.options.log.warn("failover.release_failed", "could not release the coordinator row: a standby, if one is running, takes over after the lease", { service: this.options.service, epoch: action.epoch });
      }
    }
    this.resolveStarted();
    await this.options.store.close().catch(() => {});
  }

  /** Whether this term's clean stop publishes its reclaimable grants: this instance's own cap is on, and the term serves reclaim. */
  private publishes(server: LockServer): boolean {
    return (this.options.reclaimMaxLeaseMs ?? null) !== null && server.reclaimOn;
  }

  /**
   * A clean stop with reclaim on (protocol.md section 14): from the snapshot
   * on nothing is granted and no heartbeat answered (so no holder's
   * deadline moves past what the release publishes), the release publishes
   * the held names and the reclaimable grants, and only once it landed do
   * those holders get SHUTTING_DOWN with RECLAIM. A release without an
   * answer (it may still land) sends plain SHUTTING_DOWN: those holders
   * lose their locks, and the next active holds their names back anyway.
   */
  private async stopPublishing(server: LockServer): Promise<void> {
    const { log, service } = this.options;
    this.frozen = true;
    const held = server.held(MAX_PUBLISHED_NAMES);
    // With `now`: also the grants the stop before this term published that nobody reclaimed yet, while their names wait.
    let grants: Map<string, ReclaimEntry[]> | null = server.reclaimableGrants(this.now());
    const count = countGrants(grants);
    if (count > MAX_PUBLISHED_NAMES) {
      log.warn("reclaim.not_published", "reclaimable grants not published: their holders get a plain SHUTTING_DOWN and lose their locks", { service, why: "too_many", grants: count, limit: MAX_PUBLISHED_NAMES });
      grants = null;
    }
    this.machine.stop(this.now(), held ?? "*", grants); // the release: `releasing`
    const action = this.releasing;
    this.releasing = null;
    const released = action === null ? false : (await this.bounded("release", this.options.store.release(action.epoch, action), 2 * this.statementTimeoutMs)) === true;
    this.server = null;
    await server.stop(released && grants !== null);
    await this.lastStop;
    if (released && action !== null) {
      this.rowSeen = null;
      log.info("failover.released", "coordinator row released: a standby, if one is running, takes over at its next read", {
        service,
        epoch: action.epoch,
        published: action.held === "*" ? "every name (too many to list)" : action.held.length,
      });
      if (grants !== null) log.info("reclaim.published", "reclaimable grants published: their holders may reclaim them from the next active", { service, epoch: action.epoch, grants: count, names: grants.size });
    } else {
      log.warn("failover.release_failed", "could not release the coordinator row: a standby, if one is running, takes over after the lease", { service, epoch: action?.epoch ?? this.machine.epoch });
      if (grants !== null && count > 0) log.warn("reclaim.not_published", "reclaimable grants not published: their holders get a plain SHUTTING_DOWN and lose their locks", { service, why: "release_failed", grants: count });
    }
    this.resolveStarted();
    await this.options.store.close().catch(() => {});
  }

  // --- the machine's actions ---------------------------------------------------------------

  private queuePump(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    queueMicrotask(() => {
      this.pumpQueued = false;
      if (!this.stopping) this.machine.tick(this.now());
    });
  }

  /** The machine's effects: each carried out at once (nothing after a stop began but its release). */
  private effects(): RoleEffects {
    const perform = (action: RoleAction): void => {
      if (action.type === "release" && this.stopping) {
        this.releasing = action; // stop() sends it once the sessions are closed
        return;
      }
      if (!this.stopping) this.perform(action);
    };
    return {
      read: () => perform({ type: "read" }),
      create: (floor) => perform({ type: "create", floor }),
      takeover: (watched) => perform({ type: "takeover", watched }),
      renew: (epoch, sentAt, carryLeaseMs) => perform({ type: "renew", epoch, sentAt, carryLeaseMs }),
      raise: (epoch, leaseMs) => perform({ type: "raise", epoch, leaseMs }),
      reserve: (epoch) => perform({ type: "reserve", epoch }),
      activate: (activation) => perform(activation),
      stepDown: (epoch, reason) => perform({ type: "stepDown", epoch, reason }),
      release: (release) => perform(release),
      arm: (at) => this.arm(at),
    };
  }

  private arm(at: number): void {
    this.cancelTimer?.();
    this.cancelTimer = null;
    if (this.stopping || at === Infinity) return;
    this.cancelTimer = this.clock.arm(at, () => {
      this.cancelTimer = null;
      if (!this.stopping) this.machine.tick(this.now());
    });
  }

  private perform(action: RoleAction): void {
    const { store, log, service } = this.options;
    const m = this.machine;
    switch (action.type) {
      case "read":
        this.ask("read", store.read(), (row) => {
          if (row !== undefined) this.rowSeen = row; // null: the service has no row (no answer keeps the last)
          if (row !== undefined && row !== null && m.role === "standby" && (row.epoch !== this.seenEpoch || row.holder !== this.seenHolder)) {
            this.seenEpoch = row.epoch;
            this.seenHolder = row.holder;
            // A released row names no active (null, as the startup line, /readyz and the board say), only the map it was released with.
            if (isReleased(row.holder)) {
              log.info("standby.row_released", "standby: the coordinator row is released (no active)", { service, epoch: row.epoch, active: null, releasedMap: describeRowMap(this.map, row.holder) });
            } else {
              log.info("standby.watching", "standby: the coordinator row names the active", {
                service,
                epoch: row.epoch,
                active: holderInstance(row.holder),
                activeOps: parseHolderOps(row.holder),
                activeMap: describeRowMap(this.map, row.holder),
              });
            }
            const change = takeoverChangesMap(this.map, row.holder);
            if (change !== null) log.warn("standby.map_differs", "standby: this instance serves another shard map than its service's active", { service, epoch: row.epoch, note: change });
          }
          const regressions = m.regressions;
          if (row === undefined) m.readDone(this.now(), null, true);
          else m.readDone(this.now(), row);
          this.logRefusal(row ?? null);
          if (m.regressions !== regressions) {
            log.error("failover.row_regressed", "the coordinator row went back (a lower epoch or token floor, or gone): the coordinator lost committed data; this instance will not issue tokens below what it saw, others may", {
              service,
              row: row ?? null,
            });
          }
          // Watching an active, or refusing the row: either way the first decision is made.
          if (row !== undefined && row !== null && (!isReleased(row.holder) || m.refusal !== null)) this.resolveStarted();
        });
        return;
      case "create":
        this.ask("create", store.create(action.floor), (row) => {
          if (row !== undefined && row !== null) this.rowSeen = row;
          m.createDone(this.now(), row ?? null);
        });
        return;
      case "takeover":
        this.ask("takeover", store.takeover(action.watched), (row) => {
          // Answered with no row: another instance changed it first. No answer: the statement failed (logged as such), and may still land.
          if (row === null) log.info("failover.takeover_lost", "takeover did not happen: the coordinator row changed", { service });
          else if (row === undefined) {
            log.info("failover.takeover_failed", "takeover did not happen: the statement got no answer (it may still land; the row is read again)", { service, reason: this.failures.last?.kind ?? "timeout" });
          } else this.rowSeen = row;
          m.takeoverDone(this.now(), row ?? null);
        });
        return;
      case "renew":
        this.ask("renew", store.renew(action.epoch, action.carryLeaseMs), (ok) => {
          if (ok === undefined) {
            const last = this.failures.last;
            log.warn("failover.renewal_failed", "coordinator renewal failed", { service, epoch: action.epoch, failed: m.renewalsFailed + 1, reason: last?.kind ?? "timeout", error: last?.error ?? null });
          }
          else if (ok) this.delay?.retry(); // a raise that failed is asked again while the coordinator answers
          m.renewDone(this.now(), action.epoch, action.sentAt, ok === undefined ? Outcome.FAILED : ok ? Outcome.OK : Outcome.TAKEN);
        });
        return;
      case "raise": {
        const delay = this.delay;
        this.ask("raise", store.raise(action.epoch, action.leaseMs), (max) => {
          const outcome = max === undefined ? Outcome.FAILED : max === null ? Outcome.TAKEN : Outcome.OK;
          m.raiseDone(this.now(), action.epoch, outcome, max ?? 0); // TAKEN: a step-down, which drops this.delay
          if (delay !== null && delay === this.delay) {
            if (outcome === Outcome.OK) {
              delay.raised(max!);
              this.server?.resume();
            } else if (outcome === Outcome.FAILED) {
              log.warn("failover.raise_failed", "could not raise the coordinator row's largest lease: claims with that lease wait", { service, epoch: action.epoch, leaseMs: action.leaseMs });
              delay.raiseFailed();
            }
          }
        });
        return;
      }
      case "reserve":
        this.ask("reserve", store.reserve(action.epoch), (floor) => {
          m.reserveDone(this.now(), action.epoch, floor === undefined ? Outcome.FAILED : floor === null ? Outcome.TAKEN : Outcome.OK, floor ?? 0);
          if (typeof floor === "number") queueMicrotask(() => this.server?.resume()); // claims held back for want of a token
        });
        return;
      case "activate":
        this.resolveStarted();
        void this.activate(action);
        return;
      case "stepDown":
        this.rowSeen = null; // the row it last saw named itself: the view shows its term until the next read
        this.stepDown(action.epoch, action.reason);
        return;
      case "release":
        void this.bounded("release", store.release(action.epoch, action), this.statementTimeoutMs);
        return;
    }
  }

  /**
   * Log a standby's refusal to take over when it begins, at each new row it
   * refuses (another epoch or holder: the row released, a new active), and
   * when it ends; never once per read.
   */
  private logRefusal(row: { readonly epoch: number; readonly holder: string } | null): void {
    const refusal = this.machine.refusal;
    if (row === null && refusal !== null) return; // no answer: nothing new
    const key = refusal === null ? null : `${refusal}\n${row!.epoch}\n${row!.holder}`;
    if (key === this.loggedRefusal) return;
    const { log, service } = this.options;
    if (refusal !== null) {
      log.error("standby.refusing", `standby: refusing to take over: ${refusalHeadline(this.map, row?.holder ?? "")}`, {
        service,
        epoch: row?.epoch ?? 0,
        holder: row?.holder ?? "",
        reason: refusal,
      });
    } else {
      log.info("standby.refusal_over", "standby: may take over again: the coordinator row names a map this instance may serve", { service, epoch: row?.epoch ?? 0 });
    }
    this.loggedRefusal = key;
  }

  /** Run a statement bounded in time; `undefined` to `then` means no answer (failed or timed out). */
  private ask<T>(statement: StatementName, promise: Promise<T>, then: (result: T | undefined) => void): void {
    void this.bounded(statement, promise, this.statementTimeoutMs).then((result) => {
      if (!this.stopping) then(result);
    });
  }

  private async bounded<T>(statement: StatementName, promise: Promise<T>, ms: number): Promise<T | undefined> {
    let cancel: (() => void) | undefined;
    const timeout = new Promise<{ readonly timedOut: true }>((resolve) => {
      cancel = this.clock.arm(this.now() + ms, () => resolve({ timedOut: true }));
    });
    try {
      const outcome = await Promise.race([
        promise.then((value) => ({ value }), (error: unknown) => ({ error })),
        timeout,
      ]);
      if ("value" in outcome) {
        this.answered();
        return outcome.value;
      }
      if ("error" in outcome) {
        this.options.log.debug("failover.statement_failed", "coordinator statement failed", { error: (outcome.error as Error)?.message ?? String(outcome.error) });
        this.failed(statement, outcome.error instanceof CoordinatorError ? outcome.error.kind : "failed", outcome.error);
      } else {
        this.failed(statement, "timeout", null, ms);
      }
      return undefined;
    } finally {
      cancel?.();
    }
  }

  /** A statement answered: the end of a streak of failures, if one ran. */
  private answered(): void {
    const f = this.failures;
    if (f.count === 0) return;
    this.options.log.info("coordinator.answering", "the coordinator answers again", {
      service: this.options.service,
      role: this.machine.role,
      server: this.options.store.server?.()?.server ?? null,
      failed: f.count,
      forMs: Math.round(this.now() - f.since),
    });
    this.failures = { count: 0, since: 0, last: null, logged: null };
  }

  /**
   * A statement failed: logged with the code and words of its kind, once
   * per streak of failures of that kind (a standby reads every lease/4: an
   * outage would otherwise be a line per read); the streak's end is
   * `coordinator.answering`.
   */
  private failed(statement: StatementName, kind: CoordinatorErrorKind, error: unknown, timeoutMs?: number): void {
    const f = this.failures;
    const message = error === null ? `no answer within ${timeoutMs} ms` : ((error as Error)?.message ?? String(error));
    if (f.count === 0) f.since = this.now();
    f.count++;
    f.last = { kind, error: message };
    if (f.logged === kind) return;
    f.logged = kind;
    const { log, service } = this.options;
    const fields = {
      service,
      role: this.machine.role,
      statement,
      server: (error instanceof CoordinatorError ? error.server : null) ?? this.options.store.server?.()?.server ?? null,
      error: message,
      ...(error instanceof CoordinatorError && error.sqlstate !== null ? { sqlstate: error.sqlstate } : {}),
      failed: f.count,
    };
    switch (kind) {
      case "timeout":
        log.warn("coordinator.statement_timeout", "coordinator statement got no answer in time: it counts as failed, and may still land", { ...fields, timeoutMs: timeoutMs ?? this.statementTimeoutMs });
        return;
      case "login":
        log.error("coordinator.login_refused", "the coordinator refused lockd's login (its user or password changed, or pg_hba.conf)", fields);
        return;
      case "unreachable":
        log.warn("coordinator.unreachable", "cannot reach the coordinator (connection refused or closed, or the server shutting down)", fields);
        return;
      case "read_only":
        log.warn("coordinator.read_only", "no writable coordinator server: the server is read-only or in recovery (the list is walked again at the next statement)", fields);
        return;
      case "failed":
        log.warn("coordinator.statement_failed", "coordinator statement failed: the server answered with an error", fields);
        return;
    }
  }

  private async activate(activation: Extract<RoleAction, { type: "activate" }>): Promise<void> {
    const { epoch, why, unchangedMs, delay: termDelay, maxLeaseMs } = activation;
    await this.lastStop;
    const m = this.machine;
    if (this.stopping || m.role !== "active" || m.epoch !== epoch) return;
    // The delay counts from now, after the last term's stop: later than the machine's activation, so never shorter.
    const now = this.now();
    const delay = new LockDelay({
      why: why === "released" ? "released" : "takeover",
      until: now + termDelay.everyNameMs,
      names: new Map(termDelay.names.map(([name, ms]) => [name, now + ms])),
      durableMaxMs: maxLeaseMs,
      raise: (leaseMs) => {
        m.raise(leaseMs);
        return false;
      },
    });
    this.delay = delay;
    // Reclaim: the row's cap serves this term (raise-only, whoever set it); open reclaims while every name is held back.
    const cap = activation.reclaimMaxLeaseMs;
    let reclaim: TermReclaim | null = null;
    this.grace = null;
    if (cap > 0) {
      const published = activation.reclaim ?? new Map<string, readonly ReclaimEntry[]>();
      const grace = delay.over(now) ? null : new ReclaimGrace(published, delay.endsAt);
      this.grace = grace;
      reclaim = { options: { maxLeaseMs: cap, published, open: true }, onReclaimed: (token) => grace?.reclaim(token) };
      if ((this.options.reclaimMaxLeaseMs ?? null) === null) {
        this.options.log.info("reclaim.off_honouring", "reclaim is off on this instance, on in the service's coordinator row: accepting reclaims during this term's grace; this instance's stops and step-downs tell no holder to reclaim", {
          service: this.options.service,
          epoch,
          reclaimMaxLeaseMs: cap,
        });
      }
    }
    let server: LockServer;
    try {
      server = this.options.listen(this, this, delay, reclaim);
    } catch (error) {
      this.options.log.error("failover.cannot_listen", "active, but cannot listen: giving the term up", { service: this.options.service, epoch, error: (error as Error).message });
      m.abandon(this.now(), "cannot listen");
      return;
    }
    this.server = server;
    this.locks = server.locks;
    this.options.log.info("failover.active", "active: listening", {
      service: this.options.service,
      epoch,
      why,
      ...(why === "expired" ? { unchangedMs: Math.round(unchangedMs) } : {}),
      listen: formatAddress({ host: server.hostname, port: server.port }),
      // The ops address written into the row for standbys to show (null: none advertised).
      advertisedOps: this.ops,
      // As clients see it: the server's token source wraps the machine's counter in the map's generation.
      tokensFrom: server.tokensLast + 1,
      ...(delay.over(now) ? {} : { lockDelayMs: Math.ceil(delay.endsAt - now), lockDelayNames: termDelay.everyNameMs > 0 ? "every name" : termDelay.names.length }),
      ...(cap > 0 ? { reclaimMaxLeaseMs: cap, reclaimPublished: countGrants(activation.reclaim) } : {}),
    });
    if (termDelay.unknown) {
      this.options.log.warn("lock_delay.unknown", "the coordinator row was last written by a lockd that kept no largest lease: this term cannot know how long the earlier active's holders may still believe, and holds no name back for them", {
        service: this.options.service,
        epoch,
      });
    }
    if (!delay.over(now)) {
      this.options.log.info("lock_delay.begins", "lock-delay: holding back grants while an earlier active's holders may still believe they hold their locks", {
        service: this.options.service,
        epoch,
        // The delay's reason, as /readyz and lockd status name it (takeover, released); the activation's is on "active: listening".
        why: delay.why,
        everyNameMs: termDelay.everyNameMs,
        names: termDelay.names.length,
        untilMs: Math.ceil(delay.endsAt - now),
      });
    }
    this.options.onRole?.("active", epoch);
  }

  private stepDown(epoch: number, reason: string): void {
    const server = this.server;
    this.server = null;
    this.delay = null;
    this.grace = null;
    // Reclaim on: the holders may reclaim from the next active, which holds every name back for them (nothing is promoted here).
    const reclaim = server !== null && this.publishes(server);
    this.options.log.warn("failover.stepping_down", "stepping down: ending every session with SHUTTING_DOWN, closing the listener", {
      service: this.options.service,
      epoch,
      reason,
      // Why renewals went unconfirmed, when they did: the last failure's kind and words.
      ...(this.failures.last === null ? {} : { lastFailure: `${this.failures.last.kind}: ${this.failures.last.error}` }),
      sessions: server?.sessionCount ?? 0,
      ...(reclaim ? { reclaim: true } : {}),
    });
    if (server !== null) {
      const stopped = server.stop(reclaim); // at once: the listener closes and every session ends now
      this.lastStop = Promise.all([this.lastStop, stopped]).then(() => {});
    }
    this.options.onRole?.("standby", epoch);
  }
}

/** Grants in a published set (0 for none). */
function countGrants(grants: ReadonlyMap<string, readonly ReclaimEntry[]> | null | undefined): number {
  let n = 0;
  if (grants !== null && grants !== undefined) for (const entries of grants.values()) n += entries.length;
  return n;
}
