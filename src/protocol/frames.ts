/**
 * Encoders and body decoders for every frame of protocol v1, named as
 * protocol.md names them. Constant frames are built once at load; the one
 * frame the server sends per heartbeat of an owner (ACQUIRED with its token)
 * is built once per grant by the core and reused.
 */
import {
  ACQUIRE_FIXED_LENGTH,
  ErrorCode,
  FLAG_REPLY,
  FrameType,
  HEADER_LENGTH,
  MAX_ERROR_MESSAGE_LENGTH,
  MAX_LEASE_MS,
  MAX_NAME_LENGTH,
  MAX_OWNER_LENGTH,
  ACQUIRE_OPTIONS,
  FLAG_SLOT,
  LIMIT_LENGTH,
  MAX_LIMIT,
  OPTION_LIMIT,
  OPTION_SHARED,
  OPTION_TRY,
  PROTOCOL_VERSION,
  SLOT_LENGTH,
  TOKEN_LENGTH,
} from "./constants.ts";
import { checkText, decodeText, TextCheck } from "./text.ts";

const encoder = new TextEncoder();

function frame(type: number, flags: number, bodyLength: number): Uint8Array {
  const bytes = new Uint8Array(HEADER_LENGTH + bodyLength);
  bytes[0] = type;
  bytes[1] = flags;
  bytes[2] = bodyLength >>> 8;
  bytes[3] = bodyLength & 0xff;
  return bytes;
}

// --- client -> server ------------------------------------------------------

export interface Acquire {
  /** Lock name, 1..512 bytes of UTF-8 without control characters. */
  readonly name: string;
  /** Lease in milliseconds, 1 .. 4,294,967,295. */
  readonly leaseMs: number;
  /** Informational label for operators, 0..256 bytes. */
  readonly owner: string;
  /** TRY: end with LOCK_BUSY instead of queueing. */
  readonly try: boolean;
  /** Permits of the name, 1 .. 65,535 (1: an exclusive or shared lock; above 1: a semaphore). */
  readonly limit: number;
  /** A shared (read) claim: holds beside other shared claims of the name (limit 1 only). */
  readonly shared: boolean;
}

/** What a client asks for; `limit` defaults to 1, `shared` and `try` to false. */
export interface AcquireRequest {
  readonly name: string;
  readonly leaseMs: number;
  readonly owner: string;
  readonly try: boolean;
  readonly limit?: number;
  readonly shared?: boolean;
}

/**
 * ACQUIRE. Throws RangeError for a request no server would accept. A limit
 * of 1 is sent without OPTION_LIMIT, so an exclusive claim's bytes are the
 * same as before semaphores existed.
 */
export function encodeAcquire(request: AcquireRequest): Uint8Array {
  const name = encoder.encode(request.name);
  const owner = encoder.encode(request.owner);
  const limit = request.limit ?? 1;
  const shared = request.shared === true;
  if (name.length < 1 || name.length > MAX_NAME_LENGTH) {
    throw new RangeError(`lock name must be 1..${MAX_NAME_LENGTH} bytes of UTF-8, got ${name.length}`);
  }
  if (owner.length > MAX_OWNER_LENGTH) {
    throw new RangeError(`owner must be at most ${MAX_OWNER_LENGTH} bytes of UTF-8, got ${owner.length}`);
  }
  if (!Number.isInteger(request.leaseMs) || request.leaseMs < 1 || request.leaseMs > MAX_LEASE_MS) {
    throw new RangeError(`lease must be an integer 1..${MAX_LEASE_MS} ms, got ${request.leaseMs}`);
  }
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new RangeError(`limit must be an integer 1..${MAX_LIMIT}, got ${limit}`);
  }
  if (shared && limit !== 1) throw new RangeError(`a shared claim has limit 1, got ${limit}`);
  const withLimit = limit !== 1;
  const fixed = ACQUIRE_FIXED_LENGTH + (withLimit ? LIMIT_LENGTH : 0);
  const bytes = frame(FrameType.ACQUIRE, 0, fixed + name.length + owner.length);
  const view = new DataView(bytes.buffer);
  bytes[4] = PROTOCOL_VERSION;
  bytes[5] = (request.try ? OPTION_TRY : 0) | (shared ? OPTION_SHARED : 0) | (withLimit ? OPTION_LIMIT : 0);
  view.setUint32(6, request.leaseMs);
  if (withLimit) view.setUint16(10, limit);
  view.setUint16(HEADER_LENGTH + fixed - 2, name.length);
  bytes.set(name, HEADER_LENGTH + fixed);
  bytes.set(owner, HEADER_LENGTH + fixed + name.length);
  return bytes;
}

/** HEARTBEAT: always the same 4 bytes. */
export const HEARTBEAT_FRAME: Uint8Array = frame(FrameType.HEARTBEAT, 0, 0);

export type AcquireDecoded =
  | { readonly ok: true; readonly request: Acquire }
  | { readonly ok: false; readonly code: ErrorCode; readonly message: string };

/**
 * Decode and validate an ACQUIRE body (its length already checked against
 * 9..778 by the reader). The order of checks: version first (a later version
 * may lay out the rest differently), then framing, then meaning
 * (protocol.md section 6).
 */
export function decodeAcquire(bytes: Uint8Array, offset: number, length: number): AcquireDecoded {
  const version = bytes[offset]!;
  if (version !== PROTOCOL_VERSION) {
    return fail(ErrorCode.UNSUPPORTED_VERSION, `protocol version ${version} is not supported; this server speaks version ${PROTOCOL_VERSION}`);
  }
  const options = bytes[offset + 1]!;
  const leaseMs =
    (bytes[offset + 2]! * 0x1000000 + ((bytes[offset + 3]! << 16) | (bytes[offset + 4]! << 8) | bytes[offset + 5]!));
  const withLimit = (options & OPTION_LIMIT) !== 0;
  const fixed = withLimit ? ACQUIRE_FIXED_LENGTH + LIMIT_LENGTH : ACQUIRE_FIXED_LENGTH;
  if (fixed > length) {
    return fail(ErrorCode.PROTOCOL_ERROR, `the limit and name_length fields run past the end of the ${length}-byte ACQUIRE body`);
  }
  const limit = withLimit ? (bytes[offset + 6]! << 8) | bytes[offset + 7]! : 1;
  const nameLength = (bytes[offset + fixed - 2]! << 8) | bytes[offset + fixed - 1]!;
  if (fixed + nameLength > length) {
    return fail(ErrorCode.PROTOCOL_ERROR, `name_length ${nameLength} runs past the end of the ${length}-byte ACQUIRE body`);
  }
  if ((options & ~ACQUIRE_OPTIONS) !== 0) {
    return fail(ErrorCode.BAD_REQUEST, `undefined ACQUIRE option bits 0x${(options & ~ACQUIRE_OPTIONS).toString(16)}`);
  }
  if (leaseMs === 0) return fail(ErrorCode.BAD_REQUEST, "lease_ms must be at least 1");
  if (nameLength === 0) return fail(ErrorCode.BAD_REQUEST, "lock name is empty");
  if (nameLength > MAX_NAME_LENGTH) {
    return fail(ErrorCode.BAD_REQUEST, `lock name is ${nameLength} bytes; the limit is ${MAX_NAME_LENGTH}`);
  }
  const ownerLength = length - fixed - nameLength;
  if (ownerLength > MAX_OWNER_LENGTH) {
    return fail(ErrorCode.BAD_REQUEST, `owner is ${ownerLength} bytes; the limit is ${MAX_OWNER_LENGTH}`);
  }
  const nameStart = offset + fixed;
  const nameCheck = checkText(bytes, nameStart, nameLength);
  if (nameCheck !== TextCheck.OK) return fail(ErrorCode.BAD_REQUEST, `lock name ${textProblem(nameCheck)}`);
  const ownerStart = nameStart + nameLength;
  const ownerCheck = checkText(bytes, ownerStart, ownerLength);
  if (ownerCheck !== TextCheck.OK) return fail(ErrorCode.BAD_REQUEST, `owner ${textProblem(ownerCheck)}`);
  if (limit === 0) return fail(ErrorCode.BAD_REQUEST, "limit must be at least 1");
  const shared = (options & OPTION_SHARED) !== 0;
  if (shared && limit !== 1) {
    return fail(ErrorCode.BAD_REQUEST, `a shared claim has limit 1; this one asked for limit ${limit} (a name is a read/write lock or a semaphore, not both)`);
  }
  return {
    ok: true,
    request: {
      name: decodeText(bytes, nameStart, nameLength),
      leaseMs,
      owner: ownerLength === 0 ? "" : decodeText(bytes, ownerStart, ownerLength),
      try: (options & OPTION_TRY) !== 0,
      limit,
      shared,
    },
  };
}

function fail(code: ErrorCode, message: string): AcquireDecoded {
  return { ok: false, code, message };
}

function textProblem(check: TextCheck): string {
  return check === TextCheck.INVALID_UTF8 ? "is not valid UTF-8" : "contains a control character";
}

// --- server -> client ------------------------------------------------------

/**
 * ACQUIRED carrying `token`. Tokens are kept as numbers on the server: exact
 * up to 2^53, which a counter reaches after 285 years at a million grants per
 * second; the wire field is u64, written as two u32 halves.
 */
export function encodeAcquired(token: number, flags: number): Uint8Array {
  const bytes = frame(FrameType.ACQUIRED, flags, TOKEN_LENGTH);
  writeToken(bytes, HEADER_LENGTH, token);
  return bytes;
}

/** ACQUIRED with FLAG_SLOT (added to `flags`): the token, then the u16 slot of a grant of a name with limit above 1. */
export function encodeAcquiredSlot(token: number, slot: number, flags: number): Uint8Array {
  const bytes = frame(FrameType.ACQUIRED, flags | FLAG_SLOT, TOKEN_LENGTH + SLOT_LENGTH);
  writeToken(bytes, HEADER_LENGTH, token);
  writeSlot(bytes, HEADER_LENGTH + TOKEN_LENGTH, slot);
  return bytes;
}

export function writeSlot(bytes: Uint8Array, offset: number, slot: number): void {
  bytes[offset] = slot >>> 8;
  bytes[offset + 1] = slot & 0xff;
}

export function writeToken(bytes: Uint8Array, offset: number, token: number): void {
  const high = Math.floor(token / 0x1_0000_0000);
  const low = token >>> 0;
  bytes[offset] = high >>> 24;
  bytes[offset + 1] = (high >>> 16) & 0xff;
  bytes[offset + 2] = (high >>> 8) & 0xff;
  bytes[offset + 3] = high & 0xff;
  bytes[offset + 4] = low >>> 24;
  bytes[offset + 5] = (low >>> 16) & 0xff;
  bytes[offset + 6] = (low >>> 8) & 0xff;
  bytes[offset + 7] = low & 0xff;
}

/** The fencing token of an ACQUIRED body, as the u64 it is on the wire. */
export function decodeAcquired(bytes: Uint8Array, offset: number): bigint {
  return new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(offset);
}

/**
 * The slot of an ACQUIRED body (`length` its body length), or -1 when the
 * body has none. A client checks the flag and the length agree: FLAG_SLOT
 * with 10 bytes, no flag with 8 (protocol.md section 13).
 */
export function decodeSlot(bytes: Uint8Array, offset: number, length: number): number {
  return length === TOKEN_LENGTH + SLOT_LENGTH ? (bytes[offset + TOKEN_LENGTH]! << 8) | bytes[offset + TOKEN_LENGTH + 1]! : -1;
}

/** WAITING as the reply to ACQUIRE or HEARTBEAT: always the same 4 bytes. */
export const WAITING_REPLY_FRAME: Uint8Array = frame(FrameType.WAITING, FLAG_REPLY, 0);

/** ERROR with `code` and a human message, cut to 1,024 bytes on a character boundary. */
export function encodeError(code: number, message: string): Uint8Array {
  let text = encoder.encode(message);
  if (text.length > MAX_ERROR_MESSAGE_LENGTH) {
    let cut = MAX_ERROR_MESSAGE_LENGTH;
    while (cut > 0 && (text[cut]! & 0xc0) === 0x80) cut--; // do not split a UTF-8 sequence
    text = text.subarray(0, cut);
  }
  const bytes = frame(FrameType.ERROR, 0, 1 + text.length);
  bytes[HEADER_LENGTH] = code;
  bytes.set(text, HEADER_LENGTH + 1);
  return bytes;
}

export interface ErrorFrame {
  readonly code: number;
  readonly message: string;
}

export function decodeError(bytes: Uint8Array, offset: number, length: number): ErrorFrame {
  return { code: bytes[offset]!, message: decodeText(bytes, offset + 1, length - 1) };
}
