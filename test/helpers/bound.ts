/** A lock-protocol peer with a chosen source address on 127.0.0.0/8, for per-source tests. */
import { connect, type Socket as NetSocket } from "node:net";
import { FrameLimits, FrameReader, FrameType, SERVER_FRAMES, decodeError, encodeAcquire } from "../../src/protocol/index.ts";
import { Wakeup } from "./events.ts";

/** A peer bound to `localAddress` (node:net: Bun.connect cannot choose its source address). */
export class BoundPeer {
  readonly frames: { type: number; code?: number; message?: string }[] = [];
  closed = false;
  private readonly events = new Wakeup();
  private readonly reader = new FrameReader(new FrameLimits(SERVER_FRAMES));
  private constructor(private readonly socket: NetSocket) {
    socket.on("data", (chunk: Buffer) => {
      this.reader.push(new Uint8Array(chunk), {
        onFrame: (type, _flags, bytes, offset, length) => {
          this.frames.push({ type, ...(type === FrameType.ERROR ? decodeError(bytes, offset, length) : {}) });
          return true;
        },
      });
      this.events.wake();
    });
    socket.on("close", () => {
      this.closed = true;
      this.events.wake();
    });
    socket.on("error", () => this.events.wake());
  }

  static async connect(port: number, localAddress: string): Promise<BoundPeer> {
    const socket = connect({ host: "127.0.0.1", port, localAddress });
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    return new BoundPeer(socket);
  }

  acquire(name: string): void {
    this.socket.write(encodeAcquire({ name, leaseMs: 60_000, owner: "", try: false }));
  }

  until<T>(check: () => T | undefined | false, what: string): Promise<T> {
    return this.events.until(check, 5000, () => `${what}; frames ${JSON.stringify(this.frames)} closed=${this.closed}`);
  }

  end(): void {
    this.socket.end();
  }
}

