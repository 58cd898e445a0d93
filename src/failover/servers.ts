/**
 * The coordinator's servers: the list a URL names (url.ts), walked in
 * order as libpq does with target_session_attrs=read-write. Bun.sql takes
 * one host per client, so each server gets a client of its own, opened
 * while the list is walked:
 *
 * - each server is asked `transaction_read_only` and `pg_is_in_recovery()`;
 *   one that is read-only or in recovery (a replica) is passed over, as is
 *   one that cannot be reached or refuses the login;
 * - the first writable one is used for every statement, until a statement
 *   on it fails (an error, no answer within the statement timeout, the
 *   connection closed, the server turned read-only): then its client is
 *   closed and the next statement walks the list again from the start;
 * - a server on which a statement got no answer in time goes to the end of
 *   the list for the walks after it, until it answers a statement again. An
 *   old primary whose Patroni died (no watchdog) still says it is writable,
 *   but with synchronous replication its commits wait for a standby that
 *   was promoted away: without this, every walk would pick it first again;
 * - at every connection it reads what the server tells any user about its
 *   replication (`synchronous_commit`, `synchronous_standby_names`,
 *   pg_is_in_recovery(), and the rows of pg_stat_replication it may see):
 *   the replication report (`ReplicationReport`), shown in the startup line,
 *   /readyz, /metrics and `lockd status`.
 *
 * Errors thrown from here are CoordinatorError, with a `kind` that says
 * what happened (the shell logs each kind with its own code and words).
 */
import type { SQL } from "bun";
import { type CoordinatorEndpoint, type CoordinatorTarget, formatEndpoint } from "./url.ts";

import type { ReplicationMode } from "./replication.ts";

export type { ReplicationMode } from "./replication.ts";

export interface ReplicationReport {
  readonly mode: ReplicationMode;
  /** As lockd's session sees it ("" when unknown). */
  readonly synchronousCommit: string;
  readonly synchronousStandbyNames: string;
  /** Walsenders in pg_stat_replication (any user sees how many); null when unknown. */
  readonly replicas: number | null;
  /** Of them, those in sync or quorum state; null when lockd's user may not see their state (it needs pg_read_all_stats) or unknown. */
  readonly synchronousReplicas: number | null;
}

/** The server in use and what it reported when lockd connected to it. */
export interface CoordinatorServer {
  /** host:port (or the socket directory:port). */
  readonly server: string;
  readonly replication: ReplicationReport;
}

/** A server passed over while walking the list, and why. */
export interface Skipped {
  readonly server: string;
  readonly why: string;
  readonly kind: CoordinatorErrorKind;
  /** The error the server (or Bun.sql) gave, if any. */
  readonly cause?: unknown;
}

/**
 * timeout: no answer within the statement timeout; login: the server
 * refused lockd's login; unreachable: no connection (refused, closed, the
 * server shutting down); read_only: the server is read-only or in
 * recovery; failed: the server answered the statement with an error.
 */
export type CoordinatorErrorKind = "timeout" | "login" | "unreachable" | "read_only" | "failed";

/** A statement, a connection or a walk of the list that failed, with why. */
export class CoordinatorError extends Error {
  constructor(
    message: string,
    readonly kind: CoordinatorErrorKind,
    /** The server it happened on; null for a walk of the whole list. */
    readonly server: string | null,
    options?: ErrorOptions,
    /** A walk of the list: each server and why it was passed over. */
    readonly skipped: readonly Skipped[] = [],
  ) {
    super(message, options);
    this.name = "CoordinatorError";
  }

  /** The SQLSTATE the server answered with, if it answered. */
  get sqlstate(): string | null {
    const errno = (this.cause as { errno?: unknown } | undefined)?.errno;
    return typeof errno === "string" ? errno : null;
  }
}

interface PgErrorLike {
  code?: string;
  errno?: string;
  message?: string;
}

/** What kind of failure a Bun.sql error is. */
export function kindOf(error: unknown): CoordinatorErrorKind {
  if (error instanceof CoordinatorError) return error.kind;
  const e = (error ?? {}) as PgErrorLike;
  const errno = typeof e.errno === "string" ? e.errno : "";
  if (errno === "28P01" || errno === "28000") return "login";
  if (errno === "25006") return "read_only";
  // 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now; class 08: connection exceptions.
  if (errno === "57P01" || errno === "57P02" || errno === "57P03" || errno.startsWith("08")) return "unreachable";
  const code = e.code ?? "";
  if (/TIMEOUT|TIMED_OUT/i.test(code)) return "timeout";
  if (/REFUSED|CLOSED|ECONN|ENOTFOUND|EAI_|UNREACH|EPIPE|RESET|TLS|SSL/i.test(code)) return "unreachable";
  if (errno !== "") return "failed";
  if (/refused|closed|reset|not connected/i.test(e.message ?? "")) return "unreachable";
  return "failed";
}

/** One line on a failure, in the words of its kind. */
export function describe(error: unknown): string {
  const e = (error ?? {}) as PgErrorLike;
  return e.message ?? String(error);
}

export interface ServerListOptions {
  readonly target: CoordinatorTarget;
  readonly applicationName: string;
  /** Seconds to wait for each server's connection (the URL's connect_timeout wins). */
  readonly connectTimeoutS: number;
  /** Every statement, and the questions asked at connection, get this long to answer (ms). */
  readonly statementTimeoutMs: number;
  /** Told of each connection to a server (at start and at every walk after a failure). */
  readonly onConnect?: (server: CoordinatorServer, skipped: readonly Skipped[]) => void;
}

const PROBE =
  "SELECT current_setting('transaction_read_only') AS read_only, pg_is_in_recovery() AS in_recovery, " +
  "current_setting('synchronous_commit') AS synchronous_commit, current_setting('synchronous_standby_names') AS synchronous_standby_names";
/** How many replicas, and (with pg_read_all_stats; else the state is NULL) how many are synchronous. */
const REPLICAS =
  "SELECT count(*)::int AS replicas, count(sync_state)::int AS visible, count(*) FILTER (WHERE sync_state IN ('sync', 'quorum'))::int AS synchronous FROM pg_stat_replication";
/** A database without pg_is_in_recovery() or these settings: only whether it may be written. */
const PROBE_PLAIN = "SHOW transaction_read_only";

/** The mode from what the server said. */
export function replicationMode(synchronousCommit: string, synchronousStandbyNames: string, replicas: number | null): ReplicationMode {
  const waits = ["on", "remote_write", "remote_apply"].includes(synchronousCommit);
  if (synchronousStandbyNames.trim() !== "" && waits) return "synchronous";
  if (replicas !== null && replicas > 0) return "asynchronous";
  if (synchronousStandbyNames.trim() !== "" && !waits) return "asynchronous";
  return "none";
}

function isOn(value: unknown): boolean {
  return value === true || value === "on" || value === "t" || value === "true";
}

/** Race `promise` with a timer: a CoordinatorError of kind timeout after `ms`. */
async function within<T>(promise: Promise<T>, ms: number, server: string, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new CoordinatorError(`${server} gave no answer to ${what} within ${ms} ms`, "timeout", server)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A client for one server, with its connection settings from the target.
 * `closed` is told when one of its connections closes (Bun.sql would
 * otherwise open another to the same server unseen: the list would not be
 * walked again, nor the server asked again what it is).
 */
function clientFor(endpoint: CoordinatorEndpoint, options: ServerListOptions, closed: () => void): SQL {
  const { target } = options;
  const socket = endpoint.host.startsWith("/");
  const auth = target.user === undefined ? "" : `${encodeURIComponent(target.user)}${target.password === undefined ? "" : `:${encodeURIComponent(target.password)}`}@`;
  const host = socket ? "localhost" : endpoint.host.includes(":") ? `[${endpoint.host}]` : endpoint.host;
  const database = target.database === undefined ? "" : `/${encodeURIComponent(target.database)}`;
  // Bun.SQL read here, not imported: reading it loads Bun's SQL client, about 3 ms of every server start (compiled, Bun 1.4) that has no coordinator.
  return new Bun.SQL({
    // One host, in the form Bun reads; nothing is left for the environment to fill in but what the URL left out.
    url: `postgres://${auth}${host}:${endpoint.port}${database}`,
    ...(socket ? { path: endpoint.host } : {}),
    ...(target.sslmode === undefined ? {} : { tls: target.sslmode }),
    adapter: "postgres",
    max: 4,
    connectionTimeout: target.connectTimeoutS ?? options.connectTimeoutS,
    idleTimeout: 0,
    connection: { application_name: target.applicationName ?? options.applicationName },
    onclose: closed,
  });
}

export class ServerList {
  private current: { readonly client: SQL; readonly server: CoordinatorServer } | null = null;
  private walking: Promise<{ readonly client: SQL; readonly server: CoordinatorServer }> | null = null;
  /** What the last connection reported (kept after the client is dropped: the view shows the last known). */
  private lastServer: CoordinatorServer | null = null;
  private closed = false;
  /** Servers whose last statement got no answer in time: asked after the others. */
  private readonly slow = new Set<string>();
  /** The servers have pg_is_in_recovery() (false once one said it has not: a database that only speaks the protocol). */
  private recoveryKnown = true;

  constructor(private readonly options: ServerListOptions) {}

  /** The server in use (or last used) and its replication report; null before the first connection. */
  server(): CoordinatorServer | null {
    return this.current?.server ?? this.lastServer;
  }

  /** The servers of the list, as host:port. */
  get servers(): readonly string[] {
    return this.options.target.endpoints.map(formatEndpoint);
  }

  /**
   * Run one statement on the server in use, walking the list first when
   * there is none. A failure drops the server (the next statement walks the
   * list again) and is thrown as a CoordinatorError.
   */
  async run<T>(statement: string, params: readonly unknown[] = [], what = "a statement"): Promise<T> {
    const chosen = await this.connection();
    try {
      const rows = (await within(chosen.client.unsafe(statement, [...params]), this.options.statementTimeoutMs, chosen.server.server, what)) as T;
      this.slow.delete(chosen.server.server);
      return rows;
    } catch (error) {
      this.drop(chosen, error);
      if (error instanceof CoordinatorError) throw error;
      throw new CoordinatorError(`${chosen.server.server}: ${describe(error)}`, kindOf(error), chosen.server.server, { cause: error });
    }
  }

  /**
   * Run a read, asking at the same time whether the server is still one
   * lockd may use (a standby only reads: without this it would go on
   * reading a primary that turned into a replica, or was made read-only).
   * A server that no longer is writable (or, with primary, went into
   * recovery) is dropped and the read fails with kind read_only.
   */
  async read<T>(statement: string, params: readonly unknown[], what: string): Promise<T> {
    const chosen = await this.connection();
    const primary = this.options.target.targetSessionAttrs === "primary";
    const check = primary && this.recoveryKnown ? "SELECT pg_is_in_recovery() AS unusable" : "SELECT current_setting('transaction_read_only') AS unusable";
    const ms = this.options.statementTimeoutMs;
    const server = chosen.server.server;
    try {
      const [state, rows] = await within(Promise.all([chosen.client.unsafe(check), chosen.client.unsafe(statement, [...params])]), ms, server, what);
      if (isOn(((state as Record<string, unknown>[])[0] ?? {}).unusable)) {
        throw new CoordinatorError(`${server} ${primary ? "is in recovery now (a replica)" : "is read-only now (transaction_read_only is on)"}`, "read_only", server);
      }
      this.slow.delete(server);
      return rows as T;
    } catch (error) {
      this.drop(chosen, error);
      if (error instanceof CoordinatorError) throw error;
      throw new CoordinatorError(`${server}: ${describe(error)}`, kindOf(error), server, { cause: error });
    }
  }

  /**
   * Run a statement whose server error the caller handles itself (a
   * duplicate key): such an error is returned, not thrown, and keeps the
   * server; any other failure is as in `run`.
   */
  async runExpecting<T>(statement: string, params: readonly unknown[], expected: (errno: string) => boolean, what: string): Promise<{ rows: T } | { errno: string }> {
    const chosen = await this.connection();
    try {
      const rows = (await within(chosen.client.unsafe(statement, [...params]), this.options.statementTimeoutMs, chosen.server.server, what)) as T;
      this.slow.delete(chosen.server.server);
      return { rows };
    } catch (error) {
      const errno = (error as PgErrorLike).errno;
      if (typeof errno === "string" && expected(errno)) return { errno };
      this.drop(chosen, error);
      if (error instanceof CoordinatorError) throw error;
      throw new CoordinatorError(`${chosen.server.server}: ${describe(error)}`, kindOf(error), chosen.server.server, { cause: error });
    }
  }

  /** The server in use, or a walk of the list (one at a time: statements sent meanwhile wait for the same walk). */
  private connection(): Promise<{ readonly client: SQL; readonly server: CoordinatorServer }> {
    if (this.closed) return Promise.reject(new CoordinatorError("the coordinator connection is closed", "unreachable", null));
    if (this.current !== null) return Promise.resolve(this.current);
    if (this.walking === null) {
      this.walking = this.walk().finally(() => {
        this.walking = null;
      });
    }
    return this.walking;
  }

  private drop(chosen: { readonly client: SQL; readonly server: CoordinatorServer }, error: unknown): void {
    if (kindOf(error) === "timeout") this.slow.add(chosen.server.server);
    if (this.current?.client !== chosen.client) return;
    this.current = null;
    void chosen.client.close({ timeout: 0 }).catch(() => {});
  }

  /** Ask each server in order; the first writable one is used. */
  private async walk(): Promise<{ readonly client: SQL; readonly server: CoordinatorServer }> {
    const skipped: Skipped[] = [];
    const all = this.options.target.endpoints;
    const order = [...all.filter((e) => !this.slow.has(formatEndpoint(e))), ...all.filter((e) => this.slow.has(formatEndpoint(e)))];
    for (const endpoint of order) {
      const server = formatEndpoint(endpoint);
      let chosenClient: SQL | null = null;
      const client = clientFor(endpoint, this.options, () => {
        // A connection of the server in use closed (the server restarted, a proxy cut it, a backend was terminated): walk again.
        if (chosenClient !== null && this.current?.client === chosenClient) this.drop(this.current, null);
      });
      let close = true;
      try {
        const ask = await this.ask(client, server);
        if (ask.unusable !== null) {
          skipped.push({ server, why: `is ${ask.unusable}`, kind: "read_only" });
          continue;
        }
        if (this.closed) throw new CoordinatorError("the coordinator connection is closed", "unreachable", null);
        const chosen = { client, server: { server, replication: ask.report } };
        chosenClient = client;
        close = false;
        this.current = chosen;
        this.lastServer = chosen.server;
        this.options.onConnect?.(chosen.server, skipped);
        return chosen;
      } catch (error) {
        const kind = kindOf(error);
        // A server that answers lockd with an error it cannot get past (no such database) ends the walk: another server is no answer to it.
        skipped.push({ server, why: error instanceof CoordinatorError ? error.message.replace(`${server} `, "") : describe(error), kind, cause: error });
        // As libpq: a server that refuses the login, or answers lockd with an error it cannot get past (no such
        // database), ends the walk: the next server of the list is no answer to it.
        if (kind === "login" || (kind === "failed" && !(error instanceof CoordinatorError))) {
          throw new CoordinatorError(`${server}: ${describe(error)}`, kind, server, { cause: error }, skipped);
        }
      } finally {
        if (close) void client.close({ timeout: 0 }).catch(() => {});
      }
    }
    throw walkFailed(skipped, this.options.target.targetSessionAttrs);
  }

  /** Is this server writable, and what does it say about its replication? */
  private async ask(client: SQL, server: string): Promise<{ unusable: string | null; report: ReplicationReport }> {
    // The first question opens the connection: it gets the connection's time too.
    const ms = this.options.statementTimeoutMs + 1000 * (this.options.target.connectTimeoutS ?? this.options.connectTimeoutS);
    const primary = this.options.target.targetSessionAttrs === "primary";
    let probe: Record<string, unknown>;
    try {
      probe = ((await within(client.unsafe(PROBE), ms, server, "the questions lockd asks at connection")) as Record<string, unknown>[])[0] ?? {};
    } catch (error) {
      // 42883: no pg_is_in_recovery(); 42704: no such setting. A database that speaks the protocol without them.
      const errno = (error as PgErrorLike).errno;
      if (errno !== "42883" && errno !== "42704") throw error;
      this.recoveryKnown = false;
      const plain = ((await within(client.unsafe(PROBE_PLAIN), ms, server, "SHOW transaction_read_only")) as Record<string, unknown>[])[0] ?? {};
      const readOnly = isOn(plain.transaction_read_only);
      const report: ReplicationReport = { mode: "unknown", synchronousCommit: "", synchronousStandbyNames: "", replicas: null, synchronousReplicas: null };
      return { unusable: readOnly ? "read-only (transaction_read_only is on)" : null, report };
    }
    const inRecovery = isOn(probe.in_recovery);
    const readOnly = isOn(probe.read_only);
    const none: ReplicationReport = { mode: "unknown", synchronousCommit: String(probe.synchronous_commit ?? ""), synchronousStandbyNames: String(probe.synchronous_standby_names ?? ""), replicas: null, synchronousReplicas: null };
    if (inRecovery) return { unusable: "in recovery (a replica)", report: none };
    if (readOnly && !primary) return { unusable: "read-only (transaction_read_only is on)", report: none };
    let replicas: number | null = null;
    let synchronousReplicas: number | null = null;
    try {
      const row = ((await within(client.unsafe(REPLICAS), ms, server, "how many replicas it has")) as Record<string, unknown>[])[0] ?? {};
      replicas = Number(row.replicas);
      synchronousReplicas = Number(row.visible) === replicas ? Number(row.synchronous) : null;
    } catch (error) {
      if (error instanceof CoordinatorError) throw error;
      // Not visible to this user (or no such view): the mode is judged from the settings alone.
    }
    const synchronousCommit = String(probe.synchronous_commit ?? "");
    const synchronousStandbyNames = String(probe.synchronous_standby_names ?? "");
    return {
      unusable: null,
      report: { mode: replicationMode(synchronousCommit, synchronousStandbyNames, replicas), synchronousCommit, synchronousStandbyNames, replicas, synchronousReplicas },
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    const current = this.current;
    this.current = null;
    const walking = this.walking;
    if (current !== null) await current.client.close({ timeout: 1 }).catch(() => {});
    if (walking !== null) {
      const chosen = await walking.catch(() => null);
      if (chosen !== null) await chosen.client.close({ timeout: 0 }).catch(() => {});
    }
  }
}

/** The walk found no server to use: one error naming each server and why. */
function walkFailed(skipped: readonly Skipped[], attrs: CoordinatorTarget["targetSessionAttrs"]): CoordinatorError {
  const kinds = new Set(skipped.map((s) => s.kind));
  // One kind for all: that kind; any server that answered read-only: no writable server; else unreachable.
  const kind: CoordinatorErrorKind = kinds.size === 1 ? skipped[0]!.kind : kinds.has("read_only") ? "read_only" : kinds.has("login") ? "login" : "unreachable";
  const each = skipped.map((s) => `${s.server} ${s.kind === "read_only" || s.kind === "timeout" ? s.why : `(${s.why})`}`).join("; ");
  const lead = skipped.length === 1
    ? kind === "read_only" ? `the coordinator server is not ${attrs === "primary" ? "a primary" : "writable"}` : "the coordinator server cannot be used"
    : kind === "read_only" ? `no coordinator server of the ${skipped.length} is ${attrs === "primary" ? "a primary" : "writable"}` : `no coordinator server of the ${skipped.length} can be used`;
  return new CoordinatorError(`${lead}: ${each}`, kind, null, undefined, skipped);
}
