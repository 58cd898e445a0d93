/**
 * The ops server (Bun.serve): health, readiness, metrics, a JSON view of the
 * locks, and the two admin actions. docs/operations.md is its reference.
 *
 * Lock names travel URL-encoded in the path, and a name may contain slashes,
 * so routes are matched on the raw (undecoded) path: everything after
 * `/v1/locks/` is the name, except that a POST must end in `/force-release`
 * (a lock literally named `a/force-release` is `a%2Fforce-release`). URL
 * normalization swallows the names `.` and `..`, so every route that takes a
 * name also takes it as `?name=` on the bare route.
 *
 * Every answer is JSON except /metrics; errors are
 * `{"error": {"code": "...", "message": "..."}}` with 400, 401, 403, 404,
 * 405 or 409.
 */
import type { Server } from "bun";
import { SessionState } from "../core/session.ts";
import { MAX_NAME_LENGTH } from "../protocol/constants.ts";
import { checkText, TextCheck } from "../protocol/text.ts";
import { type Logger, RateLimit } from "../log.ts";
import { AdminAuth, AuthResult, HOW_TO_SET_TOKEN } from "./admin.ts";
import { EXPOSITION_CONTENT_TYPE } from "./exposition.ts";
import { OpsStats, renderMetrics } from "./metrics.ts";
import type { Roles } from "./roles.ts";
import type { LockServer } from "./server.ts";
import { holderView, lockView, locksView, positionOf, waiterView } from "./views.ts";

export interface OpsOptions {
  readonly hostname: string;
  /** 0 picks a free port (tests). */
  readonly port: number;
  readonly server: Pick<LockServer, "engine" | "connectionCount">;
  /** With --coordinator: the role layer (role and epoch in /readyz and /metrics). */
  readonly roles?: Pick<Roles, "view" | "metrics">;
  readonly auth: AdminAuth;
  readonly log: Logger;
  readonly version: string;
  /** False from the first moment of shutdown. */
  readonly isReady: () => boolean;
  /** Serve HTTPS with this PEM certificate chain and key. */
  readonly tls?: { readonly cert: string; readonly key: string };
}

const JSON_HEADERS = { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" };
const FORCE_RELEASE = "/force-release";
const LOCKS = "/v1/locks";
const DEFAULT_LIMIT = 1000;
const MAX_LIMIT = 100_000;
/** Waiters shown per lock in the list view (the single-lock view takes ?limit=). */
const LIST_WAITERS = 100;
const encoder = new TextEncoder();

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(`${JSON.stringify(body, null, 2)}\n`, { status, headers: { ...JSON_HEADERS, ...headers } });
}

function fail(status: number, code: string, message: string, headers?: Record<string, string>): Response {
  return json(status, { error: { code, message } }, headers);
}

function notAllowed(method: string, allow: string): Response {
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

/** The raw path and query of a request URL (Bun has already removed dot segments). */
function splitUrl(url: string): { path: string; query: string } {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  const rest = start < 0 ? "/" : url.slice(start);
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

/** `?limit=` (default 1000), or -1 when malformed. */
function parseLimit(query: string): number {
  const text = /(?:^|&)limit=([^&]*)/.exec(query)?.[1];
  if (text === undefined) return DEFAULT_LIMIT;
  const limit = /^\d{1,7}$/.test(text) ? Number(text) : -1;
  return limit >= 1 && limit <= MAX_LIMIT ? limit : -1;
}

function badLimit(): Response {
  return fail(400, "BAD_LIMIT", `limit must be a whole number in 1..${MAX_LIMIT}`);
}

export class OpsServer {
  readonly stats = new OpsStats();
  private readonly http: Server<undefined>;
  private readonly authWarnings = new RateLimit(10, 1000);

  constructor(private readonly options: OpsOptions) {
    this.http = Bun.serve({
      hostname: options.hostname,
      port: options.port,
      ...(options.tls === undefined ? {} : { tls: { cert: options.tls.cert, key: options.tls.key } }),
      fetch: (request, server) => this.handle(request, server),
      error: (error) => {
        options.log.error("ops request failed", { error: String(error) });
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

  /** Close the listener and every open request. Idempotent. */
  async stop(): Promise<void> {
    await this.http.stop(true);
  }

  private handle(request: Request, server: Server<undefined>): Response {
    const { path, query } = splitUrl(request.url);
    const method = request.method;
    switch (path) {
      case "/livez":
      case "/healthz":
        return method === "GET" ? json(200, { status: "live" }) : notAllowed(method, "GET");
      case "/readyz":
        if (method !== "GET") return notAllowed(method, "GET");
        return this.readyz();
      case "/metrics":
        if (method !== "GET") return notAllowed(method, "GET");
        return new Response(this.metrics(), { headers: { "content-type": EXPOSITION_CONTENT_TYPE, "cache-control": "no-store" } });
      case LOCKS: {
        if (method !== "GET") return notAllowed(method, "GET");
        const raw = rawQueryName(query);
        return raw === null ? this.list(query) : this.show(raw, query);
      }
      case LOCKS + FORCE_RELEASE: {
        const raw = rawQueryName(query);
        if (raw !== null) return method === "POST" ? this.forceRelease(raw, request, server) : notAllowed(method, "POST");
      }
    }
    if (path.startsWith(`${LOCKS}/`)) {
      const rest = path.slice(LOCKS.length + 1);
      const admin = rest.endsWith(FORCE_RELEASE) && rest.length > FORCE_RELEASE.length;
      if (method === "GET") return this.show(rest, query);
      if (method === "POST" && admin) return this.forceRelease(rest.slice(0, -FORCE_RELEASE.length), request, server);
      return notAllowed(method, admin ? "GET, POST" : "GET");
    }
    const kick = /^\/v1\/sessions\/([^/]*)\/kick$/.exec(path);
    if (kick !== null) return method === "POST" ? this.kick(kick[1]!, request, server) : notAllowed(method, "POST");
    return fail(404, "NOT_FOUND", `no route ${path}; see docs/operations.md`);
  }

  /** 200 only when this instance serves locks; with --coordinator the body names its role and epoch. */
  private readyz(): Response {
    const ready = this.options.isReady();
    const roles = this.options.roles?.view();
    if (roles === undefined) return ready ? json(200, { status: "ready" }) : json(503, { status: "shutting_down" });
    const status = ready ? "ready" : roles.role === "standby" ? "standby" : "shutting_down";
    return json(ready ? 200 : 503, { status, role: roles.role, epoch: roles.epoch, service: roles.service });
  }

  private metrics(): string {
    const server = this.options.server;
    return renderMetrics({
      engine: server.engine,
      connections: server.connectionCount,
      ready: this.options.isReady(),
      version: this.options.version,
      ops: this.stats,
      logSuppressed: this.options.log.suppressed,
      ...(this.options.roles === undefined ? {} : { coordinator: this.options.roles.metrics() }),
    });
  }

  private list(query: string): Response {
    const limit = parseLimit(query);
    if (limit < 0) return badLimit();
    return json(200, locksView(this.options.server.engine, limit, LIST_WAITERS, performance.now()));
  }

  private show(encoded: string, query: string): Response {
    const limit = parseLimit(query);
    if (limit < 0) return badLimit();
    const decoded = decodeLockName(encoded);
    if ("error" in decoded) return fail(400, "BAD_NAME", decoded.error);
    const lock = this.options.server.engine.locks.get(decoded.name);
    if (lock === undefined) return fail(404, "NO_SUCH_LOCK", `nobody holds or waits for ${JSON.stringify(decoded.name)}`);
    return json(200, lockView(lock, performance.now(), limit));
  }

  /** Who is asking, for the log: peer address and user agent. */
  private who(request: Request, server: Server<undefined>): Record<string, string> {
    const ip = server.requestIP(request);
    return { by: ip === null ? "unknown" : `${ip.family === "IPv6" ? `[${ip.address}]` : ip.address}:${ip.port}`, agent: request.headers.get("user-agent") ?? "" };
  }

  /** Null when authorized, else the refusal. */
  private authorize(action: string, request: Request, server: Server<undefined>): Response | null {
    const result = this.options.auth.check(request.headers.get("authorization"));
    if (result === AuthResult.OK) return null;
    this.stats.denied++;
    this.options.log.limited(this.authWarnings, "warn", "admin request refused", () => ({
      action,
      reason: result === AuthResult.UNCONFIGURED ? "no admin token configured" : result === AuthResult.MISSING ? "no bearer token" : "wrong token",
      ...this.who(request, server),
    }));
    switch (result) {
      case AuthResult.UNCONFIGURED:
        return fail(403, "ADMIN_DISABLED", HOW_TO_SET_TOKEN);
      case AuthResult.MISSING:
        return fail(401, "UNAUTHORIZED", "send Authorization: Bearer <admin token>", { "www-authenticate": 'Bearer realm="lockd"' });
      case AuthResult.WRONG:
        return fail(401, "UNAUTHORIZED", "the admin token is wrong", { "www-authenticate": 'Bearer realm="lockd", error="invalid_token"' });
    }
  }

  private forceRelease(encoded: string, request: Request, server: Server<undefined>): Response {
    const denied = this.authorize("force-release", request, server);
    if (denied !== null) return denied;
    const decoded = decodeLockName(encoded);
    if ("error" in decoded) return fail(400, "BAD_NAME", decoded.error);
    const name = decoded.name;
    const engine = this.options.server.engine;
    const owner = engine.locks.get(name)?.owner ?? null;
    if (owner === null) return fail(404, "NOT_HELD", `nobody holds ${JSON.stringify(name)}: nothing to release`);
    const now = performance.now();
    const released = holderView(owner, now);
    const promotedBefore = engine.stats.grantsPromoted;
    engine.forceRelease(name, now);
    if (engine.stats.grantsPromoted !== promotedBefore) engine.stats.handedOver(now, performance.now());
    this.stats.forceReleases++;
    const next = engine.locks.get(name)?.owner ?? null;
    const promoted = next === null ? null : holderView(next, performance.now());
    this.options.log.info("admin force-release", {
      ...this.who(request, server),
      lock: name,
      session: released.session,
      owner: released.owner,
      token: released.token,
      promoted: promoted?.session ?? null,
    });
    return json(200, { lock: name, released, promoted });
  }

  private kick(idText: string, request: Request, server: Server<undefined>): Response {
    const denied = this.authorize("kick", request, server);
    if (denied !== null) return denied;
    if (!/^[1-9]\d{0,15}$/.test(idText)) return fail(400, "BAD_SESSION_ID", `${JSON.stringify(idText)} is not a session id (a positive whole number)`);
    const id = Number(idText);
    const engine = this.options.server.engine;
    const session = engine.sessions.get(id);
    if (session === undefined) return fail(404, "NO_SUCH_SESSION", `no live session ${id}: nothing to kick`);
    if (session.state !== SessionState.WAITING) {
      const what = session.state === SessionState.OWNER ? `holds ${JSON.stringify(session.lock!.name)}; use force-release` : "has not sent ACQUIRE yet";
      return fail(409, "NOT_WAITING", `session ${id} is not waiting: it ${what}`);
    }
    const now = performance.now();
    const kicked = waiterView(session, positionOf(session), now);
    const name = session.lock!.name;
    engine.kick(id, now);
    this.stats.kicks++;
    this.options.log.info("admin kick", { ...this.who(request, server), lock: name, session: id, owner: kicked.owner, position: kicked.position });
    return json(200, { lock: name, kicked });
  }
}
