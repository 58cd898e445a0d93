/**
 * Every log event's stable code, with its level: the `event` field of each
 * log line. A code is `room.what` in lower snake case (the room is the
 * concern that logs it). Codes are API: each is documented in the "Logs"
 * section of docs/operations.md (test/docs/log-events.test.ts holds the
 * table, this one and the call sites together); a code is never renamed,
 * and one that goes away is never given to another event. The `msg`
 * sentence beside it is for people and may be reworded.
 *
 * The Logger's methods take a code of their own level only, so a typo or a
 * level that disagrees with this table fails the typecheck.
 */
import type { LogLevelName } from "./logger.ts";

export const LOG_EVENTS = {
  // startup (src/cli/serve.ts, src/cli/coordinator.ts)
  "server.listening": "info",
  "server.started": "info",
  "server.max_sessions_near_limit": "warn",
  "server.open_files_not_raised": "warn",
  // sessions (src/server/daemon.ts)
  "session.opened": "debug",
  "session.ended": "debug",
  "session.io_timeout": "warn",
  "session.protocol_error": "warn",
  // the data directory (src/cli/serve.ts, src/server/daemon.ts)
  "tokens.reserve_failed": "error",
  "tokens.floor_saved": "info",
  "tokens.floor_save_failed": "warn",
  "tokens.exhausted": "error",
  "leases.record_failed": "error",
  "leases.held_saved": "info",
  "leases.held_save_failed": "warn",
  // the lock-delay (src/server/daemon.ts, src/failover/shell.ts)
  "lock_delay.begins": "info",
  "lock_delay.over": "info",
  "lock_delay.unknown": "warn",
  // reclaim across a clean restart (src/cli/serve.ts, src/server/daemon.ts)
  "reclaim.max_lease_kept": "info",
  "reclaim.off_honouring": "info",
  "reclaim.published_invalid": "warn",
  "reclaim.published": "info",
  "reclaim.not_published": "warn",
  "reclaim.grace_over": "info",
  // signals and shutdown (src/server/daemon.ts)
  "shutdown.begins": "info",
  "shutdown.standby_begins": "info",
  "shutdown.grace": "info",
  "shutdown.grace_skipped": "info",
  "shutdown.stopped": "info",
  "shutdown.signal_repeated": "info",
  "shutdown.forced": "warn",
  // the active's term (src/failover/shell.ts, src/server/daemon.ts)
  "failover.advertise_loopback": "warn",
  "failover.advertise_none": "warn",
  "failover.active": "info",
  "failover.cannot_listen": "error",
  "failover.takeover_lost": "info",
  "failover.takeover_failed": "info",
  "failover.renewal_failed": "warn",
  "failover.raise_failed": "warn",
  "failover.stepping_down": "warn",
  "failover.released": "info",
  "failover.release_failed": "warn",
  "failover.row_regressed": "error",
  "failover.statement_failed": "debug",
  // the coordinator's servers (src/cli/coordinator.ts at start, src/failover/shell.ts after)
  "coordinator.connected": "info",
  "coordinator.replication_async": "warn",
  "coordinator.statement_failed": "warn",
  "coordinator.statement_timeout": "warn",
  "coordinator.login_refused": "error",
  "coordinator.unreachable": "warn",
  "coordinator.read_only": "warn",
  "coordinator.answering": "info",
  // a standby's view of the row (src/failover/shell.ts)
  "standby.watching": "info",
  "standby.row_released": "info",
  "standby.map_differs": "warn",
  "standby.refusing": "error",
  "standby.refusal_over": "info",
  // the ops listener and admin actions (src/ops/server.ts)
  "ops.request_failed": "error",
  "admin.refused": "warn",
  "admin.force_release": "info",
  "admin.kick": "info",
  "admin.target_changed": "info",
} as const satisfies Record<string, LogLevelName>;

export type LogEvent = keyof typeof LOG_EVENTS;

/** The codes logged at `level`. */
export type LogEventAt<L extends LogLevelName> = { [E in LogEvent]: (typeof LOG_EVENTS)[E] extends L ? E : never }[LogEvent];

export function isLogEvent(code: string): code is LogEvent {
  return Object.hasOwn(LOG_EVENTS, code);
}
