/**
 * The words for a coordinator's replication mode (servers.ts reads it): the
 * warning when it has replicas that commits do not wait for, and the short
 * report `lockd status` and the startup line give.
 */
import type { ReplicationModeView } from "../ops/sources.ts";
import type { ReplicationReport } from "./servers.ts";

/**
 * What the server says about its replication, as lockd's user sees it:
 *
 * - `synchronous`: `synchronous_standby_names` names standbys and
 *   `synchronous_commit` waits for them (on, remote_write, remote_apply): a
 *   commit returns only once a standby has it, so a primary cut off from
 *   its standbys commits nothing (no second writable coordinator can
 *   diverge from it);
 * - `asynchronous`: the server has replicas (walsenders in
 *   pg_stat_replication) but commits do not wait for them: after a
 *   failover the old primary can still commit, and the promoted replica may
 *   lack the last commits;
 * - `none`: no replica connected and no synchronous standby named (a
 *   single server, or replicas that are not connected now);
 * - `unknown`: the server does not answer the questions (a database that
 *   speaks PostgreSQL's protocol but has none of these settings).
 */
/** The modes ops shows (src/ops/sources.ts names them; the same union). */
export type ReplicationMode = ReplicationModeView;

/** Every mode, in the order the metric lists them. */
export const REPLICATION_MODES: readonly ReplicationMode[] = ["synchronous", "asynchronous", "none", "unknown"];


/** The warning's sentence: the risk and the setting. */
export function asynchronousWarning(r: ReplicationReport): string {
  const commit = r.synchronousStandbyNames.trim() !== "" && !["on", "remote_write", "remote_apply"].includes(r.synchronousCommit)
    ? `synchronous_commit is ${r.synchronousCommit}, so commits do not wait for the synchronous standbys named`
    : "no synchronous standby is named (synchronous_standby_names is empty)";
  return (
    `the coordinator has replicas but ${commit}: after a PostgreSQL failover the old primary can go on committing while a promoted replica takes writes too ` +
    "(two writable primaries: split brain, two actives of this service at once, the same tokens given twice), and the promoted replica may lack the last commits; " +
    "make commits wait for a standby (synchronous_standby_names with synchronous_commit on; with Patroni, synchronous_mode: true)"
  );
}

/** One line for people: "synchronous (1 of 1 replicas synchronous)", "asynchronous (2 replicas, none synchronous)", "none (no replica)". */
export function describeReplication(r: ReplicationReport): string {
  switch (r.mode) {
    case "synchronous":
      return `synchronous (synchronous_standby_names ${JSON.stringify(r.synchronousStandbyNames)}${r.synchronousReplicas === null ? "" : `; ${r.synchronousReplicas} of ${r.replicas ?? "?"} replicas synchronous now`})`;
    case "asynchronous":
      return `asynchronous (${r.replicas ?? "?"} replica${r.replicas === 1 ? "" : "s"}, commits wait for none: a failover can leave two writable primaries)`;
    case "none":
      return "none (no replica connected)";
    case "unknown":
      return "unknown (the server does not say)";
  }
}
