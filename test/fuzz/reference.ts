/**
 * Reference readings of a byte stream, written from protocol.md and kept
 * deliberately naive (the whole stream at once, a Map lookup per header,
 * the platform's strict UTF-8 decoder) so that they share no code with the
 * FrameReader and decodeAcquire they judge.
 */
import type { BodyRange } from "../../src/protocol/index.ts";
import { ErrorCode } from "../../src/protocol/index.ts";

export interface RefFrame {
  readonly type: number;
  readonly flags: number;
  readonly body: Uint8Array;
  /** Offset just past the frame in the stream. */
  readonly end: number;
}

export interface RefParse {
  readonly frames: RefFrame[];
  /** Offset of the first bad header (unknown type or body length out of range), or -1. */
  readonly badHeaderAt: number;
  /** Offsets where a frame ends (and 0): a cut there leaves nothing pending. */
  readonly boundaries: Set<number>;
}

export function referenceParse(stream: Uint8Array, ranges: ReadonlyMap<number, BodyRange>): RefParse {
  const frames: RefFrame[] = [];
  const boundaries = new Set<number>([0]);
  let pos = 0;
  while (pos + 4 <= stream.length) {
    const type = stream[pos]!;
    const length = stream[pos + 2]! * 256 + stream[pos + 3]!;
    const range = ranges.get(type);
    if (range === undefined || length < range.min || length > range.max) return { frames, badHeaderAt: pos, boundaries };
    if (pos + 4 + length > stream.length) break;
    frames.push({ type, flags: stream[pos + 1]!, body: stream.slice(pos + 4, pos + 4 + length), end: pos + 4 + length });
    pos += 4 + length;
    boundaries.add(pos);
  }
  return { frames, badHeaderAt: -1, boundaries };
}

export type RefAcquire =
  | { readonly ok: true; readonly nameKey: string; readonly leaseMs: number; readonly try: boolean; readonly limit: number; readonly shared: boolean }
  | { readonly ok: false; readonly codes: ReadonlySet<number> };

const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

function validText(bytes: Uint8Array): boolean {
  let text: string;
  try {
    text = strict.decode(bytes);
  } catch {
    return false;
  }
  return !CONTROL.test(text);
}

/**
 * Every ERROR code an ACQUIRE body earns by protocol.md sections 3, 4 and
 * 13. With several defects the spec does not say which is reported, so any
 * of them is accepted. `nameKey` identifies the lock by its bytes.
 */
export function referenceAcquire(body: Uint8Array): RefAcquire {
  const codes = new Set<number>();
  const options = body[1]!;
  if (body[0] !== 1) codes.add(ErrorCode.UNSUPPORTED_VERSION);
  if ((options & 0xf8) !== 0) codes.add(ErrorCode.BAD_REQUEST); // bits 0 TRY, 1 SHARED, 2 LIMIT are defined
  const leaseMs = ((body[2]! * 256 + body[3]!) * 256 + body[4]!) * 256 + body[5]!;
  if (leaseMs === 0) codes.add(ErrorCode.BAD_REQUEST);
  const fixed = (options & 0x04) !== 0 ? 10 : 8;
  const shared = (options & 0x02) !== 0;
  let nameKey = "";
  let limit = 1;
  if (fixed > body.length) {
    codes.add(ErrorCode.PROTOCOL_ERROR);
    return { ok: false, codes };
  }
  if (fixed === 10) {
    limit = body[6]! * 256 + body[7]!;
    if (limit === 0) codes.add(ErrorCode.BAD_REQUEST);
  }
  if (shared && limit > 1) codes.add(ErrorCode.BAD_REQUEST);
  const nameLength = body[fixed - 2]! * 256 + body[fixed - 1]!;
  if (fixed + nameLength > body.length) {
    codes.add(ErrorCode.PROTOCOL_ERROR);
  } else {
    const name = body.subarray(fixed, fixed + nameLength);
    const owner = body.subarray(fixed + nameLength);
    if (nameLength === 0 || nameLength > 512 || owner.length > 256) codes.add(ErrorCode.BAD_REQUEST);
    if (!validText(name) || !validText(owner)) codes.add(ErrorCode.BAD_REQUEST);
    nameKey = Array.from(name, (b) => b.toString(16).padStart(2, "0")).join("");
  }
  if (codes.size > 0) return { ok: false, codes };
  return { ok: true, nameKey, leaseMs, try: (options & 1) === 1, limit, shared };
}
