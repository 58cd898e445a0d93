/**
 * The attacker for bench/abuse.ts (a child process; it connects from the
 * default source, 127.0.0.1, with Bun.connect). One attack per process:
 *
 *   a  pipelined heartbeats, reading: one connection; after ACQUIRED it
 *      writes HEARTBEAT frames (02 00 00 00) as fast as the socket takes
 *      them and reads the replies. Not reopened once the server cuts it.
 *   b  the same without reading (reads paused from the start; ACQUIRE and
 *      the heartbeats go out back to back).
 *   c  b in a loop: whenever the server cuts the connection, a new one.
 *   d  `concurrency` keep-alive connections each asking GET /metrics again
 *      as soon as the last answer is read.
 *   e  the same with GET /v1/locks?limit=100000.
 *   f  `flood` idle TCP connections to the ops port, reopened when closed.
 *   g  `flood` idle TCP connections to the lock port (nothing sent),
 *      reopened when closed.
 *   h  `concurrency` loops of: connect, ACQUIRE (a lock of its own), close,
 *      as fast as that goes.
 *   i  `concurrency` keep-alive connections each paging the whole table:
 *      GET /v1/locks?limit=1000, then the same with `cursor=` the answer's
 *      `next`, until a page has none; then from the start again.
 *   j  `concurrency` loops of: connect, ACQUIRE and 1 MiB of HEARTBEAT
 *      frames in one write (whatever the kernel takes, the rest on drain),
 *      reading replies; a new connection as soon as the server cuts it.
 *   k  f with half a request head: each connection writes
 *      `GET /livez HTTP/1.1\r\nHost: x\r\n` and nothing more.
 *   l  `concurrency` keep-alive ops connections, each writing
 *      `GET /livez` requests back to back (64 KiB at a time, as fast as the
 *      socket takes them) and reading the answers; reopened when closed.
 *   m  up to `concurrency` ops connections, opened one after the other,
 *      each sending GET /v1/locks?limit=1000 and never reading the answer;
 *      one closed by the server is opened again.
 *   n  `concurrency` keep-alive ops connections asking for the biggest view
 *      of the crowd's one lock (QUEUE_NAME, 1,000 waiters): half of them
 *      keep four `HEAD /v1/locks/NAME?limit=1000` in flight (pipelined),
 *      half send `GET` of the same, the next as soon as one is answered;
 *      reopened when closed.
 *   o  `concurrency` keep-alive ops connections, each sending one
 *      `GET /livez` every 4 s (inside the ops idle timeout of 5 s), so they
 *      stay open for the whole attack.
 *   p  `concurrency` sessions, each with a lock of its own and a lease
 *      chosen so that every lease ends at the same moment (60 % into the
 *      attack): lease = that moment - now, rounded, at each ACQUIRE; then
 *      silence. The server ends them all with LEASE_EXPIRED at once; when
 *      the ERRORs arrive is recorded.
 *
 * Every loop stops at the deadline and after a bounded number of
 * connections; the process also exits on its own after `lifetimeMs`.
 * `prepare` connects what must exist before the clock starts (a's
 * ACQUIRED); `run` attacks for `durationMs` and answers with counters.
 *
 * Usage: bun bench/abuse-attacker.ts <a..p> <port> <opsPort> <lifetimeMs> <concurrency> <flood> [serverPid:dataDir]
 */
import type { Socket, SocketHandler } from "bun";
import { FrameReader, FrameType, HEARTBEAT_FRAME, encodeAcquire, errorCodeName, type FrameSink } from "../src/protocol/index.ts";
import { QUEUE_NAME } from "./lib/abuse-options.ts";
import { ready, serveRequests } from "./lib/child.ts";
import { exitWithBench } from "./lib/orphan.ts";
import { SERVER_LIMITS } from "./lib/peer.ts";

const [mode = "", portArg, opsPortArg, lifetimeArg = "600000", concurrencyArg = "200", floodArg = "4500", serverArg = ""] = process.argv.slice(2);
const PORT = Number(portArg);
const OPS_PORT = Number(opsPortArg);
const CONCURRENCY = Math.max(1, Number(concurrencyArg));
const FLOOD = Math.max(1, Number(floodArg));
/** The most connections any one run opens, whatever its duration. */
const MAX_CONNECTIONS = 1_000_000;
/** Connects in flight at once (floods): a listener that stops accepting would otherwise collect thousands. */
const MAX_PENDING_CONNECTS = 256;
exitWithBench(Number(lifetimeArg), serverArg);

const counters: Record<string, number> = {};
const bump = (key: string, n = 1) => (counters[key] = (counters[key] ?? 0) + n);
let deadline = 0;
let running = false;
const sockets = new Set<Socket<Conn>>();
const live = () => running && performance.now() < deadline;

/** 64 KiB of HEARTBEAT frames. */
const HEARTBEATS = new Uint8Array(64 * 1024);
for (let i = 0; i < HEARTBEATS.length; i += 4) HEARTBEATS.set(HEARTBEAT_FRAME, i);

class Conn implements FrameSink {
  readonly reader = new FrameReader(SERVER_LIMITS);
  granted = false;
  offset = 0;
  openedAt = performance.now();
  closed = false;
  onGranted: (() => void) | null = null;
  onClosed: (() => void) | null = null;
  /** HTTP: bytes of the answer still to read; -1 reading the head; -2 close-delimited. */
  remaining = -1;
  head = "";
  path = "";
  /** i: the current answer's body (to find `next`), and the cursor to send. */
  body: Uint8Array[] = [];
  cursor: string | null = null;

  onFrame(type: number, _flags: number, bytes: Uint8Array, offset: number): boolean {
    if (type === FrameType.ACQUIRED && !this.granted) {
      this.granted = true;
      bump("ACQUIRED");
      this.onGranted?.();
    } else if (type === FrameType.ERROR) {
      const code = errorCodeName(bytes[offset]!);
      bump(`ERROR ${code}`);
      if (code === "LEASE_EXPIRED") expiredAt.push(performance.now());
      return false;
    } else bump("replies");
    return true;
  }
}

function gone(socket: Socket<Conn>): void {
  const conn = socket.data;
  if (conn.closed) return;
  conn.closed = true;
  sockets.delete(socket);
  if (running) bump("closed by the server");
  conn.onClosed?.();
}

const FRAMES: SocketHandler<Conn> = {
  binaryType: "uint8array",
  data(socket, chunk) {
    bump("bytes read", chunk.length);
    socket.data.reader.push(chunk, socket.data);
  },
  drain(socket) {
    blast(socket);
  },
  end: gone,
  close: gone,
  error: gone,
};

const HTTP: SocketHandler<Conn> = {
  binaryType: "uint8array",
  data(socket, chunk) {
    bump("bytes read", chunk.length);
    httpData(socket, chunk);
  },
  end: gone,
  close: gone,
  error: gone,
};

async function connect(port: number, handler: SocketHandler<Conn>): Promise<Socket<Conn> | null> {
  if (counters.connects !== undefined && counters.connects >= MAX_CONNECTIONS) return null;
  bump("connects");
  try {
    const socket = await Bun.connect<Conn>({ hostname: "127.0.0.1", port, data: new Conn(), socket: handler });
    sockets.add(socket);
    return socket;
  } catch (error) {
    bump(`connect failed (${(error as { code?: string }).code ?? (error as Error).message})`);
    return null;
  }
}

function acquireFrame(): Uint8Array {
  return encodeAcquire({ name: `abuse/attack/${process.pid}/${counters.connects ?? 0}`, leaseMs: 60_000, owner: "abuse-attacker", try: false });
}

// --- a, b, c: pipelined heartbeats ----------------------------------------------

/** Write heartbeats until the socket takes no more (then `drain` calls again), yielding now and then. */
function blast(socket: Socket<Conn>): void {
  const conn = socket.data;
  if (conn.closed || !conn.granted) return;
  for (let round = 0; round < 16; round++) {
    if (!live()) return;
    const length = HEARTBEATS.length - conn.offset;
    const written = socket.write(HEARTBEATS, conn.offset, length);
    if (written < 0) return;
    bump("bytes sent", written);
    conn.offset = (conn.offset + written) % HEARTBEATS.length;
    if (written < length) return; // the kernel is full: drain() resumes
  }
  setImmediate(() => blast(socket));
}

/** One pipelining connection; resolves when the server has cut it (or at the deadline). */
async function pipeline(reading: boolean, prepared: Socket<Conn> | null): Promise<void> {
  const socket = prepared ?? (await connect(PORT, FRAMES));
  if (socket === null) return;
  const conn = socket.data;
  const closed = new Promise<void>((resolve) => (conn.onClosed = resolve));
  if (!reading) {
    socket.pause();
    conn.granted = true; // nothing is read: send the heartbeats right behind the ACQUIRE
    socket.write(acquireFrame());
  }
  const started = performance.now();
  blast(socket);
  await Promise.race([closed, Bun.sleep(Math.max(0, deadline - performance.now()))]);
  if (conn.closed) {
    bump("connections cut");
    bump("ms until cut (sum)", performance.now() - started);
  }
}

async function prepareA(): Promise<Socket<Conn>> {
  const socket = await connect(PORT, FRAMES);
  if (socket === null) throw new Error("attack a: cannot connect");
  const granted = new Promise<void>((resolve) => (socket.data.onGranted = resolve));
  socket.write(acquireFrame());
  await Promise.race([granted, Bun.sleep(10_000).then(() => Promise.reject(new Error("attack a: no ACQUIRED in 10 s")))]);
  return socket;
}

// --- d, e: concurrent ops requests ----------------------------------------------

function httpRequest(socket: Socket<Conn>): void {
  const conn = socket.data;
  conn.remaining = -1;
  conn.head = "";
  conn.body = [];
  const target = conn.cursor === null ? conn.path : `${conn.path}&cursor=${encodeURIComponent(conn.cursor)}`;
  socket.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
}

/** i: the `next` cursor of the page just read (null: the last page, or no JSON). */
function nextCursor(conn: Conn): string | null {
  try {
    const page = JSON.parse(Buffer.concat(conn.body).toString("utf8")) as { next?: unknown };
    return typeof page.next === "string" ? page.next : null;
  } catch {
    return null;
  }
}

function httpData(socket: Socket<Conn>, chunk: Uint8Array): void {
  const conn = socket.data;
  let pos = 0;
  while (pos < chunk.length) {
    if (conn.remaining === -2) return; // close-delimited: read until the close
    if (conn.remaining === -1) {
      const take = Math.min(chunk.length - pos, 4096);
      const before = conn.head.length;
      conn.head += Buffer.from(chunk.buffer, chunk.byteOffset + pos, take).toString("latin1");
      const end = conn.head.indexOf("\r\n\r\n");
      if (end < 0) {
        pos += take;
        if (conn.head.length > 16_384) socket.terminate();
        continue;
      }
      pos += end + 4 - before;
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(conn.head)?.[1] ?? "???";
      bump(`HTTP ${status}`);
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(conn.head);
      conn.remaining = length === null ? -2 : Number(length[1]);
    }
    if (conn.remaining >= 0) {
      const take = Math.min(conn.remaining, chunk.length - pos);
      if (mode === "i") conn.body.push(chunk.slice(pos, pos + take));
      conn.remaining -= take;
      pos += take;
      if (conn.remaining === 0) {
        bump("answers");
        if (mode === "i") {
          conn.cursor = nextCursor(conn);
          if (conn.cursor === null) bump("tables paged");
        }
        if (live()) httpRequest(socket);
        else socket.terminate();
        return;
      }
    }
  }
}

async function requester(path: string): Promise<void> {
  while (live()) {
    const socket = await connect(OPS_PORT, HTTP);
    if (socket === null) {
      await Bun.sleep(10);
      continue;
    }
    const closed = new Promise<void>((resolve) => (socket.data.onClosed = resolve));
    socket.data.path = path;
    httpRequest(socket);
    await Promise.race([closed, Bun.sleep(Math.max(0, deadline - performance.now()))]);
  }
}

// --- f, g, k: idle floods ------------------------------------------------------------

/** `first`: what each connection writes once connected (k), then nothing. */
async function flood(port: number, first: string | null = null): Promise<void> {
  let pending = 0;
  let maxOpen = 0;
  const handler: SocketHandler<Conn> = { ...FRAMES, drain() {}, ...(first === null ? {} : { open: (socket: Socket<Conn>) => void socket.write(first) }) };
  await new Promise<void>((resolve) => {
    const fill = () => {
      if (!live()) return resolve();
      while (sockets.size + pending < FLOOD && pending < MAX_PENDING_CONNECTS && live()) {
        pending++;
        void connect(port, handler).then((socket) => {
          pending--;
          maxOpen = Math.max(maxOpen, sockets.size);
          if (socket !== null) socket.data.onClosed = () => setImmediate(fill);
          setImmediate(fill);
        });
      }
    };
    fill();
    setTimeout(resolve, Math.max(0, deadline - performance.now()));
  });
  counters["most open at once"] = maxOpen;
}

// --- l: pipelined ops requests -------------------------------------------------------

/** 64 KiB of `GET /livez` requests. */
const LIVEZ = (() => {
  const one = "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
  return Buffer.from(one.repeat(Math.floor((64 * 1024) / one.length)), "latin1");
})();

const HTTP_PIPELINE: SocketHandler<Conn> = {
  binaryType: "uint8array",
  data(_socket, chunk) {
    bump("bytes read", chunk.length);
    // Answers counted by their status lines (one split across two chunks is missed: a slight undercount).
    const text = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length).toString("latin1");
    let n = 0;
    for (let at = text.indexOf("HTTP/1.1 "); at >= 0; at = text.indexOf("HTTP/1.1 ", at + 9)) n++;
    bump("answers", n);
  },
  drain(socket) {
    pipeHttp(socket);
  },
  end: gone,
  close: gone,
  error: gone,
};

/** Write requests until the socket takes no more (then `drain` calls again), yielding now and then. */
function pipeHttp(socket: Socket<Conn>): void {
  const conn = socket.data;
  if (conn.closed) return;
  for (let round = 0; round < 16; round++) {
    if (!live()) return;
    const length = LIVEZ.length - conn.offset;
    const written = socket.write(LIVEZ, conn.offset, length);
    if (written < 0) return;
    bump("bytes sent", written);
    conn.offset = (conn.offset + written) % LIVEZ.length;
    if (written < length) return;
  }
  setImmediate(() => pipeHttp(socket));
}

async function httpPipeliner(): Promise<void> {
  while (live()) {
    const socket = await connect(OPS_PORT, HTTP_PIPELINE);
    if (socket === null) {
      await Bun.sleep(1);
      continue;
    }
    const closed = new Promise<void>((resolve) => (socket.data.onClosed = resolve));
    pipeHttp(socket);
    await Promise.race([closed, Bun.sleep(Math.max(0, deadline - performance.now()))]);
  }
}

// --- m: answers never read --------------------------------------------------------------

async function unread(): Promise<void> {
  let maxOpen = 0;
  const handler: SocketHandler<Conn> = { binaryType: "uint8array", data() {}, end: gone, close: gone, error: gone };
  while (live()) {
    if (sockets.size >= CONCURRENCY) {
      await Bun.sleep(5);
      continue;
    }
    const socket = await connect(OPS_PORT, handler);
    if (socket === null) {
      await Bun.sleep(10);
      continue;
    }
    socket.pause(); // never read: the answer stays in the sockets' buffers and the server
    socket.write("GET /v1/locks?limit=1000 HTTP/1.1\r\nHost: x\r\n\r\n");
    maxOpen = Math.max(maxOpen, sockets.size);
    counters["most open at once"] = maxOpen;
  }
}

// --- h: connection flood ------------------------------------------------------------

async function churn(): Promise<void> {
  while (live()) {
    const socket = await connect(PORT, FRAMES);
    if (socket === null) {
      await Bun.sleep(1);
      continue;
    }
    const closed = new Promise<void>((resolve) => (socket.data.onClosed = resolve));
    socket.write(acquireFrame());
    socket.end();
    await Promise.race([closed, Bun.sleep(Math.max(0, deadline - performance.now()))]);
  }
}

// --- j: pipelining in big writes, reconnecting -------------------------------------

/** ACQUIRE and 1 MiB of heartbeats: what one connection of j writes. */
function bigBatch(): Uint8Array {
  const acquire = acquireFrame();
  const out = new Uint8Array(acquire.length + 16 * HEARTBEATS.length);
  out.set(acquire, 0);
  for (let i = 0; i < 16; i++) out.set(HEARTBEATS, acquire.length + i * HEARTBEATS.length);
  return out;
}

async function bigPipeliner(): Promise<void> {
  while (live()) {
    const batch = bigBatch();
    const socket = await connect(PORT, {
      ...FRAMES,
      drain(s) {
        const c = s.data;
        if (c.closed || c.offset >= batch.length) return;
        const written = s.write(batch, c.offset, batch.length - c.offset);
        if (written > 0) {
          c.offset += written;
          bump("bytes sent", written);
        }
      },
    });
    if (socket === null) {
      await Bun.sleep(1);
      continue;
    }
    const conn = socket.data;
    const closed = new Promise<void>((resolve) => (conn.onClosed = resolve));
    const started = performance.now();
    const written = socket.write(batch);
    if (written > 0) {
      conn.offset = written;
      bump("bytes sent", written);
    }
    await Promise.race([closed, Bun.sleep(Math.max(0, deadline - performance.now()))]);
    if (conn.closed) {
      bump("connections cut");
      bump("ms until cut (sum)", performance.now() - started);
    }
  }
}

// --- n: the biggest views of one lock --------------------------------------------------

const VIEW = `/v1/locks/${encodeURIComponent(QUEUE_NAME)}?limit=1000`;

interface Viewer {
  readonly method: "GET" | "HEAD";
  /** Methods of the requests sent and not answered yet, in order. */
  readonly sent: ("GET" | "HEAD")[];
  head: string;
  /** Body bytes still to read; -1 reading a head. */
  remaining: number;
}

function askView(socket: Socket<Viewer>): void {
  const method = socket.data.method;
  socket.data.sent.push(method);
  socket.write(`${method} ${VIEW} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
}

/** An answer to HEAD has no body (the server sends Transfer-Encoding: chunked and none); a GET's has Content-Length. */
function viewData(socket: Socket<Viewer>, chunk: Uint8Array): void {
  bump("bytes read", chunk.length);
  const v = socket.data;
  let pos = 0;
  while (pos < chunk.length) {
    if (v.remaining < 0) {
      const take = Math.min(chunk.length - pos, 4096);
      const before = v.head.length;
      v.head += Buffer.from(chunk.buffer, chunk.byteOffset + pos, take).toString("latin1");
      const end = v.head.indexOf("\r\n\r\n");
      if (end < 0) {
        pos += take;
        if (v.head.length > 16_384) socket.terminate();
        continue;
      }
      pos += end + 4 - before;
      const method = v.sent.shift() ?? "GET";
      bump(`HTTP ${/^HTTP\/1\.[01] (\d{3})/.exec(v.head)?.[1] ?? "???"} ${method}`);
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(v.head);
      v.remaining = method === "HEAD" || length === null ? 0 : Number(length[1]);
      v.head = "";
    }
    const take = Math.min(v.remaining, chunk.length - pos);
    v.remaining -= take;
    pos += take;
    if (v.remaining === 0) {
      v.remaining = -1;
      bump("answers");
      if (live()) askView(socket);
    }
  }
}

async function viewer(method: "GET" | "HEAD", depth: number): Promise<void> {
  while (live()) {
    const { promise: closed, resolve } = Promise.withResolvers<void>();
    let socket: Socket<Viewer>;
    try {
      bump("connects");
      socket = await Bun.connect<Viewer>({
        hostname: "127.0.0.1",
        port: OPS_PORT,
        data: { method, sent: [], head: "", remaining: -1 },
        socket: {
          binaryType: "uint8array",
          data: viewData,
          end: () => resolve(),
          close: () => resolve(),
          error: () => resolve(),
        },
      });
    } catch (error) {
      bump(`connect failed (${(error as { code?: string }).code ?? (error as Error).message})`);
      await Bun.sleep(10);
      continue;
    }
    for (let i = 0; i < depth; i++) askView(socket);
    await Promise.race([closed, Bun.sleep(Math.max(0, deadline - performance.now()))]);
    if (running && live()) bump("closed by the server");
    socket.terminate();
  }
}

// --- o: keep-alive ops connections, one request each every 4 s ----------------------------

async function keepAlive(): Promise<void> {
  while (live()) {
    let answered: () => void = () => {};
    const { promise: closed, resolve } = Promise.withResolvers<void>();
    let socket: Socket<undefined>;
    try {
      bump("connects");
      socket = await Bun.connect({
        hostname: "127.0.0.1",
        port: OPS_PORT,
        socket: {
          data(_s, chunk) {
            bump("bytes read", chunk.length);
            // One small answer a request: a status line in the chunk is an answer.
            if (Buffer.from(chunk).includes("HTTP/1.1 ")) {
              bump("answers");
              answered();
            }
          },
          end: () => resolve(),
          close: () => resolve(),
          error: () => resolve(),
        },
      });
    } catch (error) {
      bump(`connect failed (${(error as { code?: string }).code ?? (error as Error).message})`);
      await Bun.sleep(100);
      continue;
    }
    let open = true;
    void closed.then(() => (open = false));
    counters["most open at once"] = Math.max(counters["most open at once"] ?? 0, ++keptOpen);
    while (open && live()) {
      const got = new Promise<void>((r) => (answered = r));
      socket.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      await Promise.race([got, closed, Bun.sleep(Math.max(0, deadline - performance.now()))]);
      await Promise.race([closed, Bun.sleep(Math.min(4000, Math.max(0, deadline - performance.now())))]);
    }
    keptOpen--;
    if (!open && live()) bump("closed by the server");
    socket.terminate();
  }
}
let keptOpen = 0;

// --- p: leases that all end at once ------------------------------------------------------

/** When the attacker read each LEASE_EXPIRED (p). */
const expiredAt: number[] = [];

async function expirers(count: number, durationMs: number): Promise<void> {
  const endAt = performance.now() + durationMs * 0.6;
  counters["leases end at (ms into the attack)"] = Math.round(durationMs * 0.6);
  let opened = 0;
  const one = async (i: number): Promise<void> => {
    const socket = await connect(PORT, FRAMES);
    if (socket === null) return;
    const leaseMs = Math.round(endAt - performance.now());
    if (leaseMs < 200) {
      socket.terminate();
      return;
    }
    socket.write(encodeAcquire({ name: `abuse/expire/${process.pid}/${i}`, leaseMs, owner: "abuse-expirer", try: false }));
    opened++;
  };
  // 256 connects at a time, until all are open or the common end is under 2 s away.
  for (let i = 0; i < count && live() && endAt - performance.now() > 2000; i += 256) {
    await Promise.all(Array.from({ length: Math.min(256, count - i) }, (_, j) => one(i + j)));
  }
  counters["sessions opened"] = opened;
  counters["opened by (ms into the attack)"] = Math.round(performance.now() - (endAt - durationMs * 0.6));
  await Bun.sleep(Math.max(0, deadline - performance.now()));
  if (expiredAt.length > 0) {
    counters["first LEASE_EXPIRED after the end (ms)"] = Math.round(expiredAt[0]! - endAt);
    counters["last LEASE_EXPIRED after the end (ms)"] = Math.round(expiredAt[expiredAt.length - 1]! - endAt);
  }
}

// --- IPC -------------------------------------------------------------------------------

let prepared: Socket<Conn> | null = null;
if (mode === "a") prepared = await prepareA();
else if (!"bcdefghijklmnop".includes(mode) || mode.length !== 1) throw new Error(`unknown attack ${JSON.stringify(mode)}`);

serveRequests({
  async run(request) {
    const durationMs = Number(request.durationMs);
    const t0 = performance.now();
    deadline = t0 + durationMs;
    running = true;
    switch (mode) {
      case "a":
        await pipeline(true, prepared);
        break;
      case "b":
        await pipeline(false, null);
        break;
      case "c":
        while (live()) await pipeline(false, null);
        break;
      case "d":
      case "e": {
        const path = mode === "d" ? "/metrics" : "/v1/locks?limit=100000";
        await Promise.all(Array.from({ length: CONCURRENCY }, () => requester(path)));
        break;
      }
      case "f":
        await flood(OPS_PORT);
        break;
      case "g":
        await flood(PORT);
        break;
      case "h":
        await Promise.all(Array.from({ length: CONCURRENCY }, () => churn()));
        break;
      case "i":
        await Promise.all(Array.from({ length: CONCURRENCY }, () => requester("/v1/locks?limit=1000")));
        break;
      case "j":
        await Promise.all(Array.from({ length: CONCURRENCY }, () => bigPipeliner()));
        break;
      case "k":
        await flood(OPS_PORT, "GET /livez HTTP/1.1\r\nHost: x\r\n");
        break;
      case "l":
        await Promise.all(Array.from({ length: CONCURRENCY }, () => httpPipeliner()));
        break;
      case "m":
        await unread();
        break;
      case "n":
        await Promise.all(Array.from({ length: CONCURRENCY }, (_, i) => (i % 2 === 0 ? viewer("HEAD", 4) : viewer("GET", 1))));
        break;
      case "o":
        await Promise.all(Array.from({ length: CONCURRENCY }, () => keepAlive()));
        break;
      case "p":
        await expirers(CONCURRENCY, durationMs);
        break;
    }
    // Whatever is left waiting returns at the deadline; stop everything.
    await Bun.sleep(Math.max(0, deadline - performance.now()));
    running = false;
    const open = sockets.size;
    for (const socket of sockets) socket.terminate();
    return { counters, open, wallMs: performance.now() - t0 };
  },
});
ready({ mode });
