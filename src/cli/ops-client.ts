/**
 * The admin verbs' side of the ops server: one HTTP request, its JSON
 * answer, and the failures mapped to exit codes (unreachable 69, refused
 * token 77, nothing to do 1).
 */
import type { HostPort } from "../config.ts";
import { ExitCode } from "./exit.ts";

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
    this.name = "CliError";
  }
}

export interface OpsAnswer {
  readonly status: number;
  readonly body: unknown;
}

export function opsUrl(ops: HostPort, path: string, https = false): string {
  const host = ops.host.includes(":") ? `[${ops.host}]` : ops.host;
  return `${https ? "https" : "http"}://${host}:${ops.port}${path}`;
}

/** `?name=` form: it carries every lock name, also `.` and `..`, which a path segment cannot. */
export function lockQuery(name: string): string {
  return `name=${encodeURIComponent(name)}`;
}

export async function opsRequest(
  ops: HostPort,
  method: "GET" | "POST",
  path: string,
  options: { token?: string | null; timeoutMs: number; /** PEM CA: speak HTTPS and trust it. */ ca?: string },
): Promise<OpsAnswer> {
  const headers: Record<string, string> = { accept: "application/json", "user-agent": "lockd-cli" };
  if (options.token != null) headers.authorization = `Bearer ${options.token}`;
  let response: Response;
  try {
    response = await fetch(opsUrl(ops, path, options.ca !== undefined), {
      method,
      headers,
      signal: AbortSignal.timeout(options.timeoutMs),
      ...(options.ca !== undefined ? { tls: { ca: options.ca } } : {}),
    });
  } catch (error) {
    const why = (error as Error).name === "TimeoutError" ? `no answer within ${options.timeoutMs} ms` : (error as Error).message;
    throw new CliError(`cannot reach the ops server at ${ops.host}:${ops.port} (--ops, LOCKD_OPS): ${why}`, ExitCode.UNAVAILABLE);
  }
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new CliError(`the ops server at ${ops.host}:${ops.port} answered ${response.status} with something that is not JSON`, ExitCode.FAILURE);
  }
  return { status: response.status, body };
}

/** The message of an ops error body, or a fallback. */
export function errorMessage(answer: OpsAnswer): string {
  const error = (answer.body as { error?: { message?: unknown } } | null)?.error;
  return typeof error?.message === "string" ? error.message : `HTTP ${answer.status}`;
}

/** Throws the CliError for a non-2xx answer. */
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
