/**
 * The ops listener: Bun.serve (HTTP/1.1 on Bun's uWebSockets parser), with
 * the ops server's handler behind it. docs/operations.md ("The ops
 * listener's limits") says what a caller can and cannot make it do; in
 * short, measured with Bun 1.4.5:
 *
 * - framing is Bun's: a head that a proxy in front could read differently
 *   (a bare CR or LF, a NUL, obs-fold, a space before a colon, two
 *   Content-Lengths or a list of them, Content-Length with
 *   Transfer-Encoding, no Host on HTTP/1.1) is answered 400 by the parser
 *   and the connection closed, before any handler runs; so are a head over
 *   16 KiB (431), a body over MAX_BODY with Content-Length (413) and HTTP/2
 *   or later (505). Those answers are Bun's own: a status line and
 *   `Connection: close`, no JSON body;
 * - the target reaches the handler as a URL: dot segments (`.`, `..`,
 *   `%2e`) are resolved, `%2F` and other escapes are kept, bytes above
 *   0x7e are percent-encoded;
 * - a connection that has not sent a whole request head is closed about
 *   10 s after it opened whatever trickles in (Bun's own first-request
 *   timeout), one that sends nothing is not even accepted until it sends
 *   (Bun's listener defers the accept); after a request, `idleTimeoutMs`
 *   (rounded up to whole seconds, which Bun checks on a 4 s clock) without
 *   a byte either way closes it;
 * - there is no connection limit and no hook at accept: what bounds an ops
 *   caller is the idle timeout, the work each request may do (the ops
 *   server's pages and slices), and the process's descriptors, whose soft
 *   limit lockd raises to the hard limit at start (server/limits.ts).
 *
 * What this file adds on top: at most ANSWERS_PER_TURN answers made per
 * turn of the loop, the rest queued for the next turns (see `fetch`: so
 * that lock traffic runs between batches, and Bun closes a pipelining
 * connection at its first request past a turn's answers), HEAD as GET
 * without the body (Bun sends the
 * head with the body's Content-Length), `Expect` other than 100-continue
 * refused (417), request bodies with Transfer-Encoding refused (501: no
 * endpoint reads a body), both with `Connection: close`, `X-Content-Type-Options:
 * nosniff` on every answer, and `Keep-Alive: timeout=N` on answers to
 * requests that keep their connection (`Connection: close` on the others).
 */
import type { Server } from "bun";
import { bracketHost } from "../net/address.ts";

export interface HttpRequest {
  readonly method: string;
  /**
   * The request target in origin form (`/path?query`, still
   * percent-encoded, dot segments resolved; an absolute-form target has its
   * scheme and authority removed).
   */
  readonly target: string;
  /** A header's value by lower-case name, or null (a header sent twice has its values joined with ", "). */
  header(name: string): string | null;
  /** The peer as HOST:PORT ([HOST]:PORT for IPv6); "unknown" once the connection is gone. */
  readonly remote: string;
  /** The client went away before the answer (its connection closed). */
  readonly aborted: boolean;
}

export interface HttpReply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  /** NO_BODY (this very object) only in an answer to HEAD whose body was never built. */
  readonly body: string | Uint8Array;
}

/**
 * The body of an answer to HEAD that was never built: the head goes with
 * `Transfer-Encoding: chunked` and no Content-Length (the length of the
 * GET's body is not known; HTTP/1.1 allows either in an answer to HEAD).
 */
export const NO_BODY: Uint8Array = new Uint8Array(0);

export interface HttpServerOptions {
  readonly hostname: string;
  readonly port: number;
  readonly tls?: { readonly cert: string; readonly key: string };
  readonly idleTimeoutMs: number;
  handle(request: HttpRequest): HttpReply | Promise<HttpReply>;
  /** The handler threw (or its promise rejected): the answer to send instead. */
  failed(error: unknown): HttpReply;
}

/** Largest request body taken with Content-Length (Bun answers 413 beyond); no endpoint reads one. */
export const MAX_BODY = 16 * 1024;
/** Ops answers made per turn of the event loop; the requests beyond wait for the next turns (see HttpServer.fetch). */
export const ANSWERS_PER_TURN = 64;
/** The longest idle timeout Bun.serve takes, in seconds. */
export const MAX_IDLE_SECONDS = 255;

/** The headers of every JSON answer of the ops server: never cached. */
export const JSON_HEADERS: Readonly<Record<string, string>> = { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" };

/** A JSON answer: `body` indented by two spaces (on one line when `compact`), then a newline. */
export function jsonReply(status: number, body: unknown, headers: Record<string, string> = {}, compact = false): HttpReply {
  return { status, headers: { ...JSON_HEADERS, ...headers }, body: `${compact ? JSON.stringify(body) : JSON.stringify(body, null, 2)}\n` };
}

/** An error answer, `{"error": {"code": ..., "message": ...}}`: the shape of every ops error. */
export function errorReply(status: number, code: string, message: string, headers?: Record<string, string>, compact?: boolean): HttpReply {
  return jsonReply(status, { error: { code, message } }, headers, compact);
}

/** `close` anywhere in a Connection header's list. */
const CLOSE = /(?:^|,)[ \t]*close[ \t]*(?:,|$)/i;

/** The target in origin form from a request's URL (absolute, or a bare path when it came without Host). */
function originForm(url: string): string {
  if (url.startsWith("/")) return url;
  const scheme = url.indexOf("://");
  const path = scheme < 0 ? -1 : url.indexOf("/", scheme + 3);
  return path < 0 ? "/" : url.slice(path);
}

/** One request as the ops server's handler sees it; the peer's address is read only if asked for. */
class OpsRequest implements HttpRequest {
  readonly method: string;
  readonly target: string;
  private peer: string | null = null;

  constructor(
    private readonly request: globalThis.Request,
    private readonly server: Server<undefined>,
  ) {
    this.method = request.method;
    this.target = originForm(request.url);
  }

  header(name: string): string | null {
    return this.request.headers.get(name);
  }

  get remote(): string {
    if (this.peer === null) {
      const address = this.server.requestIP(this.request);
      this.peer = address === null ? "unknown" : `${bracketHost(address.address)}:${address.port}`;
    }
    return this.peer;
  }

  get aborted(): boolean {
    return this.request.signal.aborted;
  }
}

export class HttpServer {
  private readonly server: Server<undefined>;
  /** The idle timeout in whole seconds, as Bun takes it and `Keep-Alive: timeout=N` announces it. */
  readonly idleSeconds: number;
  private stopping: Promise<void> | null = null;

  constructor(private readonly options: HttpServerOptions) {
    this.idleSeconds = Math.min(MAX_IDLE_SECONDS, Math.max(1, Math.ceil(options.idleTimeoutMs / 1000)));
    const tls = options.tls;
    this.server = Bun.serve({
      hostname: options.hostname,
      port: options.port,
      // Exclusive: a second lockd on this --ops port must fail to start (EADDRINUSE, exit 69), not share the port.
      reusePort: false,
      ...(tls === undefined ? {} : { tls: { cert: tls.cert, key: tls.key } }),
      idleTimeout: this.idleSeconds,
      maxRequestBodySize: MAX_BODY,
      // Never Bun's error page (with a stack trace): errors are the ops server's JSON.
      development: false,
      fetch: (request, server) => this.fetch(request, server),
      error: (error) => this.response(options.failed(error), false),
    });
  }

  get hostname(): string {
    return this.server.hostname ?? this.options.hostname;
  }

  get port(): number {
    return this.server.port ?? 0;
  }

  /** Requests whose answer is being made now (Bun's count; an answer being written no longer counts). */
  get pending(): number {
    return this.server.pendingRequests;
  }

  /** Close the listener and every connection. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= this.server.stop(true);
    return this.stopping;
  }

  /**
   * At most ANSWERS_PER_TURN answers are made per turn of the event loop;
   * the requests beyond wait in a queue, in arrival order, for the next
   * turns. Two things follow:
   *
   * - lock traffic runs between batches however many ops requests arrive
   *   at once: with no connection limit, one epoll round can bring a
   *   request from each of thousands of connections (bench/abuse.ts,
   *   attack d: 2,000 scrapers put fresh ACQUIREs at 67 times their rest
   *   latency when their answers were all made in one turn);
   * - Bun.serve (1.4.5) hands every request pipelined in one read to the
   *   handler in that read's turn, thousands of them from one 512 KiB read,
   *   unless the answer before is still pending; then it closes the
   *   connection instead (oven-sh/bun#38128). Once a turn's answers are
   *   used up, a pipelining client's next answer is pending when its next
   *   request is parsed, and it loses its connection there instead of
   *   holding the loop (attack l: 2 s stalls and lost 1 s leases when every
   *   pipelined request was answered at once).
   *
   * Clients that wait for an answer before sending the next request (every
   * ops client: browsers, curl, Prometheus, lockd status) are at most a few
   * turns late. A queued request whose client has gone is not answered (an
   * empty 204 that Bun has nowhere to send).
   */
  private fetch(request: globalThis.Request, server: Server<undefined>): Response | Promise<Response> {
    if (this.answered < ANSWERS_PER_TURN && this.queued() === 0) {
      this.answered++;
      this.nextTurn();
      return this.answer(request, server);
    }
    return new Promise((resolve) => {
      this.queue.push(() => resolve(request.signal.aborted ? new Response(null, { status: 204 }) : this.answer(request, server)));
      this.nextTurn();
    });
  }

  /** Answers made in this turn so far. */
  private answered = 0;
  /** Requests waiting for a later turn: queue[head..] (compacted as it drains). */
  private queue: (() => void)[] = [];
  private head = 0;
  private turnQueued = false;

  private queued(): number {
    return this.queue.length - this.head;
  }

  private nextTurn(): void {
    if (this.turnQueued) return;
    this.turnQueued = true;
    setImmediate(this.turn);
  }

  /** A new turn: a batch of the queued requests, then the turn's rest of the budget for new ones. */
  private readonly turn = (): void => {
    this.turnQueued = false;
    const batch = Math.min(ANSWERS_PER_TURN, this.queued());
    for (let i = 0; i < batch; i++) this.queue[this.head++]!();
    if (this.head === this.queue.length) {
      this.queue = [];
      this.head = 0;
    } else if (this.head >= 1024) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    this.answered = batch;
    if (batch > 0 || this.queued() > 0) this.nextTurn();
  };

  private answer(request: globalThis.Request, server: Server<undefined>): Response | Promise<Response> {
    const keepAlive = !CLOSE.test(request.headers.get("connection") ?? "");
    const expect = request.headers.get("expect");
    // Refused with Connection: close: Bun closes after the answer.
    if (expect !== null && expect.toLowerCase() !== "100-continue") {
      return this.response(errorReply(417, "EXPECTATION_FAILED", "the only expectation taken is Expect: 100-continue"), false);
    }
    if (request.headers.has("transfer-encoding")) {
      return this.response(errorReply(501, "BODY_NOT_ACCEPTED", "no endpoint takes a request body; send none (Transfer-Encoding is not accepted)"), false);
    }
    let reply: HttpReply | Promise<HttpReply>;
    try {
      reply = this.options.handle(new OpsRequest(request, server));
    } catch (error) {
      reply = this.options.failed(error);
    }
    if (!(reply instanceof Promise)) return this.response(reply, keepAlive);
    return reply.then(
      (r) => this.response(r, keepAlive),
      (error: unknown) => this.response(this.options.failed(error), keepAlive),
    );
  }

  /** The Response for a reply (Bun adds Date and Content-Length, and leaves out the body for HEAD). */
  private response(reply: HttpReply, keepAlive: boolean): Response {
    const headers: Record<string, string> = { ...reply.headers, "x-content-type-options": "nosniff" };
    // nosniff: a browser never renders an answer (which may quote the request) as anything but its type.
    if (keepAlive) headers["keep-alive"] = `timeout=${this.idleSeconds}`;
    else headers.connection = "close";
    // Without it Bun would say `Content-Length: 0`, which a GET's answer is not.
    if (reply.body === NO_BODY) {
      headers["transfer-encoding"] = "chunked";
      return new Response(null, { status: reply.status, headers });
    }
    return new Response(reply.body as string | Uint8Array<ArrayBuffer>, { status: reply.status, headers });
  }
}
