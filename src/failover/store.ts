/**
 * The coordinator row in PostgreSQL, through Bun's built-in `Bun.sql`.
 *
 * One table, `lockd_coordinator`, one row per service; a second table,
 * `lockd_schema`, holds the schema version lockd checks at start. lockd
 * creates both when they are missing. Every statement is plain SQL (no
 * advisory locks, no PostgreSQL-only functions; `RETURNING` is the one
 * extension, which the PostgreSQL-protocol databases share), and every
 * statement that decides something compares only the service, the holder,
 * the epoch and the renewal counter: `renewed_at` is written for people
 * reading the table and never read by lockd.
 *
 * Schema version 2 added the lock-delay's columns: `lease_max_ms` (the
 * largest client lease the active may have granted, raised only through
 * GREATEST), `lease_carry_ms` (the largest lease of earlier epochs still
 * relied on) and `held` (a clean stop's published names, JSON). A version 1
 * database is migrated in place at start (ADD COLUMN, then the version row);
 * a row last written by a version 1 lockd has NULL in `lease_max_ms`.
 *
 * Schema version 3 added reclaim's columns (protocol.md section 14):
 * `reclaim_max_ms` (the service's cap M, raised only through GREATEST: a
 * takeover folds the taking instance's own cap in, and makes the term's
 * largest lease cover it, since a reclaimed holder is the new term's) and
 * `reclaim` (a clean stop's reclaimable grants, JSON, core/published.ts).
 * Versions 1 and 2 are migrated in place at start; a lockd of version 2
 * refuses a version 3 database, so an older lockd never takes over a row
 * whose holders it could not honour.
 *
 * The URL may name several servers (url.ts); servers.ts walks them in
 * order and uses the first writable one, walking again after a failure.
 * Statements that fail throw CoordinatorError (servers.ts), whose kind says
 * how: the role shell logs each kind in its own words.
 */
import type { HeldSet } from "../core/delay.ts";
import type { ReclaimEntry } from "../core/engine.ts";
import { isPublished, publishedEntries, recordOf } from "../core/published.ts";
import type { CoordinatorRow, Watched } from "./machine.ts";
import { type CoordinatorServer, CoordinatorError, ServerList, type Skipped } from "./servers.ts";
import { CoordinatorUrlError, type CoordinatorTarget, parseCoordinatorUrl, redactUrl } from "./url.ts";

export { redactUrl } from "./url.ts";

/** The schema this lockd reads and writes. */
export const SCHEMA_VERSION = 3;
export const TABLE = "lockd_coordinator";
export const SCHEMA_TABLE = "lockd_schema";

const COLUMNS = "epoch, holder, renewals, token_floor, lease_ms, lease_max_ms, lease_carry_ms, held, reclaim_max_ms, reclaim";

/** Every statement lockd sends, by name (a test reads them: no clock decides). */
export const STATEMENTS = {
  createSchemaTable: `CREATE TABLE IF NOT EXISTS ${SCHEMA_TABLE} (component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)`,
  insertSchemaVersion: `INSERT INTO ${SCHEMA_TABLE} (component, version) VALUES ('coordinator', $1)`,
  setSchemaVersion: `UPDATE ${SCHEMA_TABLE} SET version = $1 WHERE component = 'coordinator' AND version = $2`,
  readSchemaVersion: `SELECT version FROM ${SCHEMA_TABLE} WHERE component = 'coordinator'`,
  createTable:
    `CREATE TABLE IF NOT EXISTS ${TABLE} (` +
    "service VARCHAR(255) PRIMARY KEY, epoch BIGINT NOT NULL, holder VARCHAR(255) NOT NULL, renewals BIGINT NOT NULL, " +
    "token_floor BIGINT NOT NULL, lease_ms BIGINT NOT NULL, renewed_at TIMESTAMP WITH TIME ZONE, " +
    "lease_max_ms BIGINT, lease_carry_ms BIGINT, held TEXT, reclaim_max_ms BIGINT, reclaim TEXT)",
  /** Version 1 -> 2: the lock-delay's columns. */
  addLeaseMax: `ALTER TABLE ${TABLE} ADD COLUMN IF NOT EXISTS lease_max_ms BIGINT`,
  addLeaseCarry: `ALTER TABLE ${TABLE} ADD COLUMN IF NOT EXISTS lease_carry_ms BIGINT`,
  addHeld: `ALTER TABLE ${TABLE} ADD COLUMN IF NOT EXISTS held TEXT`,
  /** Version 2 -> 3: reclaim's columns. */
  addReclaimMax: `ALTER TABLE ${TABLE} ADD COLUMN IF NOT EXISTS reclaim_max_ms BIGINT`,
  addReclaim: `ALTER TABLE ${TABLE} ADD COLUMN IF NOT EXISTS reclaim TEXT`,
  read: `SELECT ${COLUMNS} FROM ${TABLE} WHERE service = $1`,
  create:
    `INSERT INTO ${TABLE} (service, epoch, holder, renewals, token_floor, lease_ms, renewed_at, lease_max_ms, lease_carry_ms, reclaim_max_ms) ` +
    "VALUES ($1, 1, $2, 0, $3, $4, CURRENT_TIMESTAMP, GREATEST($5, $6), 0, $6)",
  // The old maximum folds into the carried lease (never lowered here); this term starts from $8, or from the
  // reclaim cap (the row's or this instance's, $9) if larger: a reclaimed holder is this term's, with a lease up to it.
  takeover:
    `UPDATE ${TABLE} SET epoch = epoch + 1, holder = $2, renewals = 0, token_floor = token_floor + $3, lease_ms = $4, renewed_at = CURRENT_TIMESTAMP, ` +
    "lease_carry_ms = GREATEST(COALESCE(lease_carry_ms, 0), COALESCE(lease_max_ms, 0)), lease_max_ms = GREATEST($8, COALESCE(reclaim_max_ms, 0), $9), held = NULL, " +
    "reclaim_max_ms = GREATEST(COALESCE(reclaim_max_ms, 0), $9), reclaim = NULL " +
    `WHERE service = $1 AND epoch = $5 AND renewals = $6 AND holder = $7 RETURNING ${COLUMNS}`,
  renew:
    `UPDATE ${TABLE} SET renewals = renewals + 1, renewed_at = CURRENT_TIMESTAMP, lease_carry_ms = $4 ` +
    "WHERE service = $1 AND holder = $2 AND epoch = $3",
  raise:
    `UPDATE ${TABLE} SET lease_max_ms = GREATEST(COALESCE(lease_max_ms, 0), $4) WHERE service = $1 AND holder = $2 AND epoch = $3 RETURNING lease_max_ms`,
  reserve: `UPDATE ${TABLE} SET token_floor = token_floor + $4 WHERE service = $1 AND holder = $2 AND epoch = $3 RETURNING token_floor`,
  release:
    `UPDATE ${TABLE} SET holder = $4, renewals = renewals + 1, renewed_at = CURRENT_TIMESTAMP, lease_max_ms = $5, lease_carry_ms = $6, held = $7, reclaim = $8 ` +
    "WHERE service = $1 AND holder = $2 AND epoch = $3",
} as const;

/** What the role shell needs from a coordinator (the PostgreSQL store, or a model in tests). */
export interface CoordinatorStore {
  /**
   * The holder this instance writes as active from now on (holder.ts
   * activeHolder: with the ops address, known once the ops server is bound).
   * Set before the first statement (shell.ts start); never during a term.
   */
  setHolder(holder: string): void;
  read(): Promise<CoordinatorRow | null>;
  /** Insert the row (epoch 1, holder me, token_floor = floor + block); null when it exists already. */
  create(floor: number): Promise<CoordinatorRow | null>;
  /** The compare-and-set; null when the row is no longer `watched`. */
  takeover(watched: Watched): Promise<CoordinatorRow | null>;
  /** False when the row is no longer ours. `carryLeaseMs`: the carried lease to write. */
  renew(epoch: number, carryLeaseMs: number): Promise<boolean>;
  /** The row's largest lease after raising it to at least `leaseMs`; null when the row is no longer ours. */
  raise(epoch: number, leaseMs: number): Promise<number | null>;
  /** The new token floor; null when the row is no longer ours. */
  reserve(epoch: number): Promise<number | null>;
  /** False when the row was no longer ours. Publishes the names held at the stop and the leases to carry. */
  release(epoch: number, published: Published): Promise<boolean>;
  /** The server in use (or last used) and its replication report; absent on stores without servers (a model in tests). */
  server?(): CoordinatorServer | null;
  /** Be told of each connection after the first (a walk of the list after a failure); absent on models. */
  onReconnect?(listener: (server: CoordinatorServer, skipped: readonly Skipped[]) => void): void;
  close(): Promise<void>;
}

/** What a clean stop writes beside the released holder. */
export interface Published {
  readonly held: HeldSet;
  readonly maxLeaseMs: number;
  readonly carryLeaseMs: number;
  /** Reclaim: the stop's reclaimable grants, whose holders are told to reclaim them from the next active; null: none. */
  readonly reclaim?: ReadonlyMap<string, readonly ReclaimEntry[]> | null;
}

/** The `reclaim` column's text for a published set (null: none). */
export function encodeReclaim(grants: ReadonlyMap<string, readonly ReclaimEntry[]> | null | undefined): string | null {
  return grants === null || grants === undefined ? null : JSON.stringify(recordOf(grants));
}

/** A `reclaim` column's grants; null for NULL and for anything not well-formed (then no reclaim of it is granted). */
export function decodeReclaim(text: unknown): Map<string, ReclaimEntry[]> | null {
  if (text === null || text === undefined) return null;
  try {
    const value: unknown = JSON.parse(String(text));
    return isPublished(value) ? publishedEntries(value) : null;
  } catch {
    return null;
  }
}

/** The `held` column's text for a published set. */
export function encodeHeld(held: HeldSet): string {
  return JSON.stringify(held);
}

/** A `held` column's set; null for NULL; "*" for anything that is not a well-formed set (every name waits). */
export function decodeHeld(text: unknown): HeldSet | null {
  if (text === null || text === undefined) return null;
  try {
    const value: unknown = JSON.parse(String(text));
    if (value === "*") return "*";
    if (!Array.isArray(value)) return "*";
    for (const entry of value) {
      if (!Array.isArray(entry) || entry.length !== 2 || typeof entry[0] !== "string" || !(typeof entry[1] === "number" && entry[1] >= 0)) return "*";
    }
    return value as Array<[string, number]>;
  } catch {
    return "*";
  }
}

/** A coordinator that cannot be used: the message is one line for the operator. */
export class CoordinatorConfigError extends Error {
  constructor(
    message: string,
    options?: ErrorOptions,
    /** usage: the URL itself is wrong; schema: the tables are another version's; unavailable: the rest. */
    readonly kind: "usage" | "schema" | "unavailable" = "unavailable",
  ) {
    super(message, options);
    this.name = "CoordinatorConfigError";
  }
}

export interface PgStoreOptions {
  readonly url: string;
  readonly service: string;
  /** Written as holder: the instance id, with the map it serves (holder.ts activeHolder); setHolder replaces it. */
  readonly instance: string;
  /** Written as holder by a clean stop: "" (the default), or "(released) TAG" naming the map (holder.ts releasedHolder). */
  readonly releasedHolder?: string;
  readonly leaseMs: number;
  readonly block: number;
  /** The largest client lease a new term holds durably from its takeover (ms; a quarter of the lease by default: such leases add no delay). */
  readonly initialMaxLeaseMs?: number;
  /** This instance's reclaim cap M (ms; 0 or omitted: off), folded into the row's at creation and takeover. */
  readonly reclaimMaxLeaseMs?: number;
  /** Seconds to wait for each server's connection (the URL's connect_timeout wins). */
  readonly connectTimeoutS?: number;
  /** Each statement's bound (ms; default lease/2): one without an answer by then fails, and the list is walked again. */
  readonly statementTimeoutMs?: number;
}

function toRow(raw: Record<string, unknown>): CoordinatorRow {
  return {
    epoch: Number(raw.epoch),
    holder: String(raw.holder),
    renewals: Number(raw.renewals),
    tokenFloor: Number(raw.token_floor),
    leaseMs: Number(raw.lease_ms),
    maxLeaseMs: raw.lease_max_ms === null || raw.lease_max_ms === undefined ? null : Number(raw.lease_max_ms),
    carryLeaseMs: Number(raw.lease_carry_ms ?? 0),
    held: decodeHeld(raw.held),
    reclaimMaxLeaseMs: Number(raw.reclaim_max_ms ?? 0),
    reclaim: decodeReclaim(raw.reclaim),
  };
}

interface PgErrorLike {
  code?: string;
  errno?: string;
  message?: string;
}

/** One server's reason, in the words of the start errors (`where`: the URL, or a server of it). */
function describeOne(error: unknown, where: string): string {
  const e = (error ?? {}) as PgErrorLike;
  const detail = e.message ?? String(error);
  if (e.errno === "28P01" || e.errno === "28000") return `the coordinator ${where} refused the login (wrong user or password?): ${detail}`;
  if (e.errno === "3D000") return `the coordinator database in ${where} does not exist: ${detail}`;
  if (e.errno === "42501") return `the coordinator user in ${where} may not create or write the lockd tables: ${detail}`;
  if (error instanceof CoordinatorError && error.kind === "read_only") return `the coordinator ${where} ${detail}: lockd writes its row, so it needs the primary (list every server of the cluster in the URL, and lockd finds the one that is writable)`;
  const code = e.code ?? "";
  if (error instanceof CoordinatorError && error.kind === "timeout") return `cannot reach the coordinator ${where}: ${detail}`;
  if (/REFUSED|TIMEOUT|TIMED_OUT|ECONNREFUSED|ENOTFOUND|EAI_|UNREACH/i.test(code) || /refused|timed out|timeout/i.test(detail)) {
    return `cannot reach the coordinator ${where}: ${detail}`;
  }
  if (/PROTOCOL|UNEXPECTED|INVALID_MESSAGE|CONNECTION_CLOSED|MESSAGE/i.test(code) || /closed before/i.test(detail)) {
    return `the coordinator ${where} does not speak the PostgreSQL protocol (is it a PostgreSQL server?): ${detail}`;
  }
  return `cannot use the coordinator ${where}: ${detail}`;
}

/** A server passed over, in a few words. */
function shortReason(s: Skipped): string {
  const detail = (s.cause as PgErrorLike | undefined)?.message ?? s.why;
  switch (s.kind) {
    case "read_only":
    case "timeout":
      return s.why;
    case "login":
      return `refused the login (${detail})`;
    case "unreachable":
      return `cannot be reached (${detail})`;
    case "failed":
      return `answered with an error (${detail})`;
  }
}

/** One line on why the coordinator cannot be used at start. */
function describeStartError(error: unknown, url: string, servers: number): string {
  const where = redactUrl(url);
  if (!(error instanceof CoordinatorError)) return describeOne(error, where);
  const skipped = error.skipped;
  if (servers <= 1 || skipped.length === 0) {
    const only = skipped[0];
    if (only === undefined) return describeOne(error.cause ?? error, where);
    return describeOne(only.kind === "read_only" ? new CoordinatorError(only.why, "read_only", only.server) : (only.cause ?? error), where);
  }
  // Several servers: each with its reason, in the order they were asked.
  const each = skipped.map((s) => `${s.server} ${shortReason(s)}`);
  const lead = error.kind === "read_only" ? `no server of the coordinator ${where} is writable` : `no server of the coordinator ${where} can be used`;
  return `${lead}: ${each.join("; ")}`;
}

export class PgCoordinatorStore implements CoordinatorStore {
  /** The holder written as active: options.instance until setHolder. */
  private holder: string;
  private reconnectListener: ((server: CoordinatorServer, skipped: readonly Skipped[]) => void) | null = null;
  /** Connections so far: the first is the start's, the rest are walks after a failure. */
  private connections = 0;
  /** The servers the start's walk passed over. */
  private skippedFirst: readonly Skipped[] = [];
  private readonly servers: ServerList;

  private constructor(
    target: CoordinatorTarget,
    private readonly options: PgStoreOptions,
  ) {
    this.holder = options.instance;
    this.servers = new ServerList({
      target,
      applicationName: `lockd ${options.service}`,
      connectTimeoutS: options.connectTimeoutS ?? 10,
      statementTimeoutMs: options.statementTimeoutMs ?? Math.max(50, options.leaseMs / 2),
      onConnect: (server, skipped) => {
        if (this.connections++ > 0) this.reconnectListener?.(server, skipped);
        else this.skippedFirst = skipped;
      },
    });
  }

  setHolder(holder: string): void {
    this.holder = holder;
  }

  server(): CoordinatorServer | null {
    return this.servers.server();
  }

  /** The servers the first connection passed over, and why (for the start's log line). */
  skippedAtStart(): readonly Skipped[] {
    return this.skippedFirst;
  }

  onReconnect(listener: (server: CoordinatorServer, skipped: readonly Skipped[]) => void): void {
    this.reconnectListener = listener;
  }

  /**
   * Read the URL, connect (the first writable server of its list), create
   * the tables if missing and check the schema version. Throws
   * CoordinatorConfigError with one line for the operator.
   */
  static async open(options: PgStoreOptions): Promise<PgCoordinatorStore> {
    let target: CoordinatorTarget;
    try {
      target = parseCoordinatorUrl(options.url);
    } catch (error) {
      if (error instanceof CoordinatorUrlError) throw new CoordinatorConfigError(error.message, undefined, "usage");
      throw error;
    }
    const store = new PgCoordinatorStore(target, options);
    try {
      await store.ensureSchema();
    } catch (error) {
      await store.servers.close().catch(() => {});
      if (error instanceof CoordinatorConfigError) throw error;
      throw new CoordinatorConfigError(describeStartError(error, options.url, target.endpoints.length), { cause: error });
    }
    return store;
  }

  private async ensureSchema(): Promise<void> {
    const run = <T>(statement: string, params: readonly unknown[] = []) => this.servers.run<T>(statement, params, "the schema check");
    // Instances starting at once may race on CREATE TABLE IF NOT EXISTS (PostgreSQL then
    // reports a duplicate type or key) or on the version row: a later attempt sees the first's work.
    for (let attempt = 0; ; attempt++) {
      try {
        await run(STATEMENTS.createSchemaTable);
        let rows = await run<{ version: number }[]>(STATEMENTS.readSchemaVersion);
        if (rows.length === 0) {
          await run(STATEMENTS.insertSchemaVersion, [SCHEMA_VERSION]);
          rows = await run<{ version: number }[]>(STATEMENTS.readSchemaVersion);
        }
        let version = Number(rows[0]?.version);
        if (version === 1) {
          // Version 1 -> 2 in place: three nullable columns, then the version row (only from 1, so a race does it once).
          await run(STATEMENTS.createTable);
          await run(STATEMENTS.addLeaseMax);
          await run(STATEMENTS.addLeaseCarry);
          await run(STATEMENTS.addHeld);
          await run(STATEMENTS.setSchemaVersion, [2, 1]);
          version = 2;
        }
        if (version === 2) {
          // Version 2 -> 3 in place: reclaim's two nullable columns, then the version row.
          await run(STATEMENTS.createTable);
          await run(STATEMENTS.addReclaimMax);
          await run(STATEMENTS.addReclaim);
          await run(STATEMENTS.setSchemaVersion, [3, 2]);
          version = 3;
        }
        if (version !== SCHEMA_VERSION) {
          throw new CoordinatorConfigError(
            `the coordinator's lockd tables have schema version ${version} (${SCHEMA_TABLE}); this lockd expects version ${SCHEMA_VERSION}: ` +
              `use a lockd of the matching version, or another database`,
            undefined,
            "schema",
          );
        }
        await run(STATEMENTS.createTable);
        return;
      } catch (error) {
        const errno = error instanceof CoordinatorError ? error.sqlstate : (error as PgErrorLike).errno;
        // 23505: the catalog's unique index; 42P07: the relation; 42710: its row type ("type ... already exists").
        if (attempt < 4 && (errno === "23505" || errno === "42P07" || errno === "42710")) continue;
        throw error;
      }
    }
  }

  async read(): Promise<CoordinatorRow | null> {
    const rows = await this.servers.read<Record<string, unknown>[]>(STATEMENTS.read, [this.options.service], "the read of the row");
    return rows.length === 0 ? null : toRow(rows[0]!);
  }

  /** The largest lease a new term starts with. */
  private get initialMaxLeaseMs(): number {
    return this.options.initialMaxLeaseMs ?? Math.floor(this.options.leaseMs / 4);
  }

  async create(floor: number): Promise<CoordinatorRow | null> {
    const { service, leaseMs, block } = this.options;
    const maxLeaseMs = this.initialMaxLeaseMs;
    const reclaimMaxLeaseMs = this.options.reclaimMaxLeaseMs ?? 0;
    const done = await this.servers.runExpecting(STATEMENTS.create, [service, this.holder, floor + block, leaseMs, maxLeaseMs, reclaimMaxLeaseMs], (errno) => errno === "23505", "the creation of the row");
    if ("errno" in done) return null; // 23505: another instance created it first
    return { epoch: 1, holder: this.holder, renewals: 0, tokenFloor: floor + block, leaseMs, maxLeaseMs: Math.max(maxLeaseMs, reclaimMaxLeaseMs), carryLeaseMs: 0, held: null, reclaimMaxLeaseMs, reclaim: null };
  }

  async takeover(watched: Watched): Promise<CoordinatorRow | null> {
    const { service, leaseMs, block } = this.options;
    const rows = await this.servers.run<Record<string, unknown>[]>(STATEMENTS.takeover, [
      service,
      this.holder,
      block,
      leaseMs,
      watched.epoch,
      watched.renewals,
      watched.holder,
      this.initialMaxLeaseMs,
      this.options.reclaimMaxLeaseMs ?? 0,
    ], "the takeover");
    return rows.length === 0 ? null : toRow(rows[0]!);
  }

  async renew(epoch: number, carryLeaseMs: number): Promise<boolean> {
    const result = await this.servers.run(STATEMENTS.renew, [this.options.service, this.holder, epoch, carryLeaseMs], "the renewal");
    return (result as unknown as { count: number }).count === 1;
  }

  async raise(epoch: number, leaseMs: number): Promise<number | null> {
    const rows = await this.servers.run<Record<string, unknown>[]>(STATEMENTS.raise, [this.options.service, this.holder, epoch, leaseMs], "the raise of the largest lease");
    return rows.length === 0 ? null : Number(rows[0]!.lease_max_ms);
  }

  async reserve(epoch: number): Promise<number | null> {
    const { service, block } = this.options;
    const rows = await this.servers.run<Record<string, unknown>[]>(STATEMENTS.reserve, [service, this.holder, epoch, block], "the reservation of a token block");
    return rows.length === 0 ? null : Number(rows[0]!.token_floor);
  }

  async release(epoch: number, published: Published): Promise<boolean> {
    const result = await this.servers.run(STATEMENTS.release, [
      this.options.service,
      this.holder,
      epoch,
      this.options.releasedHolder ?? "",
      published.maxLeaseMs,
      published.carryLeaseMs,
      encodeHeld(published.held),
      encodeReclaim(published.reclaim),
    ], "the release");
    return (result as unknown as { count: number }).count === 1;
  }

  async close(): Promise<void> {
    await this.servers.close();
  }
}
