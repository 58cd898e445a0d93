/**
 * Conn: what the shell keeps per connection (`socket.data`). The reader for
 * its incoming frames, its outbox for bytes the socket did not take, and the
 * engine session it feeds.
 *
 * Outbox: Bun's `socket.write` is unbuffered and returns how many bytes the
 * kernel took, dropping the rest. Whatever is left goes here, in order, and
 * is retried on `drain`. Anything written while the outbox is non-empty goes
 * behind it, so frames never overtake each other. A legitimate client has at
 * most one heartbeat in flight, so its outbox holds a frame or two; the
 * server caps it (see LockServer) against clients that send without reading.
 *
 * Pipelining: the frames of one chunk were all sent before the client could
 * have read an answer to any of them. `framesRead` counts them, and one more
 * than PIPELINE_LIMIT ends the session (protocol.md section 7, rule 11).
 */
import type { Socket } from "bun";
import type { Session } from "../core/index.ts";
import { CLIENT_FRAMES, FrameLimits, FrameReader, type FrameSink, PIPELINE_LIMIT } from "../protocol/index.ts";

export const CLIENT_LIMITS = new FrameLimits(CLIENT_FRAMES);

/** The engine entry point a Conn forwards frames to (LockServer implements it). */
export interface FrameHandler {
  handleFrame(conn: Conn, type: number, bytes: Uint8Array, offset: number, length: number): boolean;
  /** One frame more than PIPELINE_LIMIT arrived in one read: end the session (returns false). */
  pipelined(conn: Conn): boolean;
}

export class Conn implements FrameSink {
  session: Session<Conn> | null = null;
  readonly reader = new FrameReader(CLIENT_LIMITS);
  /** The time of the chunk being read (set by the data handler; saves passing it through the reader). */
  now = 0;
  /** Complete frames handed on from the chunk being read (reset by the data handler). */
  framesRead = 0;
  outbox: Uint8Array | null = null;
  outStart = 0;
  outEnd = 0;
  /** The socket has closed (or we closed it): nothing more is written. */
  done = false;
  /** Output was dropped mid-stream (outbox limit): only a reset may follow. */
  torn = false;
  /** Bun's close event was seen (counted once). */
  closed = false;

  constructor(
    readonly socket: Socket<Conn>,
    private readonly handler: FrameHandler,
  ) {}

  onFrame(type: number, _flags: number, bytes: Uint8Array, offset: number, length: number): boolean {
    // The frame past the limit is refused before the engine sees it, and the
    // rest of the chunk is never parsed: a 512 KiB chunk of heartbeats costs
    // PIPELINE_LIMIT engine calls, not 131,072.
    if (++this.framesRead > PIPELINE_LIMIT) return this.handler.pipelined(this);
    return this.handler.handleFrame(this, type, bytes, offset, length);
  }

  get pendingOutput(): number {
    return this.outEnd - this.outStart;
  }

  /** Queue bytes the socket did not take. */
  stash(bytes: Uint8Array, offset: number, length: number): void {
    let box = this.outbox;
    if (box === null) {
      box = this.outbox = new Uint8Array(Math.max(256, length * 2));
    } else if (this.outEnd + length > box.length) {
      const used = this.outEnd - this.outStart;
      const grown = new Uint8Array(Math.max(box.length * 2, (used + length) * 2));
      grown.set(box.subarray(this.outStart, this.outEnd), 0);
      box = this.outbox = grown;
      this.outStart = 0;
      this.outEnd = used;
    }
    box.set(bytes.subarray(offset, offset + length), this.outEnd);
    this.outEnd += length;
  }

  /** Offer the outbox to the socket again; true when it is empty. */
  flush(): boolean {
    const box = this.outbox;
    if (box === null) return true;
    const written = this.socket.write(box, this.outStart, this.outEnd - this.outStart);
    if (written > 0) this.outStart += written;
    if (this.outStart < this.outEnd) return false;
    this.outbox = null; // memory follows need: an idle connection keeps no buffer
    this.outStart = this.outEnd = 0;
    return true;
  }
}
