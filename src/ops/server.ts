/**
 * The ops server: health, readiness, metrics, a JSON view of the locks,
 * the two admin actions, and the operator's page (/ui, in ui/board.ts), on
 * Bun.serve (http.ts).
 * docs/operations.md is its reference.
 *
 * It shares the event loop with every lock session, so no request does
 * work that grows with sessions, locks or descriptors in one go: /metrics
 * reads counters and is built at most once per metricsMaxAgeMs, a page of
 * /v1/locks is at most MAX_PAGE locks, a lock view shows at most MAX_PAGE
 * waiters and MAX_PAGE holders a page (`next` and `holdersNext` for more),
 * every walk over the lock table or a lock's queue or holders (a listing,
 * a lock view, the /ui page's snapshots and views)
 * goes through one queue doing one slice of `scanSlice` per loop turn in
 * all (slices.ts), each page or view is built in the turn its walk ends,
 * and HEAD of the lock routes builds no body. A walk whose client has gone
 * is dropped before its next slice, and beyond MAX_QUEUED_WALKS a listing
 * or lock view is answered 503 OPS_BUSY at once.
 *
 * Lock names travel URL-encoded in the path, and a name may contain slashes,
 * so routes are matched on the raw (undecoded) path: everything after
 * `/v1/locks/` is the name, except that a raw path ending in `/force-release`
 * is always the admin action (POST; any other method is 405): a lock
 * literally named `a/force-release` is `a%2Fforce-release`, or `?name=`.
 * Clients' URL normalization swallows the names `.` and `..`, so every route
 * that takes a name also takes it as `?name=` on the bare route (this server
 * takes the target as sent).
 *
 * Every answer is JSON except /metrics; errors are
 * `{"error": {"code": "...", "message": "..."}}` (docs/operations.md lists
 * the statuses and codes).
 */
import { isIPv4, isIPv6, unbracket } from "../net/address.ts";
import { DEFAULT_OPS_IDLE_TIMEOUT_MS } from "../process/limits.ts";
import { MAX_NAME_LENGTH } from "../protocol/constants.ts";
import { checkText, TextCheck } from "../protocol/text.ts";
import { type Logger, RateLimit } from "../log/logger.ts";
import { AdminAuth, AuthResult, adminDisabled, givenTwice, unknownParam, describePrecondition, holderChanged, holderGone, type HolderPrecondition, holderPrecondition, parseSessionId } from "./admin.ts";
import { EXPOSITION_CONTENT_TYPE } from "./exposition.ts";
import { Placement } from "../shard/placement.ts";
import { NO_SHARDS, type ShardIdentity } from "../shard/identity.ts";
import { errorReply as fail, type HttpReply, type HttpRequest, HttpServer, JSON_HEADERS, jsonReply as json, NO_BODY } from "./http.ts";
import { SliceQueue } from "./slices.ts";
import { OpsStats, renderMetrics } from "./metrics.ts";
import type { LockDelayView, LockSource, RoleSource } from "./sources.ts";
import {
  ascending,
  decodeCursor,
  decodeHolderCursor,
  decodeWaiterCursor,
  holdersPage,
  holderWithToken,
  locksPage,
  type ShardView,
  shardViewOf,
  TopK,
  waitersPage,
} from "./views.ts";
import { Board } from "./ui/board.ts";

/** How the ops server's answers name settings. */
export interface OpsWords {
  /** How to start a server with an admin token, after "admin endpoints are disabled: ". */
  readonly adminToken: string;
  /** The advertised ops address setting, after "set". */
  readonly advertiseOps: string;
  /** How to admit a DNS name as a Host, after "to admit a DNS name, ". */
  readonly allowHost: string;
}

export const PLAIN_OPS_WORDS: OpsWords = {
  adminToken: "this server was started without an admin token",
  advertiseOps: "the advertised ops address",
  allowHost: "give it to the server as an allowed ops host",
};

export interface OpsOptions {
  readonly hostname: string;
  /** 0 picks a free port (tests). */
  readonly port: number;
  /**
   * The lock table: views, counters and the two admin actions. Read at
   * every use: with --coordinator each active term's server is a source of
   * its own (and a standby's, its last term's or an idle one).
   */
  readonly locks: LockSource;
  /** With --coordinator: the role layer (role and epoch in /readyz and /metrics). */
  readonly roles?: RoleSource;
  readonly auth: AdminAuth;
  readonly log: Logger;
  readonly version: string;
  /**
   * This server's shard, every shard's name and the map's generation: for
   * /metrics (lockd_shard_info) and the `shard` field of /readyz and every
   * /v1/locks answer. Omitted: a server without shards (generation 0).
   */
  readonly shard?: ShardIdentity;
  /** False from the first moment of shutdown. */
  readonly isReady: () => boolean;
  /** How answers name settings an operator changes (the CLI's flags); omitted: plain words. */
  readonly words?: OpsWords;
  /**
   * DNS names a request's Host may name (an ingress, a DNS name of this
   * host); IP addresses and localhost are always answered. Others get 421.
   */
  readonly allowHosts?: readonly string[];
  /** Why a running server is not ready (its /readyz `status`), or null: "tokens_exhausted". */
  readonly trouble?: () => string | null;
  /** The lock-delay as it stands, with the reclaim grace while one runs (null: none runs): /readyz, /metrics and the page show it. */
  readonly lockDelay?: () => LockDelayView | null;
  /** Serve HTTPS with this PEM certificate chain and key. */
  readonly tls?: { readonly cert: string; readonly key: string };
  /** Defaults: DEFAULT_OPS_LIMITS. */
  readonly limits?: Partial<OpsLimits>;
}

/** What one ops caller can take from the process. docs/operations.md explains the defaults. */
export interface OpsLimits {
  /**
   * A connection with no byte either way for this long after a request is
   * closed (--ops-idle-timeout; Bun.serve takes whole seconds, rounded up).
   */
  readonly idleTimeoutMs: number;
  /** Scrapes within this many ms of a built /metrics body get that body (0: build every time). */
  readonly metricsMaxAgeMs: number;
  /**
   * Locks of the engine's Map (or rows of a /ui snapshot) looked at per
   * turn of the event loop while choosing a page of /v1/locks or building
   * the /ui page's snapshot and views (default 16,384). A walk of more
   * continues on later turns, taking turns with the other walks (one slice
   * per turn in all), so lock traffic runs in between whatever the number
   * of locks or callers.
   */
  readonly scanSlice: number;
}

export const DEFAULT_OPS_LIMITS: OpsLimits = { idleTimeoutMs: DEFAULT_OPS_IDLE_TIMEOUT_MS, metricsMaxAgeMs: 1000, scanSlice: 16_384 };

const METRICS_HEADERS = { "content-type": EXPOSITION_CONTENT_TYPE, "cache-control": "no-store" };
const FORCE_RELEASE = "/force-release";
const LOCKS = "/v1/locks";
/** The largest page of /v1/locks, and the most waiters one lock view shows: also the defaults. */
const MAX_PAGE = 1000;
/** Walks (listings, lock views) the queue holds at most; a request beyond gets 503 OPS_BUSY at once. */
export const MAX_QUEUED_WALKS = 256;
/** The query parameters each admin action takes; any other is refused (400 BAD_REQUEST). */
const FORCE_RELEASE_PARAMS = ["name", "session", "token"] as const;
const KICK_PARAMS = ["lock", "shard"] as const;
const RETRY_AFTER = { "retry-after": "1" };
const encoder = new TextEncoder();

/** A HEAD answer that builds no body: the head says a JSON answer of a length not computed. */
function headOnly(): HttpReply {
  return { status: 200, headers: JSON_HEADERS, body: NO_BODY };
}

function notAllowed(method: string, allow: string): HttpReply {
  return fail(405, "METHOD_NOT_ALLOWED", `${method} is not allowed here; use ${allow}`, { allow });
}

/** A lock name from its URL-encoded form, or an error message. */
export function decodeLockName(encoded: string): { name: string } | { error: string } {
  let name: string;
  try {
    name = decodeURIComponent(encoded);
  } catch {
    return { error: "the lock name is not valid percent-encoded UTF-8" };
  }
  const bytes = encoder.encode(name);
  if (bytes.length === 0) return { error: "the lock name is empty" };
  if (bytes.length > MAX_NAME_LENGTH) return { error: `the lock name is ${bytes.length} bytes; the limit is ${MAX_NAME_LENGTH}` };
  if (checkText(bytes, 0, bytes.length) !== TextCheck.OK) return { error: "the lock name contains control characters" };
  return { name };
}

/** The raw path and query of a request target (origin form, or absolute form from a proxy). */
function splitTarget(target: string): { path: string; query: string } {
  let rest = target;
  if (!rest.startsWith("/")) {
    const scheme = rest.indexOf("//");
    const start = scheme < 0 ? -1 : rest.indexOf("/", scheme + 2);
    rest = start < 0 ? "/" : rest.slice(start);
  }
  const hash = rest.indexOf("#");
  const clean = hash < 0 ? rest : rest.slice(0, hash);
  const q = clean.indexOf("?");
  return q < 0 ? { path: clean, query: "" } : { path: clean.slice(0, q), query: clean.slice(q + 1) };
}

/** The raw (still encoded) value of `?name=`, or null. */
function rawQueryName(query: string): string | null {
  for (const part of query.split("&")) if (part.startsWith("name=")) return part.slice(5).replace(/\+/g, "%20");
  return null;
}

const PARAMS = {
  limit: /(?:^|&)limit=([^&]*)/,
  cursor: /(?:^|&)cursor=([^&]*)/,
  shard: /(?:^|&)shard=([^&]*)/,
  holders: /(?:^|&)holders=([^&]*)/,
  holdersCursor: /(?:^|&)holdersCursor=([^&]*)/,
} as const;

/** The raw value of a query parameter, or undefined. */
function param(query: string, key: keyof typeof PARAMS): string | undefined {
  return PARAMS[key].exec(query)?.[1];
}

/** `?limit=` (or `?holders=`; default and most: MAX_PAGE), or -1 when malformed or too large. */
function parseLimit(query: string, key: "limit" | "holders" = "limit"): number {
  const text = param(query, key);
  if (text === undefined) return MAX_PAGE;
  const limit = /^\d{1,7}$/.test(text) ? Number(text) : -1;
  return limit >= 1 && limit <= MAX_PAGE ? limit : -1;
}

function badLimit(what: string, key = "limit"): HttpReply {
  return fail(400, "BAD_LIMIT", `${key} must be a whole number in 1..${MAX_PAGE} (${what})`);
}

export class OpsServer {
  readonly stats = new OpsStats();
  readonly limits: OpsLimits;
  private readonly http: HttpServer;
  private readonly authWarnings = new RateLimit(10, 1000);
  /** The last /metrics body, when it was built, and the readiness it showed. */
  private metricsCache: { body: Uint8Array; at: number; ready: boolean } | null = null;
  /** Every walk over the lock table (listings, the page's snapshots and views): one slice per turn in all. */
  private readonly slices: SliceQueue;
  /** The operator's page, /ui (src/ops/ui). */
  readonly board: Board;

  private readonly words: OpsWords;
  /** DNS names (lower case) a Host header may name besides IP addresses and localhost. */
  private readonly allowedHosts: ReadonlySet<string>;

  /**
   * Whether `host` (a Host header: NAME[:PORT]) names this server: any IP
   * address (a browser that reached the server by address is on that
   * address's origin), localhost, or a DNS name it was given. A DNS name
   * nobody gave is how a rebinding page in an operator's browser would
   * come: it is refused.
   */
  private knowsHost(host: string): boolean {
    const name = unbracket(host.replace(/:\d*$/, "")).toLowerCase().replace(/\.$/, "");
    if (isIPv4(name) || isIPv6(name) || name === "localhost" || name.endsWith(".localhost")) return true;
    return this.allowedHosts.has(name);
  }

  constructor(private readonly options: OpsOptions) {
    this.limits = { ...DEFAULT_OPS_LIMITS, ...options.limits };
    this.words = options.words ?? PLAIN_OPS_WORDS;
    this.allowedHosts = new Set((options.allowHosts ?? []).map((h) => h.toLowerCase().replace(/\.$/, "")));
    const shard = options.shard;
    this.shardView = shardViewOf(shard ?? NO_SHARDS);
    this.placement = this.shardView.name !== null && this.shardView.shards.length > 1 ? new Placement(this.shardView.shards) : null;
    this.slices = new SliceQueue(this.limits.scanSlice);
    const roles = options.roles;
    this.board = new Board({
      // A getter: with --coordinator the lock source changes with each active term.
      get locks() { return options.locks; },
      scanSlice: this.limits.scanSlice,
      slices: this.slices,
      version: options.version,
      shard: this.shardView,
      ...(roles === undefined ? {} : { role: () => roles.view() }),
      ...(options.lockDelay === undefined ? {} : { lockDelay: options.lockDelay }),
    });
    this.http = new HttpServer({
      hostname: options.hostname,
      port: options.port,
      ...(options.tls === undefined ? {} : { tls: options.tls }),
      idleTimeoutMs: this.limits.idleTimeoutMs,
      handle: (request) => this.handle(request),
      failed: (error) => {
        options.log.error("ops.request_failed", "ops request failed", { error: String(error) });
        return fail(500, "INTERNAL", "internal error; see the server log");
      },
    });
  }

  get hostname(): string {
    return this.http.hostname ?? this.options.hostname;
  }

  get port(): number {
    return this.http.port ?? 0;
  }

  /** Close the listener and every connection. Idempotent. */
  async stop(): Promise<void> {
    this.slices.stop();
    this.board.stop();
    await this.http.stop();
  }

  /**
   * A request has reached this server since it started (a probe, a scrape,
   * the page, an API or admin call): someone may be watching a shutdown,
   * so the daemon keeps its grace period.
   */
  called = false;

  private handle(request: HttpRequest): HttpReply | Promise<HttpReply> {
    this.called = true;
    const { path, query } = splitTarget(request.target);
    // Probes are answered whatever Host they send; everything else only for a Host this server knows.
    if (path !== "/livez" && path !== "/healthz" && path !== "/readyz") {
      const host = request.header("host");
      if (host !== null && !this.knowsHost(host)) {
        return fail(421, "UNKNOWN_HOST", `this ops server does not answer for the Host ${JSON.stringify(host.slice(0, 100))}: a name it does not know (a page in a browser rebinding a DNS name to this address?); to admit a DNS name, ${this.words.allowHost}`);
      }
    }
    // HEAD is GET without the body (http.ts sends the head only), so `curl -I` works; the
    // lock routes do not even build it (headOnly).
    const head = request.method === "HEAD";
    const method = head ? "GET" : request.method;
    switch (path) {
      case "/livez":
      case "/healthz":
        return method === "GET" ? json(200, { status: "live" }) : notAllowed(method, "GET");
      case "/readyz":
        if (method !== "GET") return notAllowed(method, "GET");
        return this.readyz();
      case "/metrics":
        if (method !== "GET") return notAllowed(method, "GET");
        return { status: 200, headers: METRICS_HEADERS, body: this.metrics() };
      case LOCKS: {
        if (method !== "GET") return notAllowed(method, "GET");
        const raw = rawQueryName(query);
        return raw === null ? this.list(query, request, head) : this.show(raw, query, request, head);
      }
      case LOCKS + FORCE_RELEASE: {
        const raw = rawQueryName(query);
        if (raw !== null) return method === "POST" ? this.forceRelease(raw, query, request) : notAllowed(method, "POST");
        if (method === "POST") return fail(400, "BAD_NAME", "which lock? POST /v1/locks/NAME/force-release or /v1/locks/force-release?name=NAME");
        // GET without ?name=: the lock named "force-release", below.
      }
    }
    if (path.startsWith(`${LOCKS}/`)) {
      const rest = path.slice(LOCKS.length + 1);
      // A raw path ending in /force-release is always the action, whatever the method: a lock
      // whose name ends that way is viewed as NAME%2Fforce-release or through ?name=.
      if (rest.endsWith(FORCE_RELEASE) && rest.length > FORCE_RELEASE.length) {
        return method === "POST" ? this.forceRelease(rest.slice(0, -FORCE_RELEASE.length), query, request) : notAllowed(method, "POST");
      }
      return method === "GET" ? this.show(rest, query, request, head) : notAllowed(method, "GET");
    }
    if (path.startsWith("/ui") || path === "/favicon.ico") {
      const page = this.board.handle(method, path, query);
      if (page !== null) return page;
    }
    const kick = /^\/v1\/sessions\/([^/]*)\/kick$/.exec(path);
    if (kick !== null) return method === "POST" ? this.kick(kick[1]!, query, request) : notAllowed(method, "POST");
    return fail(404, "NOT_FOUND", `no route ${path}; see docs/operations.md`);
  }

  /**
   * 200 only when this instance serves locks; with --coordinator the body
   * names its role, the service's epoch, the active and the ops address it
   * advertises (a standby: as it last read them from the coordinator row).
   */
  private readyz(): HttpReply {
    const ready = this.options.isReady();
    const roles = this.options.roles?.view();
    const shard = this.shardView;
    // Ready during a lock-delay too: claims queue here, so clients must be sent here; the field says what remains.
    const lockDelay = this.options.lockDelay?.() ?? null;
    const trouble = this.options.trouble?.() ?? null;
    if (roles === undefined) return ready ? json(200, { status: "ready", shard, lockDelay }) : json(503, { status: trouble ?? "shutting_down", shard, lockDelay: null });
    const status = ready ? "ready" : (trouble ?? (roles.role === "standby" ? "standby" : "shutting_down"));
    return json(ready ? 200 : 503, {
      status,
      role: roles.role,
      epoch: roles.epoch,
      active: roles.active,
      activeOps: roles.activeOps,
      service: roles.service,
      shard,
      lockDelay: ready ? lockDelay : null,
      // A standby that will not take over (its map differs from the active's): why.
      ...(roles.refusal === undefined ? {} : { refusal: roles.refusal }),
      // The coordinator server in use and its replication mode (failover/servers.ts).
      ...(roles.coordinator === undefined ? {} : { coordinator: roles.coordinator }),
    });
  }

  /**
   * With --coordinator, an instance that is not the active serves no locks:
   * its lock table is empty (or its last term's), so "nobody holds it" or a
   * list would be its answer, not the service's. Lock routes answer 503
   * NOT_ACTIVE with its role instead (null: this instance serves locks).
   */
  private notActive(): HttpReply | null {
    const roles = this.options.roles?.view();
    if (roles === undefined || roles.role === "active") return null;
    const ask = roles.active === null
      ? "the coordinator row names no active now (released, or not created yet): ask again once an instance's /readyz answers 200"
      : roles.activeOps === null
        ? `ask the active instance, ${roles.active} (its /readyz answers 200); it gives no ops address (set ${this.words.advertiseOps} on it)`
        : `ask the active instance, ${roles.active}, at ${roles.activeOps} (its /readyz answers 200)`;
    return json(503, {
      error: { code: "NOT_ACTIVE", message: `this instance of service ${roles.service} is ${roles.role === "standby" ? "a standby" : "stopped"} (epoch ${roles.epoch}): it serves no locks; ${ask}` },
      role: roles.role,
      epoch: roles.epoch,
      active: roles.active,
      activeOps: roles.activeOps,
      service: roles.service,
      shard: this.shardView,
    });
  }

  /** The exposition text: built at most once per metricsMaxAgeMs (and again when readiness changes). */
  private metrics(): Uint8Array {
    const now = performance.now();
    const ready = this.options.isReady();
    const cached = this.metricsCache;
    if (cached !== null && cached.ready === ready && now - cached.at < this.limits.metricsMaxAgeMs) return cached.body;
    this.stats.metricsBuilt++;
    const body = encoder.encode(renderMetrics({
      locks: this.options.locks,
      ready,
      version: this.options.version,
      ops: this.stats,
      logSuppressed: this.options.log.suppressed,
      opsRequests: this.http.pending,
      walksQueued: this.slices.queued,
      lockDelay: this.options.lockDelay?.() ?? null,
      tokensExhausted: this.options.trouble?.() === "tokens_exhausted",
      ...(this.options.roles === undefined ? {} : { coordinator: this.options.roles.metrics() }),
      ...(this.options.shard === undefined ? {} : { shard: this.options.shard }),
    }));
    this.metricsCache = { body, at: now, ready };
    return body;
  }

  /** Which shard of which map this server is: the `shard` field of /readyz and /v1/locks answers. */
  private readonly shardView: ShardView;
  /** With --shard of several: where a name belongs (admin actions on another shard's name are refused). */
  private readonly placement: Placement | null;

  /**
   * 421 WRONG_SHARD when `name` belongs to another shard of this server's
   * map (null: it is this shard's, or there are no shards). An action asked
   * of the wrong shard must not answer "nobody holds it": the lock may be
   * held on its own shard.
   */
  private otherShard(name: string): HttpReply | null {
    const placement = this.placement;
    if (placement === null) return null;
    const owner = placement.shardOf(name);
    if (owner === this.shardView.name) return null;
    const { shards, generation } = this.shardView;
    return json(421, {
      error: {
        code: "WRONG_SHARD",
        message: `${JSON.stringify(name)} belongs to shard ${owner} of ${shards.join(",")} (generation ${generation}); this server is shard ${this.shardView.name}: ask shard ${owner}'s ops servers`,
      },
      shard: this.shardView,
    });
  }

  /** Ops requests whose answer is being made now (this one's included). */
  get requestsInFlight(): number {
    return this.http.pending;
  }

  /** One page of locks in name order after `?cursor=` (HEAD: the status and headers, nothing walked). */
  private list(query: string, request: HttpRequest, head: boolean): HttpReply | Promise<HttpReply> {
    const idle = this.notActive();
    if (idle !== null) return idle;
    const limit = parseLimit(query);
    if (limit < 0) return badLimit("locks per page; follow `next` for more");
    const cursor = param(query, "cursor");
    const after = cursor === undefined || cursor === "" ? null : decodeCursor(cursor);
    if (after === null && cursor !== undefined && cursor !== "") {
      return fail(400, "BAD_CURSOR", "cursor is not one this server gave: pass the `next` of the previous page, or none for the first");
    }
    if (head) return headOnly();
    const busy = this.busy();
    if (busy !== null) return busy;
    // The page is of the source walked: with --coordinator a term can change mid-walk.
    const locks = this.options.locks;
    const page = new TopK<string>(limit, ascending);
    // Always queued, even when the table fits in one slice: requests from
    // many connections arrive in one turn, and each page (up to MAX_PAGE
    // views and their JSON) is built in a turn of its own, not all at once.
    return this.slices
      .walk(locks.lockNames(), (name) => {
        if (after === null || name > after) page.offer(name);
      }, () => request.aborted)
      .then(() => {
        // A caller gone while the page was picked gets no page built (its JSON is the costly part).
        if (request.aborted) return fail(503, "GONE", "the client went away");
        const picked = page.finish();
        return json(200, { ...locksPage(locks, picked, page.offered > picked.length, performance.now()), shard: this.shardView });
      });
  }

  /**
   * One lock: its limit and mode, a page of its holders (the first
   * `holders` after `?holdersCursor=`, a `holdersNext` of an earlier view)
   * and a page of its waiters (the first `limit` after `?cursor=`, a
   * `next`), each picked by a walk through the slice queue, and the view
   * built in a turn of its own, like a page of the listing. HEAD answers
   * the status and headers only: whether the lock exists is a lookup, and
   * no view is built.
   */
  private show(encoded: string, query: string, request: HttpRequest, head: boolean): HttpReply | Promise<HttpReply> {
    const idle = this.notActive();
    if (idle !== null) return idle;
    const limit = parseLimit(query);
    if (limit < 0) return badLimit("waiters shown; `waiting` counts them all; follow `next` for more");
    const holderLimit = parseLimit(query, "holders");
    if (holderLimit < 0) return badLimit("holders shown; `holding` counts them all; follow `holdersNext` for more", "holders");
    const cursor = param(query, "cursor");
    const after = cursor === undefined || cursor === "" ? null : decodeWaiterCursor(cursor);
    if (after === null && cursor !== undefined && cursor !== "") {
      return fail(400, "BAD_CURSOR", "cursor is not one this server gave: pass the `next` of the previous view of this lock, or none for its first waiters");
    }
    const holdersCursor = param(query, "holdersCursor");
    const holdersAfter = holdersCursor === undefined || holdersCursor === "" ? null : decodeHolderCursor(holdersCursor);
    if (holdersAfter === null && holdersCursor !== undefined && holdersCursor !== "") {
      return fail(400, "BAD_CURSOR", "holdersCursor is not one this server gave: pass the `holdersNext` of the previous view of this lock, or none for its first holders");
    }
    const decoded = decodeLockName(encoded);
    if ("error" in decoded) return fail(400, "BAD_NAME", decoded.error);
    const name = decoded.name;
    // The view is of the source walked: with --coordinator a term can change mid-walk.
    const locks = this.options.locks;
    const walk = locks.queue(name);
    const holderWalk = locks.holders(name);
    if (walk === null || holderWalk === null) return this.noSuchLock(name);
    if (head) return headOnly();
    const busy = this.busy();
    if (busy !== null) return busy;
    const gone = () => request.aborted;
    return holdersPage(this.slices, holderWalk, holdersAfter, holderLimit, gone).then((holders) => {
      if (request.aborted) return fail(503, "GONE", "the client went away");
      return waitersPage(this.slices, walk, after, limit, gone).then((page) => {
        // A caller gone while the waiters were picked gets no view built.
        if (request.aborted) return fail(503, "GONE", "the client went away");
        const lock = locks.lock(name, performance.now(), 0, 0);
        if (lock === null) return this.noSuchLock(name);
        return json(200, { ...lock, holders: holders.holders, holdersNext: holders.next, waiters: page.waiters, next: page.next, shard: this.shardView });
      });
    });
  }

  /** Walks waiting in the queue (listings, lock views, the page's snapshots and views, token look-ups). */
  get walksQueued(): number {
    return this.slices.queued;
  }

  /** Walks skipped because their client had gone, and walks run to their end. */
  get walkCounts(): { readonly skipped: number; readonly finished: number } {
    return { skipped: this.slices.skipped, finished: this.slices.finished };
  }

  /** 503 OPS_BUSY (Retry-After: 1) when the queue of walks is full, else null. */
  private busy(): HttpReply | null {
    if (this.slices.queued < MAX_QUEUED_WALKS) return null;
    return fail(503, "OPS_BUSY", `${MAX_QUEUED_WALKS} listings and lock views are queued already; retry in a second`, RETRY_AFTER);
  }

  private noSuchLock(name: string): HttpReply {
    // The shard goes with the 404 too: "free" means something only from the name's own shard.
    return json(404, { error: { code: "NO_SUCH_LOCK", message: `nobody holds or waits for ${JSON.stringify(name)}` }, shard: this.shardView });
  }

  /** Who is asking, for the log: peer address and user agent. */
  private who(request: HttpRequest): Record<string, string> {
    return { by: request.remote, agent: request.header("user-agent") ?? "" };
  }

  /** Null when authorized, else the refusal. */
  private authorize(action: string, request: HttpRequest): HttpReply | null {
    const result = this.options.auth.check(request.header("authorization"));
    if (result === AuthResult.OK) return null;
    this.stats.denied++;
    this.options.log.limited(this.authWarnings, "warn", "admin.refused", "admin request refused", () => ({
      action,
      reason: result === AuthResult.UNCONFIGURED ? "no admin token configured" : result === AuthResult.MISSING ? "no bearer token" : "wrong token",
      ...this.who(request),
    }));
    switch (result) {
      case AuthResult.UNCONFIGURED:
        return fail(403, "ADMIN_DISABLED", adminDisabled(this.words.adminToken));
      case AuthResult.MISSING:
        return fail(401, "UNAUTHORIZED", "send Authorization: Bearer <admin token>", { "www-authenticate": 'Bearer realm="lockd"' });
      case AuthResult.WRONG:
        return fail(401, "UNAUTHORIZED", "the admin token is wrong", { "www-authenticate": 'Bearer realm="lockd", error="invalid_token"' });
    }
  }

  /**
   * End a holder of a lock. `?session=ID` and `?token=T` name the holder
   * meant, among all of a semaphore's or shared lock's holders: that one is
   * released; if none holds so (it left, and a waiter may have been
   * promoted meanwhile), 409 HOLDER_CHANGED with nothing released. Without
   * them, the oldest holder (the owner of an exclusive lock) is released.
   * A token alone is looked for by a walk of the holders through the slice
   * queue; the holder found is checked again in the turn it is released.
   */
  private forceRelease(encoded: string, query: string, request: HttpRequest): HttpReply | Promise<HttpReply> {
    const denied = this.authorize("force-release", request) ?? this.notActive();
    if (denied !== null) return denied;
    const unknown = unknownParam(query, FORCE_RELEASE_PARAMS) ?? givenTwice(query, ["name"]);
    if (unknown !== null) return fail(400, "BAD_REQUEST", unknown);
    const decoded = decodeLockName(encoded);
    if ("error" in decoded) return fail(400, "BAD_NAME", decoded.error);
    const name = decoded.name;
    const want = holderPrecondition(query);
    if ("error" in want) return fail(400, "BAD_PRECONDITION", want.error);
    const misplaced = this.otherShard(name);
    if (misplaced !== null) return misplaced;
    if (want.session !== null || want.token === null) return this.release(name, want, want.session, request);
    const walk = this.options.locks.holders(name);
    if (walk === null) return this.release(name, want, null, request);
    const token = Number(want.token);
    // A token beyond what a holder can have is nobody's: no walk.
    if (!Number.isSafeInteger(token)) return this.release(name, want, null, request);
    return holderWithToken(this.slices, walk, token).then((session) => {
      if (request.aborted) return fail(503, "GONE", "the client went away");
      return this.release(name, want, session === 0 ? null : session, request);
    });
  }

  /**
   * Force-release's act, in one turn: the holder meant (session `target`;
   * null with a precondition: none found) is checked against `want` and
   * released, or the answer says why not.
   */
  private release(name: string, want: HolderPrecondition, target: number | null, request: HttpRequest): HttpReply {
    const locks = this.options.locks;
    const now = performance.now();
    const asked = describePrecondition(want);
    if (asked !== "") {
      // Looked up and acted on in the same turn of the loop: nothing changes hands in between.
      const lock = locks.lock(name, now, 0, 0);
      const oldest = lock?.holder ?? null;
      if (lock === null || oldest === null) return fail(404, "NOT_HELD", `nobody holds ${JSON.stringify(name)} now (not the ${asked} asked for): nothing to release`);
      const holder = target === null ? null : locks.holderOf(name, target, now);
      const changed = holder !== null ? holderChanged(name, holder, want) : lock.holding === 1 ? holderChanged(name, oldest, want) : holderGone(name, lock.holding, oldest, want);
      if (changed !== null) {
        const shown = holder ?? oldest;
        this.options.log.info("admin.target_changed", "admin force-release refused: the holder changed", {
          ...this.who(request),
          action: "force-release",
          lock: name,
          asked,
          session: shown.session,
          token: shown.token,
        });
        return json(409, { error: { code: "HOLDER_CHANGED", message: changed }, holder: shown });
      }
    }
    const done = locks.forceRelease(name, now, target ?? undefined);
    if (done === null) return fail(404, "NOT_HELD", `nobody holds ${JSON.stringify(name)}: nothing to release`);
    const { released, promoted, promotedCount, holding, waiting } = done;
    this.stats.forceReleases++;
    this.options.log.info("admin.force_release", "admin force-release", {
      ...this.who(request),
      lock: name,
      session: released.session,
      owner: released.owner,
      token: released.token,
      promoted: promoted?.session ?? null,
      ...(promotedCount > 1 ? { promotedCount } : {}),
    });
    return json(200, { lock: name, released, promoted, promotedCount, holding, waiting });
  }

  private kick(idText: string, query: string, request: HttpRequest): HttpReply {
    const denied = this.authorize("kick", request) ?? this.notActive();
    if (denied !== null) return denied;
    const unknown = unknownParam(query, KICK_PARAMS) ?? givenTwice(query, KICK_PARAMS);
    if (unknown !== null) return fail(400, "BAD_REQUEST", unknown);
    // Session ids are per server: `?shard=` says which shard's session is meant (lockd kick with a map of one shard).
    const raw = param(query, "shard");
    let asked = raw;
    try {
      if (raw !== undefined) asked = decodeURIComponent(raw);
    } catch {
      // not valid percent-encoding: compared as it came, so it matches no shard
    }
    if (asked !== undefined && asked !== (this.shardView.name ?? "")) {
      const here = this.shardView.name === null ? "a server without shards" : `shard ${this.shardView.name}`;
      return json(421, { error: { code: "WRONG_SHARD", message: `this server is ${here}, not shard ${asked}: session ${idText} here is another shard's session` }, shard: this.shardView });
    }
    const id = parseSessionId(idText);
    if (id === null) return fail(400, "BAD_SESSION_ID", `${JSON.stringify(idText)} is not a session id (a positive whole number)`);
    // `?lock=NAME`: the lock the session was seen waiting for; a session of that id waiting for another is not the one meant.
    const rawLock = /(?:^|&)lock=([^&]*)/.exec(query)?.[1];
    let lock: string | undefined;
    if (rawLock !== undefined) {
      const decoded = decodeLockName(rawLock.replace(/\+/g, "%20"));
      if ("error" in decoded) return fail(400, "BAD_NAME", decoded.error);
      lock = decoded.name;
    }
    const done = this.options.locks.kick(id, performance.now(), lock);
    if ("refused" in done) {
      if (done.refused === "unknown") return fail(404, "NO_SUCH_SESSION", `no live session ${id}: nothing to kick`);
      if (done.refused === "elsewhere") {
        this.options.log.info("admin.target_changed", "admin kick refused: the session waits for another lock", {
          ...this.who(request),
          action: "kick",
          lock: done.lock,
          asked: `lock ${JSON.stringify(lock)}`,
          session: id,
        });
        return fail(409, "SESSION_CHANGED", `session ${id} waits for ${JSON.stringify(done.lock)}, not for ${JSON.stringify(lock)} as asked: not the session meant, nothing was kicked`);
      }
      const what = done.refused === "owner" ? `holds ${JSON.stringify(done.lock)}; use force-release` : "has not sent ACQUIRE yet";
      return fail(409, "NOT_WAITING", `session ${id} is not waiting: it ${what}`);
    }
    const { kicked, lock: name } = done;
    this.stats.kicks++;
    this.options.log.info("admin.kick", "admin kick", { ...this.who(request), lock: name, session: id, owner: kicked.owner, position: kicked.position });
    return json(200, { lock: name, kicked });
  }
}
