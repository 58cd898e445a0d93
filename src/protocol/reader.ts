/**
 * FrameReader: bytes from a stream -> complete frames, for one connection.
 *
 * TCP delivers chunks, not frames: one chunk may hold many frames, and one
 * frame may arrive in many chunks. The reader hands every frame that is whole
 * inside the current chunk to the sink as (bytes, offset, length), a window
 * into the chunk itself: nothing is copied on that path. Only when a chunk
 * ends inside a frame is that tail copied into a small pending buffer, sized
 * to the largest frame this side accepts (782 bytes for a server reading
 * clients), allocated when first needed and dropped when the frame completes,
 * so an idle connection costs no buffer at all.
 *
 * A header is judged as soon as its 4 bytes are in: an unknown type, or a
 * body length outside that type's range, stops the reader with an error
 * before any of the body is awaited. So a peer announcing 65,535 bytes of
 * HEARTBEAT (or speaking HTTP to the lock port) is refused at once.
 *
 * The sink's views are valid only during its call: anything kept beyond it
 * (a lock name) must be decoded to a string, which also avoids pinning the
 * whole chunk in memory.
 */
import { HEADER_LENGTH, frameTypeName, type BodyRange } from "./constants.ts";

export interface FrameSink {
  /**
   * One complete frame; its body is `bytes[offset, offset + length)`.
   * Return false to stop reading (the connection is over).
   */
  onFrame(type: number, flags: number, bytes: Uint8Array, offset: number, length: number): boolean;
}

export const ReadResult = {
  /** Every complete frame was delivered; any incomplete tail is held. */
  OK: 0,
  /** The sink returned false; the rest of the chunk was not read. */
  STOPPED: 1,
  /** A bad header: see `errorMessage`. The reader must not be used again. */
  ERROR: 2,
} as const;
export type ReadResult = (typeof ReadResult)[keyof typeof ReadResult];

/** Body length limits by type, as a flat table so the hot path does no map lookups. */
export class FrameLimits {
  readonly min = new Int32Array(256).fill(-1);
  readonly max = new Int32Array(256).fill(-1);
  readonly maxFrameLength: number;

  constructor(ranges: ReadonlyMap<number, BodyRange>) {
    let largest = 0;
    for (const [type, range] of ranges) {
      this.min[type] = range.min;
      this.max[type] = range.max;
      largest = Math.max(largest, range.max);
    }
    this.maxFrameLength = HEADER_LENGTH + largest;
  }
}

export class FrameReader {
  /** Bytes of a started frame that did not fit in the chunks seen so far. */
  private pending: Uint8Array | null = null;
  private pendingLength = 0;
  /** Whole length of the pending frame once its header is in, else 0. */
  private pendingNeeded = 0;
  /** Why the last push returned ERROR. */
  errorMessage = "";

  constructor(private readonly limits: FrameLimits) {}

  /** True while a frame has started but not completed (for the io-timeout). */
  get partial(): boolean {
    return this.pendingLength > 0;
  }

  push(chunk: Uint8Array, sink: FrameSink): ReadResult {
    const end = chunk.length;
    let pos = 0;

    if (this.pendingLength > 0) {
      const pending = this.pending!;
      if (this.pendingLength < HEADER_LENGTH) {
        const take = Math.min(HEADER_LENGTH - this.pendingLength, end);
        pending.set(chunk.subarray(0, take), this.pendingLength);
        this.pendingLength += take;
        pos = take;
        if (this.pendingLength < HEADER_LENGTH) return ReadResult.OK;
        const bodyLength = this.checkHeader(pending, 0);
        if (bodyLength < 0) return ReadResult.ERROR;
        this.pendingNeeded = HEADER_LENGTH + bodyLength;
      }
      const take = Math.min(this.pendingNeeded - this.pendingLength, end - pos);
      if (take > 0) pending.set(chunk.subarray(pos, pos + take), this.pendingLength);
      this.pendingLength += take;
      pos += take;
      if (this.pendingLength < this.pendingNeeded) return ReadResult.OK;
      const length = this.pendingNeeded - HEADER_LENGTH;
      this.pending = null;
      this.pendingLength = 0;
      this.pendingNeeded = 0;
      if (!sink.onFrame(pending[0]!, pending[1]!, pending, HEADER_LENGTH, length)) return ReadResult.STOPPED;
    }

    while (end - pos >= HEADER_LENGTH) {
      const bodyLength = this.checkHeader(chunk, pos);
      if (bodyLength < 0) return ReadResult.ERROR;
      if (end - pos - HEADER_LENGTH < bodyLength) {
        this.pendingNeeded = HEADER_LENGTH + bodyLength;
        break;
      }
      if (!sink.onFrame(chunk[pos]!, chunk[pos + 1]!, chunk, pos + HEADER_LENGTH, bodyLength)) {
        return ReadResult.STOPPED;
      }
      pos += HEADER_LENGTH + bodyLength;
    }

    if (pos < end) {
      // The rare path: a frame split across chunks. Copy its start once.
      const pending = new Uint8Array(this.limits.maxFrameLength);
      pending.set(chunk.subarray(pos, end), 0);
      this.pending = pending;
      this.pendingLength = end - pos;
    }
    return ReadResult.OK;
  }

  /** The body length of the header at `pos`, or -1 (with errorMessage set) if it is bad. */
  private checkHeader(bytes: Uint8Array, pos: number): number {
    const type = bytes[pos]!;
    const bodyLength = (bytes[pos + 2]! << 8) | bytes[pos + 3]!;
    const min = this.limits.min[type]!;
    if (min < 0) {
      this.errorMessage = `unknown frame type ${frameTypeName(type)}`;
      return -1;
    }
    const max = this.limits.max[type]!;
    if (bodyLength < min || bodyLength > max) {
      this.errorMessage = `${frameTypeName(type)} body length ${bodyLength} is outside ${min}..${max}`;
      return -1;
    }
    return bodyLength;
  }
}
