// Wire protocol v1: every number on the wire, named as protocol.md names it.

export const PROTOCOL_VERSION = 1;

/** Frame header: type (1), flags (1), body_length (2, big-endian). */
export const HEADER_LENGTH = 4;
export const MAX_BODY_LENGTH = 65535;

export const FrameType = {
  ACQUIRE: 0x01,
  HEARTBEAT: 0x02,
  ACQUIRED: 0x81,
  WAITING: 0x82,
  ERROR: 0xff,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

/** Server frames: set when the frame answers the client's ACQUIRE or HEARTBEAT. */
export const FLAG_REPLY = 0x01;
/**
 * ACQUIRED: the body carries a u16 slot after the token (10 bytes). Set on
 * every ACQUIRED of a grant whose name has a limit above 1, and never else.
 */
export const FLAG_SLOT = 0x02;

/** ACQUIRE options bit 0: end with LOCK_BUSY instead of queueing. */
export const OPTION_TRY = 0x01;
/** ACQUIRE options bit 1: a shared (read) claim; holds beside other shared claims (limit 1 only). */
export const OPTION_SHARED = 0x02;
/** ACQUIRE options bit 2: a u16 `limit` follows lease_ms, and name_length moves to body offset 8. */
export const OPTION_LIMIT = 0x04;
/** Every option bit this version defines; any other set bit is BAD_REQUEST. */
export const ACQUIRE_OPTIONS = OPTION_TRY | OPTION_SHARED | OPTION_LIMIT;
/** The limit field of ACQUIRE with OPTION_LIMIT: u16, 1 .. 65,535 (1 is the exclusive lock). */
export const LIMIT_LENGTH = 2;
export const MAX_LIMIT = 0xffff;
/** The slot field of ACQUIRED with FLAG_SLOT: u16, 0 .. limit - 1. */
export const SLOT_LENGTH = 2;

export const MAX_NAME_LENGTH = 512;
export const MAX_OWNER_LENGTH = 256;
export const MAX_ERROR_MESSAGE_LENGTH = 1024;
export const MAX_LEASE_MS = 0xffff_ffff;

/**
 * The most complete frames a server handles from one read of a connection
 * (protocol.md section 7, rule 11). Frames that arrive in one read were all
 * sent before the client could have seen an answer to any of them; a client
 * that keeps the one-in-flight rule has at most two such frames (its
 * ACQUIRE and, at a stretch, one HEARTBEAT). One frame more than this ends
 * the session with PROTOCOL_ERROR.
 */
export const PIPELINE_LIMIT = 8;

/** ACQUIRE body: version(1) options(1) lease_ms(4) name_length(2) = 8 fixed bytes. */
export const ACQUIRE_FIXED_LENGTH = 8;
export const TOKEN_LENGTH = 8;

export const ErrorCode = {
  SHUTTING_DOWN: 0x01,
  OVERLOADED: 0x02,
  /** The server can issue no more fencing tokens (its counter reached the end of its generation). */
  TOKENS_EXHAUSTED: 0x03,
  LEASE_EXPIRED: 0x10,
  FORCE_RELEASED: 0x11,
  KICKED: 0x12,
  LOCK_BUSY: 0x13,
  /**
   * A TRY claim while the name is held back by a lock-delay: an earlier
   * server's holder may still believe it holds the lock (protocol.md section 5).
   */
  LOCK_DELAYED: 0x14,
  PROTOCOL_ERROR: 0x20,
  BAD_REQUEST: 0x21,
  UNSUPPORTED_VERSION: 0x22,
  IO_TIMEOUT: 0x23,
  /** The lock name belongs to another shard of the server's map (protocol.md section 12). */
  WRONG_SHARD: 0x24,
  /** The claim's limit differs from the limit every live session of the name has (protocol.md section 13). */
  LIMIT_MISMATCH: 0x25,
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

const errorNames = new Map<number, string>(Object.entries(ErrorCode).map(([k, v]) => [v, k]));

/** The spec name of an error code, or `UNKNOWN_0xNN`. */
export function errorCodeName(code: number): string {
  return errorNames.get(code) ?? `UNKNOWN_0x${code.toString(16).padStart(2, "0")}`;
}

/**
 * The class of an error code is its high nibble, and the class alone tells a
 * client what to do (protocol.md section 4), also for codes it does not know.
 */
export const ErrorClass = {
  /** 0x0_: server condition; reconnect with a short jittered backoff and claim again. */
  SERVER: 0x00,
  /** 0x1_: the session ended under the lock rules; stop the guarded work. */
  LOCK: 0x10,
  /** 0x2_: client error; the same request fails again. */
  CLIENT: 0x20,
} as const;
export type ErrorClass = (typeof ErrorClass)[keyof typeof ErrorClass];

export function errorClassOf(code: number): number {
  return code & 0xf0;
}

/** Inclusive body length range of each frame type, or undefined for an unknown type. */
export interface BodyRange {
  readonly min: number;
  readonly max: number;
}

/** Frames a server accepts from clients. */
export const CLIENT_FRAMES: ReadonlyMap<number, BodyRange> = new Map([
  [FrameType.ACQUIRE, { min: ACQUIRE_FIXED_LENGTH + 1, max: ACQUIRE_FIXED_LENGTH + LIMIT_LENGTH + MAX_NAME_LENGTH + MAX_OWNER_LENGTH }],
  [FrameType.HEARTBEAT, { min: 0, max: 0 }],
]);

/** Frames a client accepts from servers. */
export const SERVER_FRAMES: ReadonlyMap<number, BodyRange> = new Map([
  [FrameType.ACQUIRED, { min: TOKEN_LENGTH, max: TOKEN_LENGTH + SLOT_LENGTH }],
  [FrameType.WAITING, { min: 0, max: 0 }],
  [FrameType.ERROR, { min: 1, max: 1 + MAX_ERROR_MESSAGE_LENGTH }],
]);

export function frameTypeName(type: number): string {
  switch (type) {
    case FrameType.ACQUIRE:
      return "ACQUIRE";
    case FrameType.HEARTBEAT:
      return "HEARTBEAT";
    case FrameType.ACQUIRED:
      return "ACQUIRED";
    case FrameType.WAITING:
      return "WAITING";
    case FrameType.ERROR:
      return "ERROR";
    default:
      return `0x${type.toString(16).padStart(2, "0")}`;
  }
}
