/**
 * A raw protocol peer for tests: connect, write bytes, and await the
 * server's frames and the close, one event at a time. No timers: every wait
 * resolves on a socket event, and `within` bounds it so a broken server
 * fails the test instead of hanging it.
 */
import type { Socket } from "bun";
import { LockServer, type ServerOptions } from "../../src/server/index.ts";
import { Wakeup } from "./events.ts";
import {
  FrameLimits,
  FrameReader,
  SERVER_FRAMES,
  decodeAcquired,
  decodeError,
  encodeAcquire,
  FrameType,
  type FrameSink,
} from "../../src/protocol/index.ts";

export interface ServerFrame {
  readonly type: number;
  readonly flags: number;
  readonly body: Uint8Array;
  /** ACQUIRED: the token. */
  readonly token?: bigint;
  /** ERROR: code and message. */
  readonly code?: number;
  readonly message?: string;
  /** performance.now() when it arrived. */
  readonly at: number;
}

const LIMITS = new FrameLimits(SERVER_FRAMES);

export class WirePeer implements FrameSink {
  readonly frames: ServerFrame[] = [];
  private readonly reader = new FrameReader(LIMITS);
  private readonly events = new Wakeup();
  private socket: Socket<WirePeer> | null = null;
  isClosed = false;
  closedAt = 0;
  readError = "";

  handshake: Promise<boolean> | null = null;

  /**
   * Connect; with `tls`, also wait for the handshake (Bun drops what a TLS
   * socket writes before it). Resolves false-handshakes too: check `isClosed`.
   */
  static async connect(port: number, hostname = "127.0.0.1", tls?: Bun.TLSOptions): Promise<WirePeer> {
    const peer = new WirePeer();
    let shaken: (ok: boolean) => void = () => {};
    if (tls !== undefined) peer.handshake = new Promise<boolean>((resolve) => (shaken = resolve));
    peer.socket = await Bun.connect<WirePeer>({
      hostname,
      port,
      data: peer,
      ...(tls === undefined ? {} : { tls }),
      socket: {
        binaryType: "uint8array",
        handshake(_socket, success) {
          shaken(success);
        },
        data(socket, chunk: Uint8Array) {
          const p = socket.data;
          if (p.reader.push(chunk, p) === 2) p.readError = p.reader.errorMessage;
          p.wake();
        },
        close(socket) {
          shaken(false);
          const p = socket.data;
          if (!p.isClosed) {
            p.isClosed = true;
            p.closedAt = performance.now();
          }
          p.wake();
        },
        error(socket) {
          socket.data.wake();
        },
      },
    });
    if (peer.handshake !== null) await peer.handshake;
    return peer;
  }

  /**
   * Connect, send ACQUIRE for `name` and await the server's first answer
   * (`frames[0]`: ACQUIRED, WAITING or an ERROR): a peer that holds or
   * waits for the lock, for tests that need someone else in the queue.
   */
  static async claim(
    port: number,
    name: string,
    leaseMs = 60_000,
    options: { owner?: string; try?: boolean; limit?: number; shared?: boolean; hostname?: string; tls?: Bun.TLSOptions } = {},
  ): Promise<WirePeer> {
    const peer = await WirePeer.connect(port, options.hostname, options.tls);
    peer.acquire(name, leaseMs, options);
    await peer.frame(0);
    return peer;
  }

  onFrame(type: number, flags: number, bytes: Uint8Array, offset: number, length: number): boolean {
    const body = bytes.slice(offset, offset + length);
    const frame: ServerFrame = {
      type,
      flags,
      body,
      at: performance.now(),
      ...(type === FrameType.ACQUIRED ? { token: decodeAcquired(body, 0) } : {}),
      ...(type === FrameType.ERROR ? decodeError(body, 0, body.length) : {}),
    };
    this.frames.push(frame);
    return true;
  }

  private wake(): void {
    this.events.wake();
  }

  /** Resolve when `check` holds, re-checked on every socket event; reject after `ms`. */
  until<T>(check: () => T | undefined | false, ms = 5000, what = "condition"): Promise<T> {
    return this.events.until(check, ms, () => `${what}; frames: ${this.describe()}`);
  }

  /** The next frame after the `index`-th (0-based count of frames already consumed). */
  async frame(index: number, ms = 5000): Promise<ServerFrame> {
    return this.until(() => this.frames[index], ms, `frame #${index}`);
  }

  async closed(ms = 5000): Promise<void> {
    await this.until(() => this.isClosed, ms, "close");
  }

  write(bytes: Uint8Array | number[]): number {
    return this.socket!.write(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes));
  }

  acquire(name: string, leaseMs: number, options: { owner?: string; try?: boolean; limit?: number; shared?: boolean } = {}): void {
    this.write(encodeAcquire({ name, leaseMs, owner: options.owner ?? "", try: options.try ?? false, limit: options.limit ?? 1, shared: options.shared ?? false }));
  }

  heartbeat(): void {
    this.write([FrameType.HEARTBEAT, 0, 0, 0]);
  }

  /** Stop reading from the socket (the kernel buffers fill; the server's writes back up). */
  pause(): void {
    this.socket?.pause();
  }

  /** Write everything, waiting for the socket to take it (backpressure), bounded by `ms`. */
  async writeAll(bytes: Uint8Array, ms = 10_000): Promise<void> {
    const deadline = performance.now() + ms;
    let offset = 0;
    while (offset < bytes.length) {
      const written = this.socket!.write(bytes, offset, Math.min(65536, bytes.length - offset));
      if (written < 0) throw new Error("socket closed while writing");
      offset += written;
      if (written === 0) {
        if (performance.now() > deadline) throw new Error(`writeAll: ${offset}/${bytes.length} bytes taken in ${ms} ms`);
        await Bun.sleep(1); // no drain event on a paused socket: retry shortly
      }
    }
  }

  end(): void {
    this.socket?.end();
  }

  terminate(): void {
    this.socket?.terminate();
  }

  describe(): string {
    return JSON.stringify(this.frames.map((f) => ({ type: f.type, flags: f.flags, token: f.token?.toString(), code: f.code, message: f.message })));
  }
}

/** An in-process server on 127.0.0.1, a free port; stop it with `await using`. */
export function startServer(options: Partial<ServerOptions> = {}): LockServer & AsyncDisposable {
  const server = new LockServer({ hostname: "127.0.0.1", port: 0, ioTimeoutMs: 5000, ...options });
  return Object.assign(server, { [Symbol.asyncDispose]: () => server.stop() });
}
