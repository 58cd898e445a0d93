/**
 * The ops listener: a small HTTP/1.1 server on Bun.listen, because the ops
 * server must be able to refuse a connection at accept, and Bun.serve gives
 * no hook there and has no connection limit (its node:http layer counts a
 * connection only once it sends a request, so idle connections are never
 * refused). What this server does:
 *
 * - at most `maxConnections` open: one more is answered a fixed 503 and
 *   closed in the accept callback (no parsing, no allocation beyond Bun's
 *   socket), so a flood of connections cannot take the descriptors the lock
 *   listener needs;
 * - a connection idle for `idleTimeoutMs` is closed: no request after the
 *   last answer, a request head (and body) not complete that long after its
 *   first byte (slow senders), or an answer the client does not read;
 * - one request at a time per connection, and at most one request per turn
 *   of the event loop per connection (pipelined requests wait for the answer
 *   before them to be written, then for the next turn);
 * - heads up to MAX_HEAD bytes, bodies (which no endpoint reads) up to
 *   MAX_BODY and only with Content-Length; keep-alive for HTTP/1.1 unless
 *   the client sends `Connection: close`; HEAD answers without the body.
 *
 * The idle check is one timer sweeping the open connections (at most
 * `maxConnections`), armed only while some are open.
 */
import type { Socket, TCPSocketListener } from "bun";

export interface HttpRequest {
  readonly method: string;
  /** The request target as sent: path and query, still percent-encoded. */
  readonly target: string;
  /** A header's value by lower-case name (the last one sent), or null. */
  header(name: string): string | null;
  /** The peer as HOST:PORT ([HOST]:PORT for IPv6). */
  readonly remote: string;
}

export interface HttpReply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | Uint8Array;
}

export interface HttpServerOptions {
  readonly hostname: string;
  readonly port: number;
  readonly tls?: { readonly cert: string; readonly key: string };
  readonly maxConnections: number;
  readonly idleTimeoutMs: number;
  handle(request: HttpRequest): HttpReply | Promise<HttpReply>;
  /** The handler threw (or its promise rejected): the answer to send instead. */
  failed(error: unknown): HttpReply;
  /** A connection was refused at the limit (for a rate-limited log line). */
  refused?(remote: string): void;
}

/** Largest request head (request line and headers). */
export const MAX_HEAD = 16 * 1024;
/** Largest request body; no endpoint reads one, it is skipped. */
export const MAX_BODY = 16 * 1024;

const REASONS: Record<number, string> = {
  200: "OK",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Content Too Large",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
};

const encoder = new TextEncoder();
const HEAD_END = Buffer.from("\r\n\r\n");
const EMPTY = new Uint8Array(0);

function errorBody(code: string, message: string): string {
  return `${JSON.stringify({ error: { code, message } }, null, 2)}\n`;
}

let dateSecond = -1;
let dateText = "";
/** The Date header, formatted at most once a second. */
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

/** Head and body as one buffer: one write. */
function serialize(reply: HttpReply, keepAlive: boolean, withBody: boolean): Uint8Array {
  const body = typeof reply.body === "string" ? encoder.encode(reply.body) : reply.body;
  let head = `HTTP/1.1 ${reply.status} ${REASONS[reply.status] ?? "Status"}\r\n`;
  for (const [name, value] of Object.entries(reply.headers)) head += `${name}: ${value}\r\n`;
  head += `content-length: ${body.length}\r\ndate: ${httpDate()}\r\n${keepAlive ? "" : "connection: close\r\n"}\r\n`;
  const headBytes = encoder.encode(head);
  const out = new Uint8Array(headBytes.length + (withBody ? body.length : 0));
  out.set(headBytes, 0);
  if (withBody) out.set(body, headBytes.length);
  return out;
}

class ParsedRequest implements HttpRequest {
  constructor(
    readonly method: string,
    readonly target: string,
    private readonly headers: Map<string, string>,
    readonly remote: string,
  ) {}

  header(name: string): string | null {
    return this.headers.get(name) ?? null;
  }
}

/** One open connection's state. */
class Connection {
  /** Received bytes not yet consumed (at most MAX_HEAD + MAX_BODY plus one read). */
  input: Buffer = Buffer.alloc(0);
  /** A request is being answered: its handler runs, or its answer is not all written. */
  busy = false;
  /** The unwritten rest of the answer. */
  pending: Uint8Array | null = null;
  /** Close once the answer is written. */
  closeAfter = false;
  closed = false;
  /** Last time bytes arrived or an answer's write progressed (performance.now()). */
  lastActivity: number;
  /** Bytes of `input` already searched for the end of the head, less 3 (a match may straddle chunks). */
  searched = 0;
  /** When the first byte of the incomplete request arrived, or -1. */
  requestStart = -1;
  /** A pump is scheduled for the next turn. */
  scheduled = false;
  /** The peer sent FIN: no more requests will come after those in `input`. */
  peerEnded = false;

  constructor(
    readonly socket: Socket<Connection | null>,
    readonly remote: string,
    now: number,
  ) {
    this.lastActivity = now;
  }
}

export class HttpServer {
  private readonly listener: TCPSocketListener<Connection | null>;
  private readonly connections = new Set<Connection>();
  private sweeper: ReturnType<typeof setInterval> | null = null;
  private readonly refusal: Uint8Array;
  /** Connections refused at the limit since start. */
  refused = 0;

  constructor(private readonly options: HttpServerOptions) {
    const limit = options.maxConnections;
    this.refusal = serialize(
      {
        status: 503,
        headers: { "content-type": "application/json; charset=utf-8", "cache-control": "no-store", "retry-after": "1" },
        body: errorBody("OPS_BUSY", `the ops server has ${limit} open connections, its limit (--ops-max-connections); retry`),
      },
      false,
      true,
    );
    const tls = options.tls;
    this.listener = Bun.listen<Connection | null>({
      hostname: options.hostname,
      port: options.port,
      ...(tls === undefined ? {} : { tls: { cert: tls.cert, key: tls.key } }),
      // A client's FIN ends its requests, not our answers: `end` below closes once they are written.
      allowHalfOpen: true,
      socket: {
        open: (socket) => this.opened(socket),
        data: (socket, chunk) => {
          const conn = socket.data;
          if (conn !== null && !conn.closed) this.received(conn, chunk);
        },
        drain: (socket) => {
          const conn = socket.data;
          if (conn !== null && !conn.closed) this.flush(conn);
        },
        close: (socket) => this.gone(socket.data),
        error: (socket) => this.gone(socket.data),
        end: (socket) => {
          // The peer finished sending: answer the complete requests in hand, then close.
          const conn = socket.data;
          if (conn === null || conn.closed) return;
          conn.peerEnded = true;
          if (!conn.busy && !conn.scheduled) this.pump(conn);
        },
      },
    });
  }

  get hostname(): string {
    return this.listener.hostname;
  }

  get port(): number {
    return this.listener.port;
  }

  /** Open connections now (refused ones never count). */
  get open(): number {
    return this.connections.size;
  }

  /** Close the listener and every connection. Idempotent. */
  stop(): void {
    if (this.sweeper !== null) clearInterval(this.sweeper);
    this.sweeper = null;
    this.listener.stop(true);
    for (const conn of [...this.connections]) {
      conn.socket.terminate();
      this.gone(conn);
    }
  }

  private opened(socket: Socket<Connection | null>): void {
    socket.data = null;
    if (this.connections.size >= this.options.maxConnections) {
      this.refused++;
      this.options.refused?.(remoteOf(socket));
      // Over TLS nothing can be written before the handshake: just close.
      if (this.options.tls === undefined) socket.end(this.refusal);
      else socket.terminate();
      return;
    }
    const conn = new Connection(socket, remoteOf(socket), performance.now());
    socket.data = conn;
    this.connections.add(conn);
    this.sweeper ??= setInterval(() => this.sweep(), Math.max(10, Math.min(1000, this.options.idleTimeoutMs / 4)));
  }

  private gone(conn: Connection | null): void {
    if (conn === null || conn.closed) return;
    conn.closed = true;
    conn.pending = null;
    this.connections.delete(conn);
    if (this.connections.size === 0 && this.sweeper !== null) {
      clearInterval(this.sweeper);
      this.sweeper = null;
    }
  }

  private received(conn: Connection, chunk: Buffer): void {
    const now = performance.now();
    conn.lastActivity = now;
    if (conn.requestStart < 0) conn.requestStart = now;
    // Copied: the bytes outlive this callback when a request is incomplete or pipelined.
    conn.input = conn.input.length === 0 ? Buffer.from(chunk) : Buffer.concat([conn.input, chunk]);
    if (conn.input.length > MAX_HEAD + MAX_BODY + 64 * 1024) {
      // Far more than one request while the last is being answered: a flood, not a client.
      this.close(conn, true);
      return;
    }
    if (!conn.busy) this.pump(conn);
  }

  /** Take one complete request from the input, if there is one, and answer it. */
  private pump(conn: Connection): void {
    const input = conn.input;
    const headEnd = input.indexOf(HEAD_END, conn.searched);
    if (headEnd < 0) {
      // A request line starts with a method (a token). Anything else, such
      // as a TLS ClientHello (0x16) on this plaintext port, is answered at
      // once: the client learns from the answer that this is not what it
      // expected, instead of waiting for an idle timeout.
      if (input.length > 0 && !isTokenByte(input[0]!)) {
        this.refuse(conn, 400, "BAD_REQUEST", "not an HTTP/1.x request line");
        return;
      }
      conn.searched = Math.max(0, input.length - (HEAD_END.length - 1));
      if (input.length > MAX_HEAD) this.refuse(conn, 431, "HEAD_TOO_LARGE", `the request head is over ${MAX_HEAD} bytes`);
      else if (conn.peerEnded) this.close(conn, false); // nothing (more) can complete
      return;
    }
    if (headEnd > MAX_HEAD) {
      this.refuse(conn, 431, "HEAD_TOO_LARGE", `the request head is over ${MAX_HEAD} bytes`);
      return;
    }
    // Buffer's latin1 is byte = code point (TextDecoder's "latin1" is windows-1252).
    const lines = input.toString("latin1", 0, headEnd).split("\r\n");
    const start = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP\/1\.([01])$/.exec(lines[0]!);
    if (start === null) {
      this.refuse(conn, 400, "BAD_REQUEST", "not an HTTP/1.x request line");
      return;
    }
    const headers = new Map<string, string>();
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      if (colon <= 0 || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(line.slice(0, colon))) {
        this.refuse(conn, 400, "BAD_REQUEST", "a malformed header line");
        return;
      }
      headers.set(line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim());
    }
    if (headers.has("transfer-encoding")) {
      this.refuse(conn, 501, "BODY_NOT_ACCEPTED", "no endpoint takes a request body; send none");
      return;
    }
    const lengthText = headers.get("content-length") ?? "0";
    const length = /^\d{1,9}$/.test(lengthText) ? Number(lengthText) : -1;
    if (length < 0 || length > MAX_BODY) {
      this.refuse(conn, 413, "BODY_TOO_LARGE", `no endpoint takes a request body; at most ${MAX_BODY} bytes are skipped`);
      return;
    }
    const end = headEnd + HEAD_END.length + length;
    if (input.length < end) {
      if (conn.peerEnded) this.close(conn, false); // the body never will
      return;
    }
    conn.input = input.subarray(end);
    conn.searched = 0;
    conn.requestStart = conn.input.length > 0 ? performance.now() : -1;

    const method = start[1]!;
    const keepAlive = start[3] === "1" && !/(?:^|,)\s*close\s*(?:,|$)/i.test(headers.get("connection") ?? "");
    if (!keepAlive) conn.closeAfter = true;
    const target = toAscii(start[2]!);
    conn.busy = true;
    const request = new ParsedRequest(method, target, headers, conn.remote);
    let reply: HttpReply | Promise<HttpReply>;
    try {
      reply = this.options.handle(request);
    } catch (error) {
      reply = this.options.failed(error);
    }
    const withBody = method !== "HEAD";
    if (reply instanceof Promise) {
      reply.then(
        (r) => this.answer(conn, r, withBody),
        (error) => this.answer(conn, this.options.failed(error), withBody),
      );
    } else {
      this.answer(conn, reply, withBody);
    }
  }

  private answer(conn: Connection, reply: HttpReply, withBody: boolean): void {
    if (conn.closed) return;
    conn.pending = serialize(reply, !conn.closeAfter, withBody);
    conn.lastActivity = performance.now();
    this.flush(conn);
  }

  /** Write what is pending; once the answer is out, close or go on with the next request. */
  private flush(conn: Connection): void {
    const pending = conn.pending;
    if (pending !== null) {
      const written = conn.socket.write(pending);
      if (written > 0) conn.lastActivity = performance.now();
      if (written < pending.length) {
        conn.pending = written > 0 ? pending.subarray(written) : pending;
        return;
      }
      conn.pending = null;
    }
    if (!conn.busy) return;
    conn.busy = false;
    if (conn.closeAfter) {
      this.close(conn, false);
      return;
    }
    if (conn.input.length > 0 && !conn.scheduled) {
      // A pipelined request: the next turn, so one connection takes one request per turn.
      conn.scheduled = true;
      setImmediate(() => {
        conn.scheduled = false;
        if (!conn.closed && !conn.busy) this.pump(conn);
      });
    } else if (conn.peerEnded) {
      this.close(conn, false);
    }
  }

  /** Answer an unusable request with an error and close. */
  private refuse(conn: Connection, status: number, code: string, message: string): void {
    conn.input = Buffer.alloc(0);
    conn.searched = 0;
    conn.closeAfter = true;
    conn.busy = true;
    this.answer(conn, { status, headers: { "content-type": "application/json; charset=utf-8" }, body: errorBody(code, message) }, true);
  }

  private close(conn: Connection, abort: boolean): void {
    if (abort) conn.socket.terminate();
    else conn.socket.end();
    this.gone(conn);
  }

  /** Close connections idle too long; a request whose handler still runs is the server's wait, not the client's. */
  private sweep(): void {
    const now = performance.now();
    const idle = this.options.idleTimeoutMs;
    for (const conn of this.connections) {
      if (conn.busy && conn.pending === null) continue;
      const slowRequest = conn.requestStart >= 0 && now - conn.requestStart >= idle;
      if (slowRequest || now - conn.lastActivity >= idle) this.close(conn, conn.pending !== null);
    }
  }
}

/** Bytes above 0x7f in a request target, percent-encoded (the target is decoded as Latin-1). */
function toAscii(target: string): string {
  return /[^\x21-\x7e]/.test(target)
    ? target.replace(/[^\x21-\x7e]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`)
    : target;
}

function remoteOf(socket: Socket<unknown>): string {
  const address = socket.remoteAddress ?? "";
  if (address === "") return "unknown";
  const port = socket.remotePort;
  const host = address.includes(":") ? `[${address}]` : address;
  return port === undefined ? host : `${host}:${port}`;
}

/** A byte that may start an HTTP method (RFC 9110 tchar). */
function isTokenByte(byte: number): boolean {
  return (
    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) ||
    "!#$%&'*+-.^_`|~".includes(String.fromCharCode(byte))
  );
}
