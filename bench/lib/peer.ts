/**
 * Peer: a lean raw-protocol client for the socket benchmarks. It speaks
 * protocol v1 with the project's own encoders and FrameReader (SERVER_FRAMES
 * limits), and talks to lockd and to the floors alike, so the client side of
 * every comparison is the same code. The time of each chunk is taken first
 * thing in the `data` handler, before any parsing.
 */
import type { Socket, SocketHandler } from "bun";
import {
  FLAG_REPLY,
  FrameLimits,
  FrameReader,
  FrameType,
  SERVER_FRAMES,
  type FrameSink,
} from "../../src/protocol/index.ts";

export const SERVER_LIMITS = new FrameLimits(SERVER_FRAMES);

export const PeerState = { NEW: 0, WAITING: 1, OWNER: 2, CLOSED: 3 } as const;
export type PeerState = (typeof PeerState)[keyof typeof PeerState];

export class Peer implements FrameSink {
  socket: Socket<Peer> | null = null;
  readonly reader = new FrameReader(SERVER_LIMITS);
  state: PeerState = PeerState.NEW;
  /** performance.now() of the chunk that carried ACQUIRED, and of the close event. */
  grantedAt = 0;
  closedAt = 0;
  /** The ERROR code that ended the session, -1 if none. */
  errorCode = -1;
  /** Replies (REPLY flag set) received, for heartbeat loops. */
  replies = 0;
  /** When the frame in flight was sent (heartbeat loops keep it here). */
  sentAt = 0;
  private chunkAt = 0;
  private onOwner: ((at: number) => void) | null = null;
  private onSettled: ((state: PeerState) => void) | null = null;
  private onClosed: (() => void) | null = null;
  /** Called for every REPLY frame after the first answer (heartbeat replies). */
  onReply: ((peer: Peer, at: number) => void) | null = null;

  static async connect(hostname: string, port: number): Promise<Peer> {
    const peer = new Peer();
    peer.socket = await Bun.connect<Peer>({ hostname, port, data: peer, socket: HANDLERS });
    return peer;
  }

  /** Send ACQUIRE; resolves with OWNER or WAITING when the answer arrives. */
  acquire(frame: Uint8Array): Promise<PeerState> {
    return new Promise<PeerState>((resolve) => {
      this.onSettled = resolve;
      this.socket!.write(frame);
    });
  }

  /** Resolves with the arrival time of ACQUIRED (at once if already owner), or 0 if closed first. */
  owner(): Promise<number> {
    if (this.state === PeerState.OWNER) return Promise.resolve(this.grantedAt);
    if (this.state === PeerState.CLOSED) return Promise.resolve(0);
    return new Promise<number>((resolve) => (this.onOwner = resolve));
  }

  /** Resolves when the socket's close event has fired. */
  closed(): Promise<void> {
    if (this.state === PeerState.CLOSED) return Promise.resolve();
    return new Promise<void>((resolve) => (this.onClosed = resolve));
  }

  onFrame(type: number, flags: number, bytes: Uint8Array, offset: number): boolean {
    switch (type) {
      case FrameType.ACQUIRED:
        if (this.state !== PeerState.OWNER) {
          this.state = PeerState.OWNER;
          this.grantedAt = this.chunkAt;
          this.settle(PeerState.OWNER);
          const resolve = this.onOwner;
          this.onOwner = null;
          resolve?.(this.chunkAt);
          return true;
        }
        break;
      case FrameType.WAITING:
        if (this.state === PeerState.NEW) {
          this.state = PeerState.WAITING;
          this.settle(PeerState.WAITING);
          return true;
        }
        break;
      case FrameType.ERROR:
        this.errorCode = bytes[offset]!;
        return false;
    }
    if ((flags & FLAG_REPLY) !== 0) {
      this.replies++;
      this.onReply?.(this, this.chunkAt);
    }
    return true;
  }

  private settle(state: PeerState): void {
    const resolve = this.onSettled;
    this.onSettled = null;
    resolve?.(state);
  }

  /** Called by the shared handlers. */
  chunk(chunk: Uint8Array, at: number): void {
    this.chunkAt = at;
    this.reader.push(chunk, this);
  }

  gone(): void {
    if (this.state === PeerState.CLOSED) return;
    this.state = PeerState.CLOSED;
    this.closedAt = performance.now();
    this.settle(PeerState.CLOSED);
    const owner = this.onOwner;
    this.onOwner = null;
    owner?.(0);
    const closed = this.onClosed;
    this.onClosed = null;
    closed?.();
  }
}

const HANDLERS: SocketHandler<Peer> = {
  binaryType: "uint8array",
  data(socket, chunk: Uint8Array) {
    socket.data.chunk(chunk, performance.now());
  },
  end(socket) {
    socket.data.gone();
  },
  close(socket) {
    socket.data.gone();
  },
  error(socket) {
    socket.data.gone();
  },
};
