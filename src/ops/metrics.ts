/**
 * /metrics: the engine's counters (kept on the hot paths as plain numbers,
 * see core/stats.ts) rendered at scrape time. No lock name and no session
 * id ever becomes a label: label values come only from fixed sets (session
 * state, grant path, end reason, admin action), so the number of series is
 * bounded whatever the clients do.
 *
 * A scrape costs the same with ten sessions or a million: every gauge is a
 * counter the engine keeps as it goes (sessions by state, Map sizes), never
 * a walk over sessions or locks, and the open-descriptor count is one
 * stat(2) of /proc/self/fd (Linux 6.2+ reports the count as its size),
 * never a listing of it. Where the kernel does not report it that way, the
 * listing is done at most once per FD_LIST_INTERVAL_MS and reused. The ops
 * server also shares one built body between the scrapes of one interval
 * (ops.ts).
 */
import { readdirSync, statSync } from "node:fs";
import { CLOSED_BY_PEER, LIVE_STATES, SESSION_STATE_NAMES, SessionState } from "../core/session.ts";
import { CLAIM_KIND_NAMES } from "../core/stats.ts";
import { ErrorCode } from "../protocol/constants.ts";
import { Exposition } from "./exposition.ts";
import { openFileLimit } from "../process/limits.ts";
import type { CoordinatorMetrics, LockDelayView, LockSource, ReplicationModeView } from "./sources.ts";

/** Every replication mode, as labels: exhaustive over the type, so a new mode cannot be left out. */
const REPLICATION_MODES = Object.keys({ synchronous: 0, asynchronous: 0, none: 0, unknown: 0 } satisfies Record<ReplicationModeView, 0>) as ReplicationModeView[];

/** Counters of the ops server itself. */
export class OpsStats {
  forceReleases = 0;
  kicks = 0;
  /** Admin requests refused for a missing, wrong or unconfigured token. */
  denied = 0;
  /** /metrics bodies built (scrapes within one interval share one). */
  metricsBuilt = 0;
}

export interface MetricsInput {
  /** The lock table's counters and sizes (and the lock listener's connections). */
  readonly locks: LockSource;
  readonly ready: boolean;
  readonly version: string;
  readonly ops: OpsStats;
  /** Log lines dropped by rate limits. */
  readonly logSuppressed: number;
  /** Ops requests whose answer is being made (the scrape's own included). */
  readonly opsRequests: number;
  /** Walks waiting in the ops server's queue of walks (slices.ts). */
  readonly walksQueued?: number;
  /** With --coordinator: the instance's role and the coordinator's figures. */
  readonly coordinator?: CoordinatorMetrics;
  /** The token counter reached the end of its generation. */
  readonly tokensExhausted?: boolean;
  /** The lock-delay as it stands, with the reclaim grace while one runs (null: none). */
  readonly lockDelay?: LockDelayView | null;
  /** This server's shard ("" for none) and the map's generation (lockd_shard_info). */
  readonly shard?: { readonly shard: string | null; readonly generation: number };
}

/** End reasons as label values: 0 is the peer's close, the rest are ERROR codes. */
const END_REASONS: readonly (readonly [number, string])[] = [
  [CLOSED_BY_PEER, "closed"],
  ...Object.entries(ErrorCode).map(([name, code]) => [code, name.toLowerCase()] as const),
];

/** Wall-clock start of the process in seconds (Prometheus' process_start_time_seconds). */
const START_TIME_SECONDS = (Date.now() - performance.now()) / 1000;

export function renderMetrics(input: MetricsInput): string {
  const { locks } = input;
  const stats = locks.counters;
  const out = new Exposition();

  out.single("lockd_build_info", "gauge", "Always 1; the version is a label.", 1, { version: input.version });
  if (input.shard !== undefined) {
    out.single("lockd_shard_info", "gauge", "Always 1; this server's shard (empty when it is not one of several) and the map's generation are labels.", 1, {
      shard: input.shard.shard ?? "",
      generation: String(input.shard.generation),
    });
  }
  out.single("lockd_ready", "gauge", "1 while accepting sessions; 0 from the first moment of shutdown, and on a standby of a coordinated service.", input.ready ? 1 : 0);

  out.family("lockd_sessions", "gauge", "Live sessions by state: connected (no ACQUIRE yet), waiting (queued), owner (holds its lock).");
  for (const state of LIVE_STATES) out.sample("lockd_sessions", stats.states[state]!, { state: SESSION_STATE_NAMES[state] });
  out.single("lockd_connections", "gauge", "Open TCP connections on the lock listener, including ones being closed.", locks.connectionCount);
  out.single("lockd_locks", "gauge", "Locks with a holder or waiters (a lock exists only while someone holds or wants it).", locks.lockCount);
  out.single("lockd_locks_held", "gauge", "Locks that have at least one holder.", stats.heldLocks);
  out.single("lockd_waiters", "gauge", "Sessions queued behind a held lock, over all locks.", stats.states[SessionState.WAITING]!);
  out.family("lockd_holders", "gauge", "Holders by the kind of their claim: exclusive (limit 1), shared (limit 1, SHARED), semaphore (a permit of a name with a limit above 1).");
  for (let kind = 0; kind < CLAIM_KIND_NAMES.length; kind++) out.sample("lockd_holders", stats.holdersByKind[kind]!, { kind: CLAIM_KIND_NAMES[kind]! });
  out.family("lockd_waiters_by_kind", "gauge", "Queued sessions by the kind of their claim (as lockd_holders).");
  for (let kind = 0; kind < CLAIM_KIND_NAMES.length; kind++) out.sample("lockd_waiters_by_kind", stats.waitersByKind[kind]!, { kind: CLAIM_KIND_NAMES[kind]! });
  out.single("lockd_sessions_opened_total", "counter", "Sessions accepted (connections not refused).", stats.opened);

  out.family("lockd_acquisitions_total", "counter", "Locks granted: immediate (free at ACQUIRE) or promoted (after waiting in the queue).");
  out.sample("lockd_acquisitions_total", stats.grantsImmediate, { path: "immediate" });
  out.sample("lockd_acquisitions_total", stats.grantsPromoted, { path: "promoted" });
  out.single("lockd_queued_total", "counter", "ACQUIREs that joined a queue (answered WAITING).", stats.queued);

  out.family("lockd_session_ends_total", "counter", "Sessions ended (and connections refused) by reason: closed by the peer, or the ERROR code the server sent.");
  for (const [code, reason] of END_REASONS) out.sample("lockd_session_ends_total", stats.ends[code]!, { reason });

  out.single("lockd_heartbeats_total", "counter", "HEARTBEAT frames answered.", stats.heartbeats);
  const delay = input.lockDelay ?? null;
  out.single("lockd_lock_delay_seconds", "gauge", "The longest lock-delay left: no grant of a held-back name before an earlier server's holders are past their deadlines (0: none).", delay === null ? 0 : delay.remainingMs / 1000);
  out.single("lockd_lock_delay_names", "gauge", "Names still held back one by one (published by the last clean stop); 0 while every name waits, or none.", delay === null ? 0 : delay.names);
  out.single("lockd_lock_delayed_total", "counter", "TRY claims refused with LOCK_DELAYED during a lock-delay.", stats.delayed);
  const grace = delay?.reclaim ?? null;
  out.single("lockd_reclaims_total", "counter", "Reclaims granted: holders of the last clean stop's published grants that took their locks back with their tokens.", stats.reclaims);
  out.single("lockd_reclaims_refused_total", "counter", "Reclaims refused with RECLAIM_REFUSED (not published, wrong token, outside the grace, reclaim off, or replaced by a newer connection).", stats.reclaimsRefused);
  out.single("lockd_reclaim_grace_seconds", "gauge", "Time left of the reclaim grace: until the last name the last clean stop published is no longer held back (0: none).", grace === null ? 0 : grace.remainingMs / 1000);
  out.single("lockd_reclaim_unclaimed", "gauge", "Grants the last clean stop published that are not reclaimed yet, while the grace runs (0: none, or the grace is over).", grace === null ? 0 : grace.published - grace.reclaimed);
  out.single("lockd_fencing_token_last", "gauge", "The last fencing token issued (0 before the first grant).", locks.tokensLast);
  out.single("lockd_tokens_exhausted", "gauge", "1 once the token counter reached the end of the map's generation: every claim is refused until a restart with a higher generation.", input.tokensExhausted === true ? 1 : 0);

  // Session capacity, and what was refused or cut to keep it (lock port; see limits.ts and conn.ts).
  if (Number.isFinite(locks.maxSessions)) out.single("lockd_session_limit", "gauge", "Live sessions beyond this are refused with OVERLOADED (the session limit).", locks.maxSessions);
  if (Number.isFinite(locks.maxSessionsPerSource)) {
    out.single("lockd_session_limit_per_source", "gauge", "Live sessions from one peer address beyond this are refused with OVERLOADED (the per-source session limit).", locks.maxSessionsPerSource);
    out.single("lockd_session_sources", "gauge", "Peer addresses with at least one live session.", locks.sourceCount);
  }
  out.family("lockd_sessions_refused_total", "counter", "Connections refused at accept with OVERLOADED, by the limit that refused them.");
  out.sample("lockd_sessions_refused_total", stats.refusedSessionLimit, { cause: "session_limit" });
  out.sample("lockd_sessions_refused_total", stats.refusedSourceLimit, { cause: "source_limit" });
  out.family("lockd_sessions_cut_total", "counter", "Sessions cut for sending without reading: pipelining (PROTOCOL_ERROR) or the outbox cap (IO_TIMEOUT).");
  out.sample("lockd_sessions_cut_total", stats.pipeliningCuts, { cause: "pipelining" });
  out.sample("lockd_sessions_cut_total", stats.outboxCuts, { cause: "outbox" });

  out.histogram("lockd_handover_duration_seconds", "Server side of a handover: from the event that ended an owner to the next waiter's ACQUIRED written.", stats.handoverSeconds);
  out.histogram("lockd_wait_duration_seconds", "Time promoted sessions waited in the queue, from ACQUIRE to grant.", stats.waitSeconds);
  out.histogram("lockd_hold_duration_seconds", "Time owners held their lock, from grant to the end of the session.", stats.holdSeconds);

  out.family("lockd_admin_actions_total", "counter", "Operator actions done through the ops server.");
  out.sample("lockd_admin_actions_total", input.ops.forceReleases, { action: "force_release" });
  out.sample("lockd_admin_actions_total", input.ops.kicks, { action: "kick" });
  out.single("lockd_admin_denied_total", "counter", "Admin requests refused: no token configured, token missing or wrong.", input.ops.denied);
  out.single("lockd_log_lines_suppressed_total", "counter", "Warning lines dropped by the log rate limit.", input.logSuppressed);

  out.single("lockd_ops_requests_in_flight", "gauge", "Ops requests whose answer is being made, this scrape's included (answers being written no longer count).", input.opsRequests);
  out.single("lockd_ops_walks_queued", "gauge", "Walks over the lock table or a lock's queue or holders waiting in the ops server's queue (listings, lock views, the page's snapshots); at 256, listings and lock views get 503 OPS_BUSY.", input.walksQueued ?? 0);

  if (input.coordinator !== undefined) coordinatorMetrics(out, input.coordinator);
  processMetrics(out);
  return out.text();
}

/** --coordinator: role, epoch and the coordinator's health (only with --coordinator). */
function coordinatorMetrics(out: Exposition, c: CoordinatorMetrics): void {
  out.family("lockd_role", "gauge", "1 for this instance's role in its coordinated service (active or standby), 0 for the other.");
  out.sample("lockd_role", c.role === "active" ? 1 : 0, { role: "active", service: c.service });
  out.sample("lockd_role", c.role === "standby" ? 1 : 0, { role: "standby", service: c.service });
  out.single("lockd_coordinator_epoch", "gauge", "The epoch of this instance's current or last active term (0 before the first).", c.epoch);
  out.single("lockd_coordinator_round_trip_seconds", "gauge", "Round trip of the last answered coordinator statement.", c.roundTripSeconds);
  out.single("lockd_coordinator_lease_seconds", "gauge", "The coordinator lease of this instance.", c.leaseSeconds);
  out.single("lockd_coordinator_renewals_failed_total", "counter", "Renewals of the active's coordinator row that got no answer in time.", c.renewalsFailed);
  out.single("lockd_coordinator_step_downs_total", "counter", "Times this instance stopped being active (no confirmed renewal for 0.8 x lease, or the row was taken).", c.stepDowns);
  out.single("lockd_coordinator_takeovers_total", "counter", "Times this instance became active (creating the row, or taking it over).", c.takeovers);
  out.single(
    "lockd_coordinator_takeover_refused",
    "gauge",
    "1 while this standby refuses to take over because its shard map differs from the one its service's active served (see the log and /readyz).",
    c.refusal === undefined ? 0 : 1,
  );
  if (c.coordinator !== undefined) {
    // One series per mode, 1 for the coordinator server's as this instance last connected to it (all 0 before).
    out.family("lockd_coordinator_replication", "gauge", "1 for the replication mode the coordinator server reported when this instance connected to it (synchronous, asynchronous, none, unknown).");
    for (const mode of REPLICATION_MODES) out.sample("lockd_coordinator_replication", c.coordinator?.replication.mode === mode ? 1 : 0, { mode });
  }
}

/** The standard process_* metrics, as far as this platform exposes them. */
function processMetrics(out: Exposition): void {
  const cpu = process.cpuUsage();
  const memory = process.memoryUsage();
  out.single("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", (cpu.user + cpu.system) / 1e6);
  out.single("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", memory.rss);
  out.single("process_heap_bytes", "gauge", "JavaScript heap in use, in bytes.", memory.heapUsed);
  out.single("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", Math.round(START_TIME_SECONDS * 1000) / 1000);
  const fds = openFds(performance.now());
  if (fds >= 0) out.single("process_open_fds", "gauge", "Number of open file descriptors.", fds);
  const maxFds = openFileLimit().soft ?? -1;
  if (maxFds >= 0 && Number.isFinite(maxFds)) out.single("process_max_fds", "gauge", "Maximum number of open file descriptors.", maxFds);
}

const FD_DIR = "/proc/self/fd";
/** Without a size from stat(2) (kernels before 6.2), list FD_DIR at most this often. */
export const FD_LIST_INTERVAL_MS = 10_000;
let listed = { at: -Infinity, count: -1 };

/** Open descriptors of this process, or -1 where /proc is missing. */
function openFds(now: number): number {
  try {
    const size = statSync(FD_DIR).size;
    if (size > 0) return size;
    if (now - listed.at >= FD_LIST_INTERVAL_MS) listed = { at: now, count: readdirSync(FD_DIR).length };
    return listed.count;
  } catch {
    return -1;
  }
}
