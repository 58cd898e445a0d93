/**
 * The admin verbs' side of the ops server: one HTTP request, its JSON
 * answer, and the failures mapped to exit codes (unreachable 69, refused
 * token 77, nothing to do 1).
 */
import { type Address, formatAddress, hostOf, isLoopbackHost } from "../net/address.ts";
import { tlsConnectProblem } from "../client/tls-problem.ts";
import type { Address as HostPort } from "../net/address.ts";
import { CliError } from "./errors.ts";
import { ExitCode } from "./exit.ts";

export interface OpsAnswer {
  readonly status: number;
  readonly body: unknown;
}

export function opsUrl(ops: HostPort, path: string, https = false): string {
  return `${https ? "https" : "http"}://${formatAddress(ops)}${path}`;
}

/** `?name=` form: it carries every lock name, also `.` and `..`, which a path segment cannot. */
export function lockQuery(name: string): string {
  return `name=${encodeURIComponent(name)}`;
}

type RequestOptions = { token?: string | null; timeoutMs: number; /** PEM CA: speak HTTPS and trust it. */ ca?: string };

/** The ops server at one address could not be asked (no HTTP answer); `why` says what happened. */
class Unreachable extends Error {}

/**
 * One request to the ops server. With a list of addresses (--ops a:1,b:2),
 * each is tried in order until one gives an HTTP answer (any status);
 * `timeoutMs` is per address.
 */
export async function opsRequest(ops: HostPort | readonly HostPort[], method: "GET" | "POST", path: string, options: RequestOptions): Promise<OpsAnswer> {
  const list: readonly HostPort[] = "host" in ops ? [ops] : ops;
  const failures: string[] = [];
  for (const address of list) {
    try {
      return await requestOne(address, method, path, options);
    } catch (error) {
      if (!(error instanceof Unreachable)) throw error;
      failures.push(list.length === 1 ? error.message : `${formatAddress(address)}: ${error.message}`);
    }
  }
  throw new OpsUnreachable(list, failures);
}

/** No address of a request's list gave an HTTP answer (exit 69); `reasons` says why, per address. */
export class OpsUnreachable extends CliError {
  constructor(
    list: readonly HostPort[],
    /** One per address, in order: "WHY" for a lone address, "HOST:PORT: WHY" for a list. */
    readonly reasons: readonly string[],
  ) {
    const where = list.length === 1 ? `the ops server at ${formatAddress(list[0]!)}` : `any ops server of ${list.map(formatAddress).join(",")}`;
    super(`cannot reach ${where} (--ops, LOCKD_OPS): ${reasons.join("; ")}`, ExitCode.UNAVAILABLE);
  }
}

/**
 * The addresses of `list` that are not a standby (`/readyz` says
 * `"role":"standby"`), for a list of a coordinated service's instances: a
 * standby serves no locks, so its "nobody holds it" is not the service's
 * answer. Addresses that do not answer are kept (the request reports
 * them). A single address is returned as it is. Throws (exit 69) when
 * every address that answered is a standby.
 */
export async function withoutStandbys(list: readonly HostPort[], options: RequestOptions): Promise<readonly HostPort[]> {
  if (list.length < 2) return list;
  const kept: HostPort[] = [];
  const said: unknown[] = [];
  for (const address of list) {
    const body = await readyBody(address, options);
    if (body?.role !== "standby") kept.push(address);
    else said.push(body);
  }
  if (kept.length === 0) {
    throw new CliError(`no active instance among the ops servers ${list.map(formatAddress).join(",")} (--ops, LOCKD_OPS): each is a standby (it serves no locks)${activeHint(said, list, null)}`, ExitCode.UNAVAILABLE);
  }
  return kept;
}

/** An address's /readyz answer; null when it does not answer. */
async function readyBody(address: HostPort, options: RequestOptions): Promise<{ role?: unknown; active?: unknown; activeOps?: unknown } | null> {
  try {
    return (await requestOne(address, "GET", "/readyz", { ...options, token: null })).body as { role?: unknown; active?: unknown; activeOps?: unknown } | null;
  } catch (error) {
    if (!(error instanceof Unreachable)) throw error;
    return null;
  }
}

/**
 * When only standbys answered: the service's active as they name it (the
 * `active` and `activeOps` of their /readyz or NOT_ACTIVE answer), for the
 * end of the error: where to ask instead. "" when none names one (an
 * older lockd). `shard` is the map's shard of the list (null: a plain list).
 */
export function activeHint(said: readonly unknown[], ops: readonly Address[], shard: string | null): string {
  const bodies = said.filter((b): b is { active?: unknown; activeOps?: unknown } => b !== null && typeof b === "object");
  const named = bodies.find((b) => typeof b.active === "string");
  if (named === undefined) {
    return bodies.some((b) => b.active === null) ? "; the standbys see no active (the service's coordinator row is released or absent)" : "";
  }
  const id = named.active as string;
  const at = bodies.map((b) => (b.active === id && typeof b.activeOps === "string" ? b.activeOps : null)).find((a) => a !== null);
  if (at === undefined || at === null) return `; the service's active is ${id} (it gives no ops address: set --advertise-ops on it)`;
  // Already asked: it is down or stepped down, and the standbys have not taken over yet.
  if (ops.some((o) => formatAddress(o) === at)) {
    // A loopback address names the active only on its own machine: from another one it is whatever listens there.
    const loopback = isLoopbackHost(hostOf(at))
      ? `; or, if the instances run on several machines, the active advertises a loopback address, which from here names this machine (set --advertise-ops on every instance)`
      : "";
    return `; the standbys name ${id} at ${at} as the service's active, and it did not answer as the active (a failover under way? a standby takes over once the active's lease runs out: try again${loopback})`;
  }
  return `; the service's active is ${id} at ${at} (${shard === null ? `ask it: --ops ${at}` : `add it to shard ${shard}'s addresses in --ops`})`;
}

async function requestOne(ops: HostPort, method: "GET" | "POST", path: string, options: RequestOptions): Promise<OpsAnswer> {
  const headers: Record<string, string> = { accept: "application/json", "user-agent": "lockd-cli" };
  if (options.token != null) headers.authorization = `Bearer ${options.token}`;
  const https = options.ca !== undefined;
  let response: Response;
  try {
    response = await fetch(opsUrl(ops, path, https), {
      method,
      headers,
      signal: AbortSignal.timeout(options.timeoutMs),
      ...(https ? { tls: { ca: options.ca } } : {}),
    });
  } catch (error) {
    throw new Unreachable(await whyUnreachable(ops, error, https, options.timeoutMs));
  }
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new CliError(`the ops server at ${formatAddress(ops)} answered ${response.status} with something that is not JSON`, ExitCode.FAILURE);
  }
  return { status: response.status, body };
}

/**
 * What a failed fetch means, in the terms of the flags: TLS on one end
 * only and an untrusted certificate are told apart from a server that is
 * not there.
 */
async function whyUnreachable(ops: HostPort, error: unknown, https: boolean, timeoutMs: number): Promise<string> {
  if ((error as Error).name === "TimeoutError") return `no answer within ${timeoutMs} ms`;
  const code = (error as { code?: unknown }).code;
  // Bun's fetch appends advice for its own API ("pass `verbose: true` ..."): not for a CLI user.
  const message = (error as Error).message.replace(/\s*For more information, pass `verbose: true`.*$/s, "");
  if (https) {
    const problem = tlsConnectProblem(error, formatAddress(ops));
    if (problem?.kind === "untrusted") return `${problem.what}: give the CA that signed it with --ops-ca FILE (env LOCKD_OPS_CA)`;
    if (problem?.kind === "server-plaintext") return `it speaks plain HTTP, not HTTPS (${message}): drop --ops-ca (and LOCKD_OPS_CA)`;
    return message;
  }
  if (code === "ECONNREFUSED") return "connection refused: is lockd serve running, with its --ops at this address?";
  // What answered is no HTTP server: most often lockd's lock listener (--listen), given for --ops.
  if (code === "Malformed_HTTP_Response") return "it does not speak HTTP: that is likely a lock port (--listen), not an ops port (the ops server's default is 127.0.0.1:7701)";
  if (code !== "ECONNRESET" && code !== "ECONNABORTED" && !/closed unexpectedly/.test(message)) return message;
  // The connection was accepted and then dropped: an HTTPS server that got plain HTTP does that.
  if (await speaksHttps(ops, Math.min(timeoutMs, 2000))) {
    return `it speaks HTTPS and plain HTTP was sent: give --ops-ca FILE (env LOCKD_OPS_CA), the CA that signed its certificate`;
  }
  return message;
}

/** Whether `ops` completes a TLS handshake: an unauthenticated GET /healthz that sends no token and trusts nothing it reads. */
async function speaksHttps(ops: HostPort, timeoutMs: number): Promise<boolean> {
  try {
    await fetch(opsUrl(ops, "/healthz", true), { signal: AbortSignal.timeout(timeoutMs), tls: { rejectUnauthorized: false } });
    return true;
  } catch {
    return false;
  }
}

/** The message of an ops error body, or a fallback. */
export function errorMessage(answer: OpsAnswer): string {
  const error = (answer.body as { error?: { message?: unknown } } | null)?.error;
  return typeof error?.message === "string" ? error.message : `HTTP ${answer.status}`;
}

/** Throws the CliError for a non-2xx answer. */
/** A coordinated instance that is not the active: its lock routes answer 503 NOT_ACTIVE (it serves no locks). */
export function isNotActive(answer: OpsAnswer): boolean {
  return answer.status === 503 && (answer.body as { error?: { code?: unknown } } | null)?.error?.code === "NOT_ACTIVE";
}

export function expectOk(answer: OpsAnswer): void {
  if (answer.status >= 200 && answer.status < 300) return;
  const code = answer.status === 401 || answer.status === 403 ? ExitCode.NOPERM : answer.status === 400 ? ExitCode.USAGE : ExitCode.FAILURE;
  throw new CliError(errorMessage(answer), code);
}

/** 12ms, 3.4s, 5m03s, 2h05m, 3d04h: short and sortable by eye. */
export function humanMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return ms % 1000 === 0 ? `${ms / 1000}s` : `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86_400)}d${String(Math.floor((s % 86_400) / 3600)).padStart(2, "0")}h`;
}
