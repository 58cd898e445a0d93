/**
 * LockServer: the thin Bun shell around the engine.
 *
 * Socket events become engine calls with `performance.now()` (monotonic ms);
 * the engine's frames become socket writes. One handler object serves every
 * socket, the per-connection state lives in `socket.data` (a Conn), and one
 * real timer drives the engine's timer wheel: armed for the next occupied
 * slot, not at all while the wheel is empty.
 *
 * Writes produced while one connection's chunk is being read (a reply per
 * frame, and the session's ERROR if it ends) are gathered in one scratch
 * buffer and written with one syscall at the end of the chunk. Bun delivers
 * chunks of up to 512 KiB (measured with Bun 1.4.5: it reads into one
 * 512 KiB buffer, and reads the same socket again in the same loop turn
 * only when a read filled it), which could hold 131,072 heartbeats; but at
 * most PIPELINE_LIMIT frames of one chunk are handled (Conn.onFrame), so the
 * replies to one chunk always fit SCRATCH_SIZE and go out in one write.
 * Frames for other connections (a promotion pushed because this
 * connection's owner session ended) are written at once.
 *
 * A lock-delay (core/delay.ts) holds grants back; a second timer, armed
 * only while one runs, calls Engine.resume when a delay ends, and so does
 * `resume()` when a raise of the durable lease or a token block lands.
 * Each call grants at most RESUME_BUDGET claims; the rest go on in the next
 * loop turn (setImmediate), so a crowd of held-back claims never stalls
 * the loop.
 *
 * Release happens on the first of `end`, `close` or `error`; the engine
 * makes the second call a no-op. Bun may call `close` synchronously from
 * inside `end()`/`terminate()`, which is why every path is idempotent.
 */
import type { Socket, SocketHandler, TCPSocketListener } from "bun";
import { Engine, type EngineWords, EXPIRY_BUDGET, type GrantGuard, type ReclaimEntry, type ReclaimOptions, type Session, SessionState, type EngineOutput } from "../core/index.ts";
import type { LockDelay } from "../core/delay.ts";
import type { TokenSource } from "../core/tokens.ts";
import type { WheelDriver } from "../core/wheel.ts";
import { HEADER_LENGTH, MAX_ERROR_MESSAGE_LENGTH, PIPELINE_LIMIT, ReadResult, TOKEN_LENGTH } from "../protocol/index.ts";
import type { LockSource } from "../ops/sources.ts";
import { Conn, type FrameHandler } from "./conn.ts";
import { EngineLocks } from "./locks.ts";

export interface ServerOptions {
  readonly hostname: string;
  /** 0 picks a free port (tests). */
  readonly port: number;
  readonly ioTimeoutMs: number;
  readonly maxSessions?: number;
  /** Live sessions from one peer address beyond this get OVERLOADED. Default: no limit. */
  readonly maxSessionsPerSource?: number;
  /**
   * Bytes of unflushed output after which a connection is cut at once
   * rather than at io-timeout. Only a client that sends without reading
   * gets near it. Default 64 KiB.
   */
  readonly outboxLimit?: number;
  readonly tokens?: TokenSource;
  /** Asked before every grant (see EngineOptions.grantGuard): --coordinator's deadline check. */
  readonly grantGuard?: GrantGuard;
  /** The shard guard: refuses ACQUIREs for names of other shards (EngineOptions.shardGuard). */
  readonly shardGuard?: ((name: string) => Uint8Array | null) | null;
  /** The lock-delay and the durable largest lease (EngineOptions.delay). */
  readonly delay?: LockDelay;
  /** Called once when the lock-delay is over (the data directory clears what it carried). */
  readonly onDelayOver?: () => void;
  /** Leases above this are BAD_REQUEST (--max-lease). */
  readonly maxLeaseMs?: number;
  /** How the engine's messages name its settings (EngineOptions.words). */
  readonly words?: EngineWords;
  /** Serve TLS instead of plain TCP. */
  readonly tls?: ServerTls;
  /** Session lifecycle callbacks (logging). Off the hot path: once per session. */
  readonly events?: ServerEvents;
  /** Reclaim (EngineOptions.reclaim): its cap and the grants the last clean stop published. Omitted: off. */
  readonly reclaim?: ReclaimOptions;
  /** Called with the token of each reclaim granted (the grace's account of who came back). */
  readonly onReclaimed?: (token: number) => void;
}

/**
 * Called once when a session is opened, and once when it ends, while its
 * socket is still usable (`session.endReason` says why: CLOSED_BY_PEER (0) the peer closed,
 * else the ERROR code being sent).
 */
export interface ServerEvents {
  opened(session: Session<Conn>): void;
  ended(session: Session<Conn>): void;
}

export interface ServerTls {
  /** PEM certificate chain and private key of the server. */
  readonly cert: string;
  readonly key: string;
  /**
   * PEM CA certificate(s) for client certificates. When set, clients must
   * present a certificate signed by one of them (mutual TLS); others are
   * cut during the handshake, before any frame is read.
   */
  readonly clientCa?: string;
}

/**
 * setTimeout's longest delay. A longer one fires after 1 ms instead (with a
 * TimeoutOverflowWarning), and leases reach 2^32 - 1 ms, so the wheel's next
 * tick can be further away than this: such a timer fires early and re-arms.
 */
const MAX_TIMER_DELAY = 2 ** 31 - 1;

/**
 * The most one chunk can make the server write to its own connection: a
 * reply to each of PIPELINE_LIMIT frames (ACQUIRED, 12 bytes, is the
 * largest) and the ERROR that ends the session (the pipelining error
 * itself, or any other), so that all of it is one write.
 */
export const SCRATCH_SIZE = PIPELINE_LIMIT * (HEADER_LENGTH + TOKEN_LENGTH) + HEADER_LENGTH + 1 + MAX_ERROR_MESSAGE_LENGTH;

export class LockServer implements EngineOutput<Conn>, FrameHandler, WheelDriver {
  /** The engine is the server's alone: others read `locks` and the few figures below. */
  private readonly engine: Engine<Conn>;
  /** The lock table as the ops room reads it (views, counters, the two admin actions). */
  readonly locks: LockSource;
  private readonly listener: TCPSocketListener<Conn>;
  private readonly outboxLimit: number;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly events: ServerEvents | null;
  private readonly fire = (): void => {
    this.timer = null;
    const promoted = this.engine.stats.grantsPromoted;
    const now = performance.now();
    // At most EXPIRY_BUDGET deadlines per callback: the wheel re-arms at once for the rest.
    this.engine.tick(now, EXPIRY_BUDGET);
    this.handedOver(promoted, now);
  };
  /** The connection whose chunk is being read, and the replies gathered for it. */
  private batchConn: Conn | null = null;
  private batchLength = 0;
  private readonly scratch = new Uint8Array(SCRATCH_SIZE);
  private connections = 0;
  private allClosed: (() => void) | null = null;
  private stopping: Promise<void> | null = null;
  private readonly delay: LockDelay | null;
  private delayTimer: ReturnType<typeof setTimeout> | null = null;
  private resumeQueued = false;
  private onDelayOver: (() => void) | null;
  /** Told of each reclaim granted; null: nobody asks (then no chunk looks). */
  private readonly onReclaimed: ((token: number) => void) | null;

  constructor(options: ServerOptions) {
    const server = this;
    this.outboxLimit = options.outboxLimit ?? 64 * 1024;
    this.onReclaimed = options.onReclaimed ?? null;
    this.events = options.events ?? null;
    this.engine = new Engine<Conn>(
      this,
      {
        ioTimeoutMs: options.ioTimeoutMs,
        maxSessions: options.maxSessions,
        maxSessionsPerSource: options.maxSessionsPerSource,
        tokens: options.tokens,
        grantGuard: options.grantGuard,
        ...(options.shardGuard == null ? {} : { shardGuard: options.shardGuard }),
        ...(options.delay === undefined ? {} : { delay: options.delay }),
        ...(options.maxLeaseMs === undefined ? {} : { maxLeaseMs: options.maxLeaseMs }),
        ...(options.words === undefined ? {} : { words: options.words }),
        ...(options.reclaim === undefined ? {} : { reclaim: options.reclaim }),
        // A run of shared waiters longer than one step's budget goes on in the next loop turn.
        onResumeNeeded: () => server.queueResume(),
      },
      performance.now(),
    );
    this.engine.setDriver(this);
    this.locks = new EngineLocks(this.engine, {
      get connectionCount() {
        return server.connections;
      },
      forceRelease: (name, now, session) => this.forceRelease(name, now, session),
      kick: (id, now) => this.engine.kick(id, now),
    });
    this.delay = options.delay ?? null;
    const now = performance.now();
    // A delay over before it began (nothing owed) is not reported as ending.
    this.onDelayOver = this.delay === null || this.delay.over(now) ? null : (options.onDelayOver ?? null);
    this.armDelay(now);
    const tls = options.tls;
    this.listener = Bun.listen<Conn>({
      hostname: options.hostname,
      port: options.port,
      socket: this.handlers(tls?.clientCa !== undefined),
      ...(tls === undefined
        ? {}
        : {
            tls: {
              cert: tls.cert,
              key: tls.key,
              ...(tls.clientCa === undefined ? {} : { ca: tls.clientCa, requestCert: true, rejectUnauthorized: true }),
            },
          }),
    });
  }

  get hostname(): string {
    return this.listener.hostname;
  }

  get port(): number {
    return this.listener.port;
  }

  /** Open connections (including ones the engine already ended but Bun has not closed). */
  get connectionCount(): number {
    return this.connections;
  }

  /** Live sessions. */
  get sessionCount(): number {
    return this.engine.sessions.size;
  }

  /** The last fencing token issued (0 before the first grant). */
  get tokensLast(): number {
    return this.engine.tokens.last;
  }

  /**
   * Every held name with its holder's lease (ms), at most `limit` of them
   * (null when there are more): what a clean stop publishes for the next
   * server's lock-delay.
   */
  held(limit: number): Array<[string, number]> | null {
    return this.engine.held(limit);
  }

  /** Whether reclaim is on in this server's engine. */
  get reclaimOn(): boolean {
    return this.engine.reclaimOn;
  }

  /** Every reclaimable grant now, by name: what a clean stop publishes before `stop(true)`. */
  reclaimableGrants(now?: number): Map<string, ReclaimEntry[]> {
    return this.engine.reclaimableGrants(now);
  }

  /**
   * Stop: refuse new connections, send SHUTTING_DOWN to every session and
   * close it, wait (at most io-timeout) for the sockets to go, then cut any
   * that remain. `reclaim`: the caller made `reclaimableGrants()` durable,
   * so their holders get SHUTTING_DOWN with the RECLAIM flag (the first call
   * decides). Idempotent.
   */
  stop(reclaim = false): Promise<void> {
    this.stopping ??= this.drain(reclaim);
    return this.stopping;
  }

  private async drain(reclaim: boolean): Promise<void> {
    this.listener.stop(false);
    this.engine.shutdown(performance.now(), reclaim);
    if (this.connections > 0) {
      let timeout: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        new Promise<void>((resolve) => (this.allClosed = resolve)),
        new Promise<void>((resolve) => (timeout = setTimeout(resolve, this.engine.ioTimeoutMs))),
      ]);
      clearTimeout(timeout);
    }
    this.listener.stop(true);
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.delayTimer !== null) clearTimeout(this.delayTimer);
    this.delayTimer = null;
    this.engine.setDriver(null);
  }

  /**
   * Grant what the lock-delay, the durable lease or the token supply held
   * back and now allows; at most RESUME_BUDGET per loop turn.
   */
  resume(): void {
    if (this.stopping !== null) return;
    const now = performance.now();
    const promoted = this.engine.stats.grantsPromoted;
    const more = this.engine.resume(now);
    this.handedOver(promoted, now);
    if (more) this.queueResume();
    this.armDelay(now);
  }

  /** `resume` again in the next loop turn (once, however often asked before it runs). */
  private queueResume(): void {
    if (this.resumeQueued || this.stopping !== null) return;
    this.resumeQueued = true;
    setImmediate(() => {
      this.resumeQueued = false;
      this.resume();
    });
  }

  /** The timer for the next end of a delay (none when no delay runs). */
  private armDelay(now: number): void {
    if (this.delayTimer !== null) clearTimeout(this.delayTimer);
    this.delayTimer = null;
    const delay = this.delay;
    if (delay === null || this.stopping !== null) return;
    const at = delay.nextChange(now);
    if (at === Infinity) {
      if (delay.over(now) && this.onDelayOver !== null) {
        const over = this.onDelayOver;
        this.onDelayOver = null;
        over();
      }
      return;
    }
    this.delayTimer = setTimeout(() => {
      this.delayTimer = null;
      this.resume();
    }, Math.min(MAX_TIMER_DELAY, Math.max(0, Math.ceil(at - now))));
  }

  // --- admin actions (the ops server's, through `locks`) -------------------------------

  /**
   * End holder `session` of `name` (without it, the oldest holder) with
   * FORCE_RELEASED at `now` (ms); the waiters that fit are promoted, and the
   * handover measured.
   */
  private forceRelease(name: string, now: number, session?: number): Session<Conn> | null {
    const promoted = this.engine.stats.grantsPromoted;
    const ended = this.engine.forceRelease(name, now, session);
    this.handedOver(promoted, now);
    return ended;
  }

  /**
   * The handover timing around an engine call that began at `start` (ms),
   * when the count of promotions was `promotedBefore`: if the call promoted
   * a waiter, the histogram gets the time until now (its ACQUIRED written).
   * The engine reads no clock, so the shell measures.
   */
  private handedOver(promotedBefore: number, start: number): void {
    if (this.engine.stats.grantsPromoted !== promotedBefore) this.engine.stats.handedOver(start, performance.now());
  }

  // --- WheelDriver -------------------------------------------------------------

  arm(tick: number): void {
    if (this.timer !== null) clearTimeout(this.timer);
    // ceil: a timer that fires early only re-arms; one that fires late is late.
    this.timer = setTimeout(this.fire, Math.min(MAX_TIMER_DELAY, Math.max(0, Math.ceil(tick - performance.now()))));
  }

  // --- EngineOutput -----------------------------------------------------------------

  send(conn: Conn, frame: Uint8Array): void {
    if (conn === this.batchConn && conn.pendingOutput === 0 && this.batchLength + frame.length <= SCRATCH_SIZE) {
      this.scratch.set(frame, this.batchLength);
      this.batchLength += frame.length;
      return;
    }
    if (conn === this.batchConn) this.flushBatch(conn);
    this.write(conn, frame, 0, frame.length);
  }

  close(conn: Conn, frame: Uint8Array | null): void {
    if (conn.session !== null) this.events?.ended(conn.session); // once: the engine ends a session once
    let bytes = frame;
    let length = frame === null ? 0 : frame.length;
    if (conn === this.batchConn) {
      if (frame !== null && conn.pendingOutput === 0 && this.batchLength + length <= SCRATCH_SIZE) {
        // The last frame joins the replies gathered for this chunk: one write for all.
        this.scratch.set(frame, this.batchLength);
        bytes = this.scratch;
        length += this.batchLength;
        this.batchConn = null;
        this.batchLength = 0;
      } else {
        this.flushBatch(conn);
      }
    }
    if (conn.done) return;
    conn.done = true;
    const socket = conn.socket;
    if (conn.pendingOutput > 0 || conn.torn) {
      socket.terminate(); // the peer is not reading: free the kernel's buffers now
      return;
    }
    if (bytes === null) {
      socket.end();
      return;
    }
    const written = socket.write(bytes, 0, length);
    if (written === length) socket.end();
    else socket.terminate();
  }

  // --- FrameHandler ----------------------------------------------------------------

  handleFrame(conn: Conn, type: number, bytes: Uint8Array, offset: number, length: number): boolean {
    return this.engine.frame(conn.session!, type, bytes, offset, length, conn.now);
  }

  pipelined(conn: Conn): boolean {
    this.engine.pipelined(conn.session!, conn.now);
    return false;
  }

  // --- helpers -----------------------------------------------------------------------

  private write(conn: Conn, bytes: Uint8Array, offset: number, length: number): void {
    if (conn.done) return;
    if (conn.pendingOutput > 0) {
      this.stashOrCut(conn, bytes, offset, length);
      return;
    }
    const written = conn.socket.write(bytes, offset, length);
    if (written === length || written < 0) return; // < 0: closed; its close event follows
    this.stashOrCut(conn, bytes, offset + written, length - written);
    if (!conn.done && conn.session !== null) this.engine.writeBlocked(conn.session, performance.now());
  }

  private stashOrCut(conn: Conn, bytes: Uint8Array, offset: number, length: number): void {
    if (conn.pendingOutput + length <= this.outboxLimit) {
      conn.stash(bytes, offset, length);
      return;
    }
    // Sending without reading: cut now instead of buffering until io-timeout.
    // Part of a frame may be out already: the stream is torn, so the close
    // must be a reset, never an ERROR frame glued to half a frame.
    conn.torn = true;
    if (conn.session !== null) this.engine.timeOut(conn.session, performance.now());
    if (!conn.done) {
      conn.done = true;
      conn.socket.terminate();
    }
  }

  private flushBatch(conn: Conn): void {
    const length = this.batchLength;
    this.batchConn = null;
    this.batchLength = 0;
    if (length > 0) this.write(conn, this.scratch, 0, length);
  }

  private handlers(mutualTls: boolean): SocketHandler<Conn> {
    const server = this;
    const engine = this.engine;
    return {
      binaryType: "uint8array",
      // TLS only. Bun already refuses unverified client certificates; this
      // makes sure no session of an unauthorised peer outlives its handshake.
      handshake(socket: Socket<Conn>, success: boolean) {
        if (!success || (mutualTls && !socket.authorized)) {
          socket.data.done = true;
          socket.terminate();
        }
      },
      open(socket: Socket<Conn>) {
        const conn = new Conn(socket, server);
        socket.data = conn;
        server.connections++;
        // The peer's address is read (a string per accept) only when a per-source limit needs it.
        const source = engine.maxSessionsPerSource === Infinity ? null : socket.remoteAddress || null;
        conn.session = engine.open(conn, performance.now(), source);
        if (conn.session !== null) server.events?.opened(conn.session);
      },
      data(socket: Socket<Conn>, chunk: Uint8Array) {
        const conn = socket.data;
        const session = conn.session;
        if (session === null || conn.done) return;
        const now = performance.now();
        conn.now = now;
        conn.framesRead = 0;
        server.batchConn = conn;
        server.batchLength = 0;
        const promoted = engine.stats.grantsPromoted; // an owner that sends a bad frame hands over here
        const reclaims = engine.stats.reclaims; // one connection makes one claim: at most one reclaim per chunk
        const result = conn.reader.push(chunk, conn);
        if (server.onReclaimed !== null && engine.stats.reclaims !== reclaims) server.onReclaimed(session.token);
        // A bad header ends the session before the flush: its ERROR joins the replies' write.
        if (result === ReadResult.ERROR) engine.protocolError(session, conn.reader.errorMessage, now);
        if (server.batchConn === conn) server.flushBatch(conn);
        if (result === ReadResult.OK) engine.readProgress(session, conn.reader.partial, now);
        server.handedOver(promoted, now);
      },
      drain(socket: Socket<Conn>) {
        const conn = socket.data;
        if (conn.done || !conn.flush()) return;
        if (conn.session !== null) engine.writeDrained(conn.session);
      },
      end(socket: Socket<Conn>) {
        server.release(socket.data);
      },
      error(socket: Socket<Conn>) {
        server.release(socket.data);
      },
      close(socket: Socket<Conn>) {
        const conn = socket.data;
        server.release(conn);
        if (conn.closed) return;
        conn.closed = true;
        if (--server.connections === 0 && server.allClosed !== null) server.allClosed();
      },
    };
  }

  /** The peer is gone or going: release now (the engine ignores repeats). */
  private release(conn: Conn): void {
    conn.done = true;
    const session = conn.session;
    if (session === null || session.state === SessionState.ENDED) return;
    const promoted = this.engine.stats.grantsPromoted;
    const now = performance.now();
    this.engine.closed(session, now);
    this.handedOver(promoted, now);
    this.events?.ended(session);
  }
}
