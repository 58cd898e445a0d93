/**
 * A scripted lock server for client tests: Bun.listen on 127.0.0.1:0 that
 * records every client frame (with its arrival time) and lets the test
 * decide, frame by frame, what to answer and when.
 */
import { Wakeup } from "../helpers/events.ts";
import type { Socket, TCPSocketListener } from "bun";
import { CLIENT_FRAMES, FrameLimits, FrameReader, type FrameSink } from "../../src/protocol/index.ts";

export interface ClientFrame {
  readonly type: number;
  readonly body: Uint8Array;
  /** performance.now() at arrival. */
  readonly at: number;
}

export interface FakeConn {
  readonly frames: ClientFrame[];
  readonly socket: Socket<FakeConn>;
  closed: boolean;
}

/** Called for every client frame; write answers with `conn.socket.write`. */
export type Script = (conn: FakeConn, frame: ClientFrame) => void;

const LIMITS = new FrameLimits(CLIENT_FRAMES);

export class FakeServer {
  readonly conns: FakeConn[] = [];
  private readonly listener: TCPSocketListener<FakeConn>;
  private readonly events = new Wakeup();

  /** `port`: 0 for any, or a given one (a server restarting on the port of a stopped one). */
  constructor(
    private readonly script: Script,
    port = 0,
  ) {
    const server = this;
    this.listener = Bun.listen<FakeConn>({
      hostname: "127.0.0.1",
      port,
      socket: {
        binaryType: "uint8array",
        open(socket) {
          const conn: FakeConn & { reader: FrameReader } = { frames: [], socket, closed: false, reader: new FrameReader(LIMITS) };
          socket.data = conn;
          server.conns.push(conn);
          server.wake();
        },
        data(socket, chunk: Uint8Array) {
          const conn = socket.data as FakeConn & { reader: FrameReader };
          const sink: FrameSink = {
            onFrame(type, _flags, bytes, offset, length) {
              const frame = { type, body: bytes.slice(offset, offset + length), at: performance.now() };
              conn.frames.push(frame);
              server.script(conn, frame);
              return true;
            },
          };
          conn.reader.push(chunk, sink);
          server.wake();
        },
        close(socket) {
          socket.data.closed = true;
          server.wake();
        },
      },
    });
  }

  get port(): number {
    return this.listener.port;
  }

  private wake(): void {
    this.events.wake();
  }

  /** Resolve when `check` holds, re-checked on every socket event; reject after `ms`. */
  until<T>(check: () => T | undefined | false, ms = 5000, what = "condition"): Promise<T> {
    return this.events.until(check, ms, () => `fake server: ${what}`);
  }

  [Symbol.dispose](): void {
    this.listener.stop(true);
  }
}

/** Resolve when `signal` aborts (with the time it did), or reject after `ms`. */
export function aborted(signal: AbortSignal, ms: number): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    if (signal.aborted) return resolve(performance.now());
    const timer = setTimeout(() => reject(new Error(`signal did not abort within ${ms} ms`)), ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve(performance.now());
      },
      { once: true },
    );
  });
}

/** Re-check `check` every 10 ms until it holds; reject after `ms`. For state without an event. */
export async function eventually(check: () => boolean, ms = 5000, what = "condition"): Promise<void> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await Bun.sleep(10);
  }
}
