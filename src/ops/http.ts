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
 * - heads up to MAX_HEAD bytes and MAX_HEADERS header lines, bodies (which
 *   no endpoint reads) up to MAX_BODY and only with Content-Length;
 *   keep-alive for HTTP/1.1 unless the client sends `Connection: close`
 *   (answers announce `Keep-Alive: timeout=N`); HEAD answers without the
 *   body; `OPTIONS *` is answered here, other targets reach the handler in
 *   origin form;
 * - strict framing, so that no proxy in front can read a request's bounds
 *   differently: lines end in CRLF (a bare CR or LF, a NUL or another
 *   control character in the head is 400), no obs-fold, no space before a
 *   header's colon, one Content-Length (or repeats of the same value),
 *   Transfer-Encoding refused (501), and any of these close the connection;
 * - an error answer (or one sent before a body we did not wait for) is
 *   followed by our FIN, and the connection is closed at the client's FIN
 *   or the idle timeout, discarding what still arrives: closing at once
 *   would make the kernel reset the connection when those bytes come,
 *   which can destroy the answer before the client reads it.
 *
 * The idle check is one timer sweeping the open connections (at most
 * `maxConnections`), armed only while some are open.
 */
import type { Socket, TCPSocketListener } from "bun";
import { peerOf } from "../net/peer.ts";

export interface HttpRequest {
  readonly method: string;
  /**
   * The request target in origin form (`/path?query`, still
   * percent-encoded; an absolute-form target has its scheme and authority
   * removed; bytes above 0x7e are percent-encoded).
   */
  readonly target: string;
  /**
   * A header's value by lower-case name, or null. A header sent more than
   * once has its values joined with ", " (Host, Authorization and
   * Content-Length sent twice with different values are refused with 400).
   */
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
/** Most header lines in one request head. */
export const MAX_HEADERS = 100;
/** Largest request body; no endpoint reads one, it is skipped. */
export const MAX_BODY = 16 * 1024;
/** Received bytes kept per connection while its answer is pending: more is a flood, not a client. */
const MAX_INPUT = MAX_HEAD + MAX_BODY + 64 * 1024;

const REASONS: Record<number, string> = {
  200: "OK",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Content Too Large",
  414: "URI Too Long",
  417: "Expectation Failed",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
  505: "HTTP Version Not Supported",
};

const encoder = new TextEncoder();
const HEAD_END = Buffer.from("\r\n\r\n");
const CR = 0x0d;
const LF = 0x0a;
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const REQUEST_LINE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([^ ]+) HTTP\/(\d)\.(\d)$/;
/** Control characters other than HTAB (a NUL, a stray CR or LF, ...): never in a head line. */
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;
/** Headers whose repeats with different values make a request ambiguous. */
const SINGLE = new Set(["content-length", "host", "authorization"]);
/** An absolute-form target's scheme and authority. */
const ABSOLUTE = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

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

/**
 * Head and body as one buffer: one write. `keepAlive` is the idle timeout
 * in whole seconds to announce, or null to close after this answer.
 */
function serialize(reply: HttpReply, keepAlive: number | null, withBody: boolean): Uint8Array {
  const body = typeof reply.body === "string" ? encoder.encode(reply.body) : reply.body;
  let head = `HTTP/1.1 ${reply.status} ${REASONS[reply.status] ?? "Status"}\r\n`;
  for (const [name, value] of Object.entries(reply.headers)) head += `${name}: ${value}\r\n`;
  // nosniff: a browser never renders an answer (which may quote the request) as anything but its type.
  head += `content-length: ${body.length}\r\nx-content-type-options: nosniff\r\ndate: ${httpDate()}\r\n`;
  head += keepAlive === null ? "connection: close\r\n\r\n" : `keep-alive: timeout=${keepAlive}\r\n\r\n`;
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

const EMPTY_BUFFER = Buffer.alloc(0);

/** One open connection's state. */
class Connection {
  /**
   * Received bytes not yet consumed are `buffer[start, end)`: the buffer
   * grows by doubling (at most to about MAX_INPUT plus one read), so a head
   * that arrives a byte at a time is copied O(length) times, not O(length²).
   */
  buffer: Buffer = EMPTY_BUFFER;
  start = 0;
  end = 0;
  /** A request is being answered: its handler runs, or its answer is not all written. */
  busy = false;
  /** The unwritten rest of the answer. */
  pending: Uint8Array | null = null;
  /** Close once the answer is written. */
  closeAfter = false;
  /**
   * Bytes of the request may still be on the way (a refused request, a body
   * not waited for): close gently once the answer is written (see drain).
   */
  linger = false;
  /** Our FIN is sent after the answer; what still arrives is discarded until the peer's FIN or the deadline. */
  draining = false;
  closed = false;
  /** Last time bytes arrived or an answer's write progressed (performance.now()). */
  lastActivity: number;
  /** Bytes after `start` already searched for the end of the head, less 3 (a match may straddle chunks). */
  searched = 0;
  /** When the first byte of the incomplete request arrived, or -1. */
  requestStart = -1;
  /** A pump is scheduled for the next turn. */
  scheduled = false;
  /** The peer sent FIN: no more requests will come after those in `input`. */
  peerEnded = false;
  /**
   * A request whose head is parsed and whose body is still coming: the
   * bytes after `start` that make it complete, and what answers it. The
   * head is not parsed again for every chunk of a slow body.
   */
  awaiting: { readonly length: number; readonly dispatch: () => void } | null = null;

  constructor(
    readonly socket: Socket<Connection | null>,
    readonly remote: string,
    now: number,
  ) {
    this.lastActivity = now;
  }

  get buffered(): number {
    return this.end - this.start;
  }

  append(chunk: Uint8Array): void {
    if (this.end + chunk.length > this.buffer.length) {
      const kept = this.end - this.start;
      if (kept + chunk.length <= this.buffer.length) {
        this.buffer.copyWithin(0, this.start, this.end);
      } else {
        const grown = Buffer.allocUnsafe(Math.max(1024, this.buffer.length * 2, kept + chunk.length));
        this.buffer.copy(grown, 0, this.start, this.end);
        this.buffer = grown;
      }
      this.start = 0;
      this.end = kept;
    }
    this.buffer.set(chunk, this.end);
    this.end += chunk.length;
  }

  consume(n: number): void {
    this.start += n;
    if (this.start === this.end) {
      this.start = this.end = 0;
      // A large buffer is not kept for an idle connection.
      if (this.buffer.length > 4096) this.buffer = EMPTY_BUFFER;
    }
  }

  clear(): void {
    this.start = this.end = 0;
    this.buffer = EMPTY_BUFFER;
    this.awaiting = null;
  }
}

export class HttpServer {
  private readonly listener: TCPSocketListener<Connection | null>;
  private readonly connections = new Set<Connection>();
  private sweeper: ReturnType<typeof setInterval> | null = null;
  /** The 503 sent at the connection limit: built at most once per second (its Date header changes). */
  private refusalBytes: Uint8Array | null = null;
  private refusalDate = "";
  /** The idle timeout announced in `Keep-Alive: timeout=N` (whole seconds, at least 1). */
  private readonly keepAliveHint: number;
  /** Connections refused at the limit since start. */
  refused = 0;

  constructor(private readonly options: HttpServerOptions) {
    this.keepAliveHint = Math.max(1, Math.floor(options.idleTimeoutMs / 1000));
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
          if (conn.draining) this.close(conn, false);
          else if (!conn.busy && !conn.scheduled) this.pump(conn);
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

  /** The refusal's bytes, rebuilt only when the second in its Date header has passed. */
  private refusal(): Uint8Array {
    const date = httpDate();
    if (this.refusalBytes === null || this.refusalDate !== date) {
      this.refusalDate = date;
      const message = `the ops server has ${this.options.maxConnections} open connections, its limit (--ops-max-connections); retry`;
      this.refusalBytes = serialize(errorReply(503, "OPS_BUSY", message, { "retry-after": "1" }), null, true);
    }
    return this.refusalBytes;
  }

  private opened(socket: Socket<Connection | null>): void {
    socket.data = null;
    if (this.connections.size >= this.options.maxConnections) {
      this.refused++;
      this.options.refused?.(remoteOf(socket));
      // Over TLS nothing can be written before the handshake: just close.
      if (this.options.tls === undefined) socket.end(this.refusal());
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
    if (conn.draining) return;
    const now = performance.now();
    conn.lastActivity = now;
    if (conn.requestStart < 0) conn.requestStart = now;
    // Copied: the bytes outlive this callback when a request is incomplete or pipelined.
    conn.append(chunk);
    // First the request in hand (one read can hold a head and far more than MAX_BODY: its answer
    // must still go out), then the bound on what waits behind an answer being made.
    if (!conn.busy) this.pump(conn);
    if (!conn.closed && !conn.draining && conn.buffered > MAX_INPUT) {
      // Far more than one request while the last is being answered: a flood, not a client.
      this.close(conn, true);
    }
  }

  /** Take one complete request from the input, if there is one, and answer it. */
  private pump(conn: Connection): void {
    const awaiting = conn.awaiting;
    if (awaiting !== null) {
      if (conn.buffered >= awaiting.length) {
        conn.awaiting = null;
        conn.consume(awaiting.length);
        awaiting.dispatch();
      } else if (conn.peerEnded) {
        this.close(conn, false); // the body never will come
      }
      return;
    }
    // An empty line before a request line is skipped (RFC 9112 section 2.2).
    while (conn.buffered >= 2 && conn.buffer[conn.start] === CR && conn.buffer[conn.start + 1] === LF) {
      conn.consume(2);
      conn.searched = 0;
    }
    const input = conn.buffer.subarray(conn.start, conn.end);
    const from = conn.searched;
    const headEnd = input.indexOf(HEAD_END, from);
    // A LF not after a CR: a client (or an attacker) that ends lines differently from a proxy in front.
    // Checked as the bytes come, so a head with bare LFs is refused at once, not at the idle timeout.
    if (hasBareLf(input, from, headEnd < 0 ? input.length : headEnd)) {
      this.refuse(conn, 400, "BAD_REQUEST", "a line of the request head ends in a bare LF; end lines with CRLF");
      return;
    }
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
      if (input.length > MAX_HEAD) this.refuseTooLarge(conn, input);
      else if (conn.peerEnded) this.close(conn, false); // nothing (more) can complete
      return;
    }
    if (headEnd > MAX_HEAD) {
      this.refuseTooLarge(conn, input);
      return;
    }
    // Buffer's latin1 is byte = code point (TextDecoder's "latin1" is windows-1252).
    const lines = input.toString("latin1", 0, headEnd).split("\r\n");
    if (lines.length - 1 > MAX_HEADERS) {
      this.refuse(conn, 431, "HEAD_TOO_LARGE", `the request head has ${lines.length - 1} header lines; at most ${MAX_HEADERS} are taken`);
      return;
    }
    const start = REQUEST_LINE.exec(lines[0]!);
    if (start === null) {
      this.refuse(conn, 400, "BAD_REQUEST", "not an HTTP/1.x request line (METHOD TARGET HTTP/1.1)");
      return;
    }
    const method = start[1]!;
    const withBody = method !== "HEAD";
    if (start[3] !== "1") {
      this.refuse(conn, 505, "VERSION_NOT_SUPPORTED", "this server speaks HTTP/1.1 (and 1.0)", withBody);
      return;
    }
    const http10 = start[4] === "0";
    const headers = new Map<string, string>();
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      // No obs-fold (a line starting with a space), no space before the colon, no control characters.
      if (colon <= 0 || !TOKEN.test(line.slice(0, colon)) || CONTROL.test(line)) {
        this.refuse(conn, 400, "BAD_REQUEST", `header line ${i} is malformed (NAME: VALUE, no folding, no control characters)`, withBody);
        return;
      }
      const name = line.slice(0, colon).toLowerCase();
      const value = trimOws(line.slice(colon + 1));
      const before = headers.get(name);
      if (before === undefined) headers.set(name, value);
      else if (!SINGLE.has(name)) headers.set(name, `${before}, ${value}`);
      else if (before !== value) {
        this.refuse(conn, 400, "BAD_REQUEST", `${name} is sent twice with different values`, withBody);
        return;
      }
    }
    if (headers.has("transfer-encoding")) {
      this.refuse(conn, 501, "BODY_NOT_ACCEPTED", "no endpoint takes a request body; send none (Transfer-Encoding is not accepted)", withBody);
      return;
    }
    const lengthText = headers.get("content-length") ?? "0";
    if (!/^\d{1,15}$/.test(lengthText)) {
      this.refuse(conn, 400, "BAD_REQUEST", "Content-Length is not a whole number", withBody);
      return;
    }
    const bodyLength = Number(lengthText);
    if (bodyLength > MAX_BODY) {
      this.refuse(conn, 413, "BODY_TOO_LARGE", `no endpoint takes a request body; at most ${MAX_BODY} bytes are skipped`, withBody);
      return;
    }
    const expect = headers.get("expect");
    const continues = expect !== undefined && !http10 && expect.toLowerCase() === "100-continue";
    if (expect !== undefined && !http10 && !continues) {
      this.refuse(conn, 417, "EXPECTATION_FAILED", "the only expectation taken is Expect: 100-continue", withBody);
      return;
    }
    let target = start[2]!;
    if (CONTROL.test(target)) {
      this.refuse(conn, 400, "BAD_REQUEST", "the request target contains control characters", withBody);
      return;
    }
    if (!target.startsWith("/")) {
      const absolute = ABSOLUTE.exec(target);
      if (absolute !== null) {
        const rest = target.slice(absolute[0].length);
        target = rest.startsWith("/") ? rest : `/${rest}`;
      } else if (target !== "*" || method !== "OPTIONS") {
        this.refuse(conn, 400, "BAD_REQUEST", "the request target must be a path (/...) or an absolute URL", withBody);
        return;
      }
    }
    if (http10 || /(?:^|,)[ \t]*close[ \t]*(?:,|$)/i.test(headers.get("connection") ?? "")) conn.closeAfter = true;
    const dispatch = () => this.dispatch(conn, method, target, headers, withBody);
    const length = headEnd + HEAD_END.length + bodyLength;
    if (input.length >= length) {
      conn.consume(length);
      dispatch();
    } else if (conn.peerEnded) {
      this.close(conn, false); // the body never will come
    } else if (continues) {
      // The client waits for 100 Continue before its body, which no endpoint reads: answer now
      // and close (a body that comes after the answer is not read).
      conn.clear();
      conn.closeAfter = true;
      conn.linger = true;
      dispatch();
    } else {
      conn.awaiting = { length, dispatch };
    }
  }

  /** Answer a complete request (its bytes consumed). */
  private dispatch(conn: Connection, method: string, target: string, headers: Map<string, string>, withBody: boolean): void {
    conn.searched = 0;
    conn.requestStart = conn.buffered > 0 ? performance.now() : -1;
    conn.busy = true;
    if (target === "*") {
      this.answer(conn, { status: 200, headers: { allow: "GET, POST", "cache-control": "no-store" }, body: "" }, withBody);
      return;
    }
    const request = new ParsedRequest(method, toAscii(target), headers, conn.remote);
    let reply: HttpReply | Promise<HttpReply>;
    try {
      reply = this.options.handle(request);
    } catch (error) {
      reply = this.options.failed(error);
    }
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
    conn.pending = serialize(reply, conn.closeAfter ? null : this.keepAliveHint, withBody);
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
      if (conn.linger && !conn.peerEnded) this.drain(conn);
      else this.close(conn, false);
      return;
    }
    if (conn.buffered > 0 && !conn.scheduled) {
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

  /** A head over MAX_HEAD: 414 when the request line alone is, else 431. */
  private refuseTooLarge(conn: Connection, input: Buffer): void {
    const lineEnd = input.indexOf("\r\n");
    if (lineEnd < 0 || lineEnd > MAX_HEAD) this.refuse(conn, 414, "URI_TOO_LONG", `the request line is over ${MAX_HEAD} bytes`);
    else this.refuse(conn, 431, "HEAD_TOO_LARGE", `the request head is over ${MAX_HEAD} bytes`);
  }

  /** Answer an unusable request with an error and close. */
  private refuse(conn: Connection, status: number, code: string, message: string, withBody = true): void {
    conn.clear();
    conn.searched = 0;
    conn.closeAfter = true;
    conn.linger = true;
    conn.busy = true;
    this.answer(conn, errorReply(status, code, message), withBody);
  }

  /**
   * The answer is written but the client may still be sending (a body we
   * refused): closing now would make the kernel answer those bytes with a
   * reset, which can destroy the answer before the client reads it. So
   * send FIN, discard what still arrives, and close at the peer's FIN, or
   * at the idle timeout however much keeps coming (the connection still
   * counts against the limit meanwhile).
   */
  private drain(conn: Connection): void {
    conn.draining = true;
    conn.clear();
    conn.requestStart = performance.now();
    conn.socket.shutdown();
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

/** Whether `bytes[from, to)` holds a LF whose byte before is not a CR. */
function hasBareLf(bytes: Buffer, from: number, to: number): boolean {
  for (let at = bytes.indexOf(LF, from); at >= 0 && at < to; at = bytes.indexOf(LF, at + 1)) {
    if (at === 0 || bytes[at - 1] !== CR) return true;
  }
  return false;
}

/** Strip optional whitespace (SP and HTAB only: String.trim also strips NBSP and more). */
function trimOws(text: string): string {
  let a = 0;
  let b = text.length;
  while (a < b && (text.charCodeAt(a) === 0x20 || text.charCodeAt(a) === 0x09)) a++;
  while (b > a && (text.charCodeAt(b - 1) === 0x20 || text.charCodeAt(b - 1) === 0x09)) b--;
  return text.slice(a, b);
}

/** Bytes above 0x7f in a request target, percent-encoded (the target is decoded as Latin-1). */
function toAscii(target: string): string {
  return /[^\x21-\x7e]/.test(target)
    ? target.replace(/[^\x21-\x7e]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`)
    : target;
}

function remoteOf(socket: Socket<unknown>): string {
  return peerOf(socket) || "unknown";
}

/** A byte that may start an HTTP method (RFC 9110 tchar). */
function isTokenByte(byte: number): boolean {
  return (
    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) ||
    "!#$%&'*+-.^_`|~".includes(String.fromCharCode(byte))
  );
}
