/**
 * The operator's page on the ops server: GET /ui (one HTML file, one script,
 * one stylesheet, embedded in the binary as text, and an icon) and the JSON
 * it polls, GET /ui/v1/board. docs/operations.md ("The operator's page") is its
 * reference.
 *
 * Cost, whatever the number of open pages:
 *
 * - one sample of the server's counters per INTERVAL_MS, always, into a ring
 *   of SAMPLES (O(1) each: counters and a histogram's 17 buckets), shared by
 *   every viewer for the plots;
 * - at most one snapshot of the locks per INTERVAL_MS, built only when a
 *   page asks and shared by every page: a small row per lock (its name, its
 *   holder's session, its sort keys; no strings are made), filled by a
 *   walk of the lock source's rows;
 * - a page's view of a snapshot (name prefix, order, at most MAX_ROWS rows,
 *   exact counts) is picked from the snapshot's rows with memory bounded by
 *   its row limit, once per snapshot and query (pages asking the same thing
 *   within an interval get the same built body, less the lock-delay: that
 *   is put in as it stands at each answer); only the rows it shows get
 *   their labels formatted (address, token), once per snapshot;
 * - both walks go through the ops server's queue of walks (slices.ts),
 *   with the /v1/locks listings: one slice of `scanSlice` in all per turn
 *   of the event loop, however many pages and queries, so lock traffic runs
 *   between slices.
 *
 * A lock's queue and the actions are the existing /v1 endpoints (a capped
 * view, and force-release and kick with the admin token as a bearer header).
 */
import type { DelayView } from "../../core/delay.ts";
import { SessionState } from "../../core/session.ts";
import { ErrorCode, MAX_NAME_LENGTH } from "../../protocol/constants.ts";
import { errorReply, type HttpReply, JSON_HEADERS } from "../http.ts";
import { SliceQueue } from "../slices.ts";
import type { HistogramCounts, LockCounters, LockSource, RoleView, TableRow } from "../sources.ts";
import { rowComparator, RowOrder, shownRow, type ShardView, sessionCounts, TopK } from "../views.ts";
import pageHtml from "./index.html" with { type: "text" };
import pageJs from "./ops-ui.js" with { type: "text" };
import pageCss from "./ops-ui.css" with { type: "text" };

/** One sample and one snapshot at most per this many ms; the page polls at this pace. */
export const INTERVAL_MS = 1000;
/** Samples kept: five minutes at one per second. */
export const SAMPLES = 300;
/** Most rows in one view of the table (the default is DEFAULT_ROWS); the counts are always exact. */
export const MAX_ROWS = 500;
export const DEFAULT_ROWS = 200;
/** Distinct views kept per snapshot; more are answered but built again each time. */
const MAX_VIEWS = 64;

/**
 * Sent with every /ui answer: no inline script or style (everything the page
 * runs is /ui/ops-ui.js from this server), no framing, no referrer, no
 * caching. (No content sniffing: http.ts sends nosniff with every answer.)
 */
export const UI_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cache-control": "no-store",
};

const encoder = new TextEncoder();
/** The page's icon (a padlock): /ui/favicon.svg, and /favicon.ico for browsers that ask there whatever the page says. */
const ICON = encoder.encode(
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><path d="M5 7V5a3 3 0 0 1 6 0v2" fill="none" stroke="#1d232b" stroke-width="1.6"/><rect x="3" y="7" width="10" height="8" rx="1.5" fill="#2557c7"/></svg>',
);
const ASSETS: Record<string, { type: string; body: Uint8Array }> = {
  "/ui/favicon.svg": { type: "image/svg+xml", body: ICON },
  "/favicon.ico": { type: "image/svg+xml", body: ICON },
  "/ui": { type: "text/html; charset=utf-8", body: encoder.encode(pageHtml as unknown as string) },
  "/ui/": { type: "text/html; charset=utf-8", body: encoder.encode(pageHtml as unknown as string) },
  "/ui/ops-ui.js": { type: "text/javascript; charset=utf-8", body: encoder.encode(pageJs) },
  "/ui/ops-ui.css": { type: "text/css; charset=utf-8", body: encoder.encode(pageCss) },
};
export const BOARD = "/ui/v1/board";

/** An answer of the page's routes: the security headers first. */
function page(reply: HttpReply): HttpReply {
  return { ...reply, headers: { ...UI_SECURITY_HEADERS, ...reply.headers } };
}

/** The page's errors are the ops server's, on one line. */
function failure(status: number, code: string, message: string, extra?: Record<string, string>): HttpReply {
  return page(errorReply(status, code, message, extra, true));
}

/** The value of a handover quantile from bucket counts: the upper bound of its bucket, in microseconds. */
function quantileUs(bounds: readonly number[], counts: ArrayLike<number>, total: number, q: number): number | null {
  if (total <= 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= rank) return Math.round(bounds[Math.min(i, bounds.length - 1)]! * 1e6 * 10) / 10;
  }
  return Math.round(bounds[bounds.length - 1]! * 1e6 * 10) / 10;
}

/** The series the plots draw, one column per series, in a ring. */
const SERIES = ["t", "connected", "waiting", "owner", "locks", "grantsPerSecond", "handoverP50Us", "handoverP99Us", "leaseExpired", "ioTimeout"] as const;
type SeriesName = (typeof SERIES)[number];

/** The last SAMPLES samples of the server's counters, one per INTERVAL_MS. */
export class Samples {
  private readonly columns = new Map<SeriesName, Float64Array>(SERIES.map((name) => [name, new Float64Array(SAMPLES)]));
  /** Samples taken so far; the newest is at (count - 1) % SAMPLES. */
  count = 0;
  private lastAt = 0;
  private lastGrants = 0;
  private lastLease = 0;
  private lastIo = 0;
  private readonly lastHandover: Float64Array;
  private readonly delta: Float64Array;

  /** The counters the last sample read: with --coordinator each active term's source has its own. */
  private counters: LockCounters;

  constructor(
    private readonly source: () => LockSource,
    now: number,
  ) {
    this.counters = source().counters;
    const stats = this.counters;
    this.lastHandover = new Float64Array(stats.handoverSeconds.counts.length);
    this.delta = new Float64Array(stats.handoverSeconds.counts.length);
    this.reset(now);
  }

  private reset(now: number): void {
    const stats = this.counters;
    this.lastAt = now;
    this.lastGrants = stats.grantsImmediate + stats.grantsPromoted;
    this.lastLease = stats.ends[ErrorCode.LEASE_EXPIRED]!;
    this.lastIo = stats.ends[ErrorCode.IO_TIMEOUT]!;
    this.lastHandover.set(stats.handoverSeconds.counts);
  }

  /** Take one sample: rates and quantiles over the time since the last one. */
  take(now: number, wallClock: number): void {
    const locks = this.source();
    const stats = locks.counters;
    if (stats !== this.counters) {
      // A new term's counters start from zero: start the differences over.
      this.counters = stats;
      this.reset(now);
    }
    const seconds = Math.max(0.001, (now - this.lastAt) / 1000);
    const slot = this.count % SAMPLES;
    const put = (name: SeriesName, value: number) => (this.columns.get(name)![slot] = value);
    const histogram: HistogramCounts = stats.handoverSeconds;
    const delta = this.delta;
    let handovers = 0;
    for (let i = 0; i < delta.length; i++) handovers += delta[i] = histogram.counts[i]! - this.lastHandover[i]!;
    put("t", wallClock);
    put("connected", stats.states[SessionState.CONNECTED]!);
    put("waiting", stats.states[SessionState.WAITING]!);
    put("owner", stats.states[SessionState.OWNER]!);
    put("locks", locks.lockCount);
    put("grantsPerSecond", Math.round(((stats.grantsImmediate + stats.grantsPromoted - this.lastGrants) / seconds) * 10) / 10);
    put("handoverP50Us", quantileUs(histogram.bounds, delta, handovers, 0.5) ?? Number.NaN);
    put("handoverP99Us", quantileUs(histogram.bounds, delta, handovers, 0.99) ?? Number.NaN);
    put("leaseExpired", stats.ends[ErrorCode.LEASE_EXPIRED]! - this.lastLease);
    put("ioTimeout", stats.ends[ErrorCode.IO_TIMEOUT]! - this.lastIo);
    this.count++;
    this.reset(now);
  }

  /** Each series oldest first (null where there was nothing to measure). */
  toJSON(): Record<SeriesName, (number | null)[]> {
    const n = Math.min(this.count, SAMPLES);
    const first = this.count - n;
    const out = {} as Record<SeriesName, (number | null)[]>;
    for (const name of SERIES) {
      const column = this.columns.get(name)!;
      const values: (number | null)[] = new Array(n);
      for (let i = 0; i < n; i++) {
        const value = column[(first + i) % SAMPLES]!;
        values[i] = Number.isNaN(value) ? null : value;
      }
      out[name] = values;
    }
    return out;
  }
}

/**
 * The instance's role in the board's answer, with --coordinator (null
 * without): an instance that is not the active serves no locks, so its
 * table is not the service's.
 */
export interface BoardRole {
  readonly role: RoleView["role"];
  readonly epoch: number;
  readonly service: string;
  /** The service's active (its instance id) and the ops address it advertises, as /readyz names them; null when unknown. */
  readonly active: string | null;
  readonly activeOps: string | null;
  /** A standby that will not take over: why. */
  readonly refusal?: string;
}

function boardRole(view: RoleView | undefined): BoardRole | null {
  if (view === undefined) return null;
  const role: BoardRole = { role: view.role, epoch: view.epoch, service: view.service, active: view.active, activeOps: view.activeOps };
  return view.refusal === undefined ? role : { ...role, refusal: view.refusal };
}

/** Two answers' roles are the same role (a change makes a new snapshot). */
function sameRole(a: BoardRole | null, b: BoardRole | null): boolean {
  return (
    a === b ||
    (a !== null && b !== null && a.role === b.role && a.epoch === b.epoch && a.service === b.service && a.active === b.active && a.activeOps === b.activeOps && a.refusal === b.refusal)
  );
}

/** The board shows this role's lock table: no --coordinator, or the active (a standby's table is not the service's). */
function servesLocks(role: BoardRole | null): boolean {
  return role === null || role.role === "active";
}

const NO_SHARD: ShardView = { name: null, shards: [], generation: 0 };

/** How a built view ends: the lock-delay, filled in per answer (withDelay). */
const NO_DELAY_TAIL = encoder.encode("null}");

/** The locks at one moment, shared by every page within INTERVAL_MS, and the views built from it. */
interface Snapshot {
  readonly startedAt: number;
  /** The role when the walk began: the rows are that role's table. */
  readonly role: BoardRole | null;
  /** When the walk ended (wall clock ms; 0 while it goes on) and what the counters said then. */
  wallClock: number;
  /** One per lock: sort keys and the holder, formatted only for the rows a view shows. */
  rows: TableRow[];
  totals: Record<string, unknown>;
  readonly views: Map<string, Promise<Uint8Array>>;
  ready: Promise<void>;
}

/** What a page asks for: a name prefix, an order, a direction and a row limit. */
interface BoardQuery {
  readonly prefix: string;
  readonly sort: RowOrder;
  readonly descending: boolean;
  readonly limit: number;
}

const QUERY = {
  prefix: /(?:^|&)prefix=([^&]*)/,
  sort: /(?:^|&)sort=([^&]*)/,
  dir: /(?:^|&)dir=([^&]*)/,
  limit: /(?:^|&)limit=([^&]*)/,
} as const;

/** The page's query, or an error message naming the parameter. */
export function parseBoardQuery(query: string): BoardQuery | { error: string } {
  const get = (key: keyof typeof QUERY) => QUERY[key].exec(query)?.[1];
  let prefix = "";
  const rawPrefix = get("prefix");
  if (rawPrefix !== undefined) {
    try {
      prefix = decodeURIComponent(rawPrefix.replace(/\+/g, "%20"));
    } catch {
      return { error: "prefix is not valid percent-encoded UTF-8" };
    }
    if (encoder.encode(prefix).length > MAX_NAME_LENGTH) return { error: `prefix is longer than a lock name can be (${MAX_NAME_LENGTH} bytes)` };
  }
  const sort = get("sort") ?? "name";
  if (!Object.hasOwn(RowOrder, sort)) return { error: `sort must be one of ${Object.keys(RowOrder).join(", ")}` };
  const dir = get("dir") ?? "asc";
  if (dir !== "asc" && dir !== "desc") return { error: "dir must be asc or desc" };
  const limitText = get("limit");
  const limit = limitText === undefined ? DEFAULT_ROWS : /^\d{1,4}$/.test(limitText) ? Number(limitText) : -1;
  if (limit < 1 || limit > MAX_ROWS) return { error: `limit must be a whole number in 1..${MAX_ROWS}` };
  return { prefix, sort: sort as RowOrder, descending: dir === "desc", limit };
}

export interface BoardOptions {
  /** Read at every use: with --coordinator the lock source changes with each active term. */
  readonly locks: LockSource;
  /** Locks (and rows) looked at per turn of the event loop. */
  readonly scanSlice: number;
  /**
   * The queue of the ops server's walks, shared so that one turn does one
   * slice of one walk in all (default: a queue of the board's own, of
   * scanSlice).
   */
  readonly slices?: SliceQueue;
  /** The server's version, for the page's header. */
  readonly version: string;
  /** Monotonic ms (default performance.now; tests pass a manual clock). */
  readonly now?: () => number;
  /** With --coordinator: this instance's role, read for each snapshot (omitted: the answer's role is null). */
  readonly role?: () => RoleView | undefined;
  /** Which shard of which map this server is: the `shard` of /readyz (default: no shards, generation 0). */
  readonly shard?: ShardView;
  /** The lock-delay as it stands (the `lockDelay` of /readyz); omitted: none. */
  readonly lockDelay?: () => DelayView | null;
}

export class Board {
  readonly samples: Samples;
  /** Snapshots built so far (for tests and the docs' claim of one per interval). */
  snapshotsBuilt = 0;
  /** Views of a snapshot built so far. */
  viewsBuilt = 0;
  private snapshot: Snapshot | null = null;
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly now: () => number;
  private readonly slices: SliceQueue;
  /** The queue is the board's own (not the ops server's): stopped with it. */
  private readonly ownsSlices: boolean;

  constructor(private readonly options: BoardOptions) {
    this.now = options.now ?? (() => performance.now());
    this.ownsSlices = options.slices === undefined;
    this.slices = options.slices ?? new SliceQueue(options.scanSlice);
    this.samples = new Samples(() => this.options.locks, this.now());
    this.timer = setInterval(() => {
      const now = this.now();
      this.samples.take(now, Date.now());
      // A snapshot no request can share any more is let go: it holds the holders' sessions, which may have ended.
      this.snapshot = this.live(now, this.snapshot?.role ?? null);
    }, INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    if (this.ownsSlices) this.slices.stop();
  }

  /** GET /ui, its files (script, stylesheet, icon; /favicon.ico too), and /ui/v1/board; null for any other path. */
  handle(method: string, path: string, query: string): HttpReply | Promise<HttpReply> | null {
    const asset = ASSETS[path];
    if (asset === undefined && path !== BOARD) {
      return path === "/ui" || path.startsWith("/ui/") ? failure(404, "NOT_FOUND", `no route ${path}; the page is /ui`) : null;
    }
    if (method !== "GET") return failure(405, "METHOD_NOT_ALLOWED", `${method} is not allowed here; use GET`, { allow: "GET" });
    if (asset !== undefined) return page({ status: 200, headers: { "content-type": asset.type }, body: asset.body });
    const parsed = parseBoardQuery(query);
    if ("error" in parsed) return failure(400, "BAD_QUERY", parsed.error);
    return this.view(parsed).then((body) => page({ status: 200, headers: JSON_HEADERS, body: this.withDelay(body) }));
  }

  /**
   * A built view's bytes with the lock-delay as it stands now: a view is
   * shared for an interval, the lock-delay is not (the page counts it down
   * from each answer, and must not see one that has ended). Without a
   * delay, the built bytes themselves (they end `"lockDelay":null}`).
   */
  private withDelay(built: Uint8Array): Uint8Array {
    const delay = this.options.lockDelay?.() ?? null;
    if (delay === null) return built;
    const head = built.subarray(0, built.length - NO_DELAY_TAIL.length);
    const tail = encoder.encode(`${JSON.stringify(delay)}}`);
    const body = new Uint8Array(head.length + tail.length);
    body.set(head);
    body.set(tail, head.length);
    return body;
  }

  /** The current snapshot, or a new one if the last began INTERVAL_MS ago or more and is complete. */
  private current(): Snapshot {
    const now = this.now();
    const role = boardRole(this.options.role?.());
    const last = this.live(now, role);
    if (last !== null) return last;
    const snapshot: Snapshot = { startedAt: now, role, wallClock: 0, rows: [], totals: {}, views: new Map(), ready: Promise.resolve() };
    snapshot.ready = this.walk(snapshot).catch((error: unknown) => {
      // A walk that failed is not shared: the next request starts another.
      if (this.snapshot === snapshot) this.snapshot = null;
      throw error;
    });
    this.snapshot = snapshot;
    this.snapshotsBuilt++;
    return snapshot;
  }

  /**
   * The snapshot still to be shared, or null once a request would build a
   * new one. One walk at a time: a walk still going after an interval (a
   * huge lock table) is waited for, not doubled. A complete snapshot taken
   * in another role (a standby became the active, or the other way) is not
   * shared: its rows are another term's table.
   */
  private live(now: number, role: BoardRole | null): Snapshot | null {
    const last = this.snapshot;
    if (last === null) return null;
    if (last.wallClock === 0) return last;
    return now - last.startedAt < INTERVAL_MS && sameRole(last.role, role) ? last : null;
  }

  /** Fill a snapshot from the lock source's rows, a slice per turn; times are relative to the walk's start. */
  private async walk(snapshot: Snapshot): Promise<void> {
    // The source the walk began on: with --coordinator a term can change mid-walk.
    const locks = this.options.locks;
    const rows = snapshot.rows;
    const now = this.now();
    // An instance that is not the active serves no locks: its table (empty, or its last term's) is not
    // walked, and its answer carries no rows, so a script reading it cannot take it for the service's state.
    if (servesLocks(snapshot.role)) await this.slices.walk(locks.rows(now), (row) => rows.push(row));
    snapshot.wallClock = Date.now();
    const stats = locks.counters;
    const handover = stats.handoverSeconds;
    snapshot.totals = {
      locks: snapshot.rows.length,
      sessions: sessionCounts(stats.states),
      grants: stats.grantsImmediate + stats.grantsPromoted,
      handoverSinceStart: {
        count: handover.count,
        p50Us: quantileUs(handover.bounds, handover.counts, handover.count, 0.5),
        p99Us: quantileUs(handover.bounds, handover.counts, handover.count, 0.99),
      },
      ends: {
        leaseExpired: stats.ends[ErrorCode.LEASE_EXPIRED]!,
        ioTimeout: stats.ends[ErrorCode.IO_TIMEOUT]!,
        forceReleased: stats.ends[ErrorCode.FORCE_RELEASED]!,
        kicked: stats.ends[ErrorCode.KICKED]!,
      },
    };
  }

  /** One page's view of the current snapshot, built once per snapshot and query. */
  private view(query: BoardQuery): Promise<Uint8Array> {
    const snapshot = this.current();
    const key = `${query.sort}\u0000${query.descending ? "d" : "a"}\u0000${query.limit}\u0000${query.prefix}`;
    const built = snapshot.views.get(key);
    if (built !== undefined) return built;
    const body = snapshot.ready.then(() => this.build(snapshot, query));
    if (snapshot.views.size < MAX_VIEWS) snapshot.views.set(key, body);
    return body;
  }

  private async build(snapshot: Snapshot, query: BoardQuery): Promise<Uint8Array> {
    this.viewsBuilt++;
    const view = new TopK<TableRow>(query.limit, rowComparator(query.sort, query.descending));
    const prefix = query.prefix;
    const rows = snapshot.rows;
    await this.slices.walk(rows.values(), (row) => {
      if (row.name.startsWith(prefix)) view.offer(row);
    });
    const picked = view.finish().map(shownRow);
    return encoder.encode(
      JSON.stringify({
        version: this.options.version,
        at: snapshot.wallClock,
        intervalMs: INTERVAL_MS,
        totals: snapshot.totals,
        series: this.samples,
        locks: {
          total: rows.length,
          matched: view.offered,
          prefix: query.prefix,
          sort: query.sort,
          dir: query.descending ? "desc" : "asc",
          limit: query.limit,
          rows: picked,
        },
        role: snapshot.role,
        shard: this.options.shard ?? NO_SHARD,
        // Last, and null here: withDelay puts in the value as it stands at each answer.
        lockDelay: null,
      }),
    );
  }
}
