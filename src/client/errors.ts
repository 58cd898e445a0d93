/**
 * Typed errors of the client. Every one has a stable `code` to branch on, a
 * `class` that says whose problem it is (the same three classes as the
 * protocol's ERROR codes, protocol.md section 4), and a `cause` when another
 * error or a server ERROR frame is behind it.
 *
 *     class "server": a server condition (shutting down, overloaded,
 *                     unreachable); trying again later may work.
 *     class "lock":   the lock rules said no (busy, delayed, wait timed out, lost).
 *     class "client": the request itself is wrong, or the caller aborted.
 */
import { ErrorClass, ErrorCode, errorClassOf, errorCodeName } from "../protocol/constants.ts";
import { TlsSetupError, type TlsProblem } from "./tls-problem.ts";

export type LockErrorClass = "server" | "lock" | "client";

/** The client's view of one ERROR frame from the server. */
export class ServerErrorFrame extends Error {
  override readonly name = "ServerErrorFrame";
  /** Spec name of the code, e.g. "SHUTTING_DOWN". */
  readonly codeName: string;
  constructor(
    /** The raw ERROR code byte. */
    readonly code: number,
    /** The server's message for humans. */
    readonly serverMessage: string,
    /** The address (HOST:PORT) of the server that sent it, when known. */
    readonly server?: string,
  ) {
    super(`server sent ERROR ${errorCodeName(code)} (0x${code.toString(16).padStart(2, "0")})${serverMessage ? `: ${serverMessage}` : ""}`);
    this.codeName = errorCodeName(code);
  }
}

export function classOfCode(code: number): LockErrorClass {
  switch (errorClassOf(code)) {
    case ErrorClass.SERVER:
      return "server";
    case ErrorClass.LOCK:
      return "lock";
    default:
      // 0x2_ and anything the protocol does not define yet: the request will not work as is.
      return "client";
  }
}

export abstract class LockError extends Error {
  abstract readonly code: string;
  abstract readonly class: LockErrorClass;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** `try` was set and the lock is held (server ERROR LOCK_BUSY). */
export class LockBusyError extends LockError {
  override readonly name = "LockBusyError";
  readonly code = "LOCK_BUSY";
  readonly class = "lock";
  constructor(readonly lock: string, cause?: unknown) {
    super(`lock ${JSON.stringify(lock)} is held`, { cause });
  }
}

/**
 * `try` was set and the name is held back by a lock-delay (server ERROR
 * LOCK_DELAYED): the server started serving after a failover or a restart,
 * and a holder that an earlier server granted may still believe it holds
 * the lock, so nobody is granted it until that belief has run out. Not
 * "held" (LockBusyError): nobody may hold it, but nobody can be sure, and
 * the delay ends by itself. The message carries the server's, which says how
 * many ms remain; trying again after that can succeed.
 */
export class LockDelayedError extends LockError {
  override readonly name = "LockDelayedError";
  readonly code = "LOCK_DELAYED";
  readonly class = "lock";
  /** The ERROR code byte, ErrorCode.LOCK_DELAYED (0x14). */
  readonly serverCode = ErrorCode.LOCK_DELAYED;
  constructor(
    readonly lock: string,
    /** The server's message for humans (how long the delay still runs, in ms). */
    readonly serverMessage: string,
    cause?: unknown,
  ) {
    // The server's message opens with "lock-delay: ...": quote what follows, not the word twice.
    const detail = serverMessage?.replace(/^lock-delay:\s*/, "");
    super(`lock ${JSON.stringify(lock)} is held back by a lock-delay${detail ? `: ${detail}` : ""}`, { cause });
  }
}

/**
 * `wait` passed before the lock was granted. `unavailable` is set when it
 * passed while no server could be reached (what the last attempt said):
 * the lock was not refused, the servers were down. With a server map,
 * `shard` is the name's shard (the one whose servers were down, named in
 * the message too, as ServerUnavailableError does); without one, undefined.
 */
export class WaitTimeoutError extends LockError {
  override readonly name = "WaitTimeoutError";
  readonly code = "WAIT_TIMEOUT";
  readonly class = "lock";
  constructor(
    readonly lock: string,
    readonly waitMs: number,
    readonly unavailable?: string,
    cause?: unknown,
    readonly shard?: string,
  ) {
    const server = shard === undefined ? "lock server" : `lock server of shard ${shard}`;
    super(`lock ${JSON.stringify(lock)} was not granted within ${waitMs} ms${unavailable === undefined ? "" : ` (${server} unavailable: ${unavailable})`}`, { cause });
  }
}

/**
 * Why a held lock stopped being ours:
 * - "unconfirmed": clientTimeout (0.8 x lease) passed since the send time of
 *   the last answered frame (the pessimism rule; the server may be about to
 *   expire us, or already has).
 * - "closed": the connection closed or failed without an ERROR.
 * - "server-error": the server sent ERROR (see `serverCode`); SHUTTING_DOWN
 *   and OVERLOADED are here too: a held lock is never silently re-acquired.
 * - "aborted": the caller's `signal` aborted while holding.
 * - "released": `release()` was called (the signal still aborts, so stray
 *   work stops; withLock never reports this one as an error).
 * - "protocol": the server sent something protocol v1 does not allow.
 */
export type LostWhy = "unconfirmed" | "closed" | "server-error" | "aborted" | "released" | "protocol";

/** A held lock is no longer ours. Also the `reason` of the lock's AbortSignal. */
export class LockLostError extends LockError {
  override readonly name = "LockLostError";
  readonly code = "LOCK_LOST";
  readonly class: LockErrorClass;
  /** The ERROR code when `why` is "server-error". */
  readonly serverCode: number | undefined;
  constructor(
    readonly lock: string,
    readonly why: LostWhy,
    detail: string,
    cause?: unknown,
  ) {
    super(`lock ${JSON.stringify(lock)} lost (${why}): ${detail}`, { cause });
    this.serverCode = cause instanceof ServerErrorFrame ? cause.code : undefined;
    this.class = this.serverCode !== undefined ? classOfCode(this.serverCode) : why === "aborted" || why === "released" ? "client" : "lock";
  }
}

/**
 * The server could not be reached, or said it cannot serve us right now
 * (SHUTTING_DOWN, OVERLOADED) and retrying did not help in time.
 */
export class ServerUnavailableError extends LockError {
  override readonly name = "ServerUnavailableError";
  readonly code = "SERVER_UNAVAILABLE";
  readonly class = "server";
  /**
   * Set when TLS is set up on one end only, or the server's certificate is
   * not trusted: a setting to fix, not a condition to wait out (never retried).
   */
  readonly tls: TlsProblem | undefined;
  /** With a server map: the shard whose servers could not serve the claim (its name is in the message too). */
  readonly shard: string | undefined;
  constructor(message: string, cause?: unknown, shard?: string) {
    super(message, { cause });
    this.tls = cause instanceof TlsSetupError ? cause.problem : undefined;
    this.shard = shard;
  }
}

/**
 * The request is wrong and will fail again as is: a server ERROR of class
 * 0x2_ (`serverCode`), an ERROR the lock rules send to a waiter (KICKED), a
 * name/owner/lease the client refuses to send, or a server that broke the
 * protocol.
 */
export class LockRequestError extends LockError {
  override readonly name: string = "LockRequestError";
  readonly code: string;
  readonly class: LockErrorClass;
  readonly serverCode: number | undefined;
  constructor(code: string, message: string, cause?: unknown) {
    super(message, { cause });
    this.code = code;
    this.serverCode = cause instanceof ServerErrorFrame ? cause.code : undefined;
    this.class = this.serverCode !== undefined ? classOfCode(this.serverCode) : "client";
  }
}

/** The caller's AbortSignal aborted while waiting; `cause` is the signal's reason. */
export class LockAbortedError extends LockError {
  override readonly name = "LockAbortedError";
  readonly code = "ABORTED";
  readonly class = "client";
  constructor(readonly lock: string, cause: unknown) {
    super(`claim on lock ${JSON.stringify(lock)} aborted`, { cause });
  }
}

/**
 * The claim's limit differs from the limit of the name's live sessions
 * (ERROR LIMIT_MISMATCH, class client): every session of a name must claim
 * it with the same limit, and a shared or exclusive claim counts as limit 1
 * (a name is a semaphore or a lock at a time). Never retried on another
 * address: the request will fail again as is while those sessions live. The
 * message carries the server's, which names both limits.
 */
export class LimitMismatchError extends LockRequestError {
  override readonly name = "LimitMismatchError";
  constructor(
    readonly lock: string,
    /** This claim's limit (1 for an exclusive or shared claim). */
    readonly limit: number,
    /** Whether this claim was shared. */
    readonly shared: boolean,
    /** What the server said (the name's limit and this claim's). */
    readonly serverMessage: string,
    cause?: unknown,
  ) {
    super("LIMIT_MISMATCH", `${shared ? "shared " : ""}claim on lock ${JSON.stringify(lock)} with limit ${limit} refused: ${serverMessage}`, cause);
  }
}

/**
 * The server that was asked serves another shard of the map than the one
 * this name belongs to (ERROR WRONG_SHARD): the client's server map and
 * the servers' differ (a map changed and this client, or that server, has
 * the old one; or the map lists a server under the wrong shard). A setting
 * to fix, never retried. Names both views, the client's (`clientShard`,
 * `clientMap`, the address it asked) and the server's (`serverShard`,
 * `serverMap`, its message), and the message says what differs: the shard
 * names, the generation, or which address the map lists under which shard.
 */
export class WrongShardError extends LockRequestError {
  override readonly name = "WrongShardError";
  constructor(
    readonly lock: string,
    /** The shard this client placed the name on. */
    readonly clientShard: string,
    /** The client's map: shard names and generation, e.g. "alpha,beta (generation 1)". */
    readonly clientMap: string,
    /** What the server said (its shard, its map, and where the name belongs in it). */
    readonly serverMessage: string,
    cause: unknown,
    /** The whole message after `lock "NAME": ` (what the client sent where, what the server is, what differs). */
    detail: string,
    /** The address (HOST:PORT) of `clientShard` that refused the name, when known. */
    readonly server: string | undefined,
    /** The refusing server's shard, from its message (undefined when its message is not lockd's). */
    readonly serverShard: string | undefined,
    /** The refusing server's map, as `clientMap` is written (undefined when its message is not lockd's). */
    readonly serverMap: string | undefined,
  ) {
    super("WRONG_SHARD", `lock ${JSON.stringify(lock)}: ${detail}`, cause);
  }
}
