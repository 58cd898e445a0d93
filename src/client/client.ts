/** LockClient: where to connect and what to ask for; `acquire` and `withLock`. */
import { hostname } from "node:os";
import { MAX_LIMIT } from "../protocol/constants.ts";
import { encodeAcquire } from "../protocol/frames.ts";
import { connectBun } from "./bun-transport.ts";
import { Claim } from "./claim.ts";
import { LockRequestError, ServerErrorFrame, WrongShardError } from "./errors.ts";
import { Lock } from "./lock.ts";
import { MIN_HEARTBEAT_INTERVAL_MS } from "./schedule.ts";
import { type Connector, type TlsSettings } from "./transport.ts";
import { DEFAULT_LOCK_ADDRESS } from "../net/address.ts";
import { checkServerMap, parseServerMap, type ServerMap } from "../shard/map.ts";
import { describeMismatch, parseWrongShard } from "../shard/mismatch.ts";
import { describeShards, placementOf, type Placement } from "../shard/placement.ts";

/** Default lease when `acquire` is not given one: 5 s, like `lockd run`. */
export const DEFAULT_LEASE_MS = 5000;
/** Default server when neither `servers` nor LOCKD_SERVER is set (src/net/address.ts). */
export const DEFAULT_SERVER = DEFAULT_LOCK_ADDRESS;
/** How long a claim that has not been granted keeps reconnecting through trouble. */
export const DEFAULT_RECONNECT_MS = 30_000;

export interface ClientOptions {
  /**
   * Lock server address(es): "HOST:PORT", "[v6]:PORT", a comma-separated
   * list, or an array. Tried in order; after any failure (refused, SHUTTING_DOWN,
   * a broken connection before the grant) the claim moves on to the next one
   * at once. Or a server map of shards, "[gen=N;]NAME=LIST;NAME=LIST":
   * each lock name goes to its shard's list (docs/client.md, Shards).
   * Or a map already parsed (parseServerMap's ServerMap, or one built by a
   * program): checked and used as is, not formatted and parsed again.
   * Default: LOCKD_SERVER, else 127.0.0.1:7700.
   */
  readonly servers?: string | readonly string[] | ServerMap;
  /** TLS for the lock connection (for servers that serve TLS). */
  readonly tls?: TlsSettings;
  /** Default owner label for every claim (default "HOST/pid-PID"). */
  readonly owner?: string;
  /** How long a not-yet-granted claim keeps reconnecting (ms, default 30 s). */
  readonly reconnectMs?: number;
  /**
   * Whether a claim retries (within reconnectMs, never past its wait) when
   * no server has answered it yet: a server that refuses connections while
   * it restarts, or a failover group between a crash and the take-over.
   * true: always (also a TRY claim); false: never, each address is tried
   * once and ServerUnavailableError says none connects. Default (unset):
   * a claim that may wait retries when it has a `wait` or its list has two
   * or more addresses; a TRY claim, or one address without a wait, fails
   * at once (docs/client.md, "Retrying the first connect").
   */
  readonly retryFirstConnect?: boolean;
  /** Floor of the heartbeat interval (ms, default 1). */
  readonly minHeartbeatIntervalMs?: number;
  /** Replace the socket layer (tests, proxies). Default: Bun.connect on Bun, node:net elsewhere. */
  readonly connect?: Connector;
}

export interface AcquireOptions {
  /**
   * Lease in ms (default 5000): the server ends the session after this much
   * silence; the client heartbeats every lease/4 and gives the lock up after
   * 0.8 x lease without an answer.
   */
  readonly lease?: number;
  /** Give up waiting after this many ms (WaitTimeoutError). Default: wait as long as it takes. */
  readonly wait?: number;
  /**
   * Do not queue: reject with LockBusyError if the lock is held (protocol TRY),
   * or LockDelayedError if the server holds the name back by a lock-delay.
   */
  readonly try?: boolean;
  /** Owner label shown to operators (default the client's, else "HOST/pid-PID"). */
  readonly owner?: string;
  /**
   * A semaphore of this many permits (an integer 1..65535, default 1: an
   * exclusive lock): the first `limit` claims of the name hold at once, each
   * in its own slot (`Lock.slot`), the rest wait in FIFO order. Every claim
   * of a name must use the same limit while any of them lives, or the
   * server refuses it (LimitMismatchError).
   */
  readonly limit?: number;
  /**
   * A shared (read) claim: shared holders of a name coexist, an exclusive
   * one holds alone; FIFO, so a shared claim queues behind a waiting
   * exclusive one. Only with limit 1 (BAD_REQUEST otherwise, without
   * connecting). Default false.
   */
  readonly shared?: boolean;
  /** Cancels waiting (LockAbortedError) or ends holding (signal aborts, why "aborted"). */
  readonly signal?: AbortSignal;
  /**
   * Reclaim the held lock across a clean restart of the server (default
   * true): when the grant was flagged reclaimable and the server stops
   * cleanly with SHUTTING_DOWN and its RECLAIM flag, the client connects
   * again and reclaims the grant with its token, within the holder's
   * deadline (0.8 x lease after the last answered send); the signal does
   * not abort unless that fails. Likewise when the server goes silent (a
   * HEARTBEAT unanswered for lease/4, the connection open): the client
   * reclaims on a second connection. false: such a stop loses the lock,
   * like any SHUTTING_DOWN, and a silent server loses it at the deadline
   * (docs/client.md, "Reclaim").
   */
  readonly reclaim?: boolean;
  /**
   * Called each time the held lock was reclaimed, after a clean stop of the
   * server or on its silence: the same lock, the same token (and slot),
   * confirmed again by the server's next run (or the new active). For
   * logging; it decides nothing.
   */
  readonly onReclaim?: (lock: Lock) => void;
  /**
   * Called before each reconnect while the claim is not held yet (refused,
   * SHUTTING_DOWN, a dropped connection): what failed, the pause in ms
   * before the next address is tried, and `backoff`: true when every
   * address of the list has failed in this round and the pause is the
   * backoff (the claim waits), false when it moves on to the list's next
   * address. For logging; it decides nothing.
   */
  readonly onRetry?: (detail: string, delayMs: number, backoff: boolean) => void;
}

/** What `withLock` passes to the guarded function. */
export interface Held {
  /** Aborts when the lock is lost; stop the work. */
  readonly signal: AbortSignal;
  /** Fencing token: pass it to guarded resources. */
  readonly token: bigint;
  /** The semaphore slot (0 .. limit - 1) of a claim with limit above 1, else null (Lock.slot). */
  readonly slot: number | null;
}

/**
 * Node.js's connector (node:net, node:tls), loaded on first use: on Bun,
 * which connects with connectBun, loading those modules would cost every
 * `lockd run` about 2.5 ms for nothing.
 */
const connectNode: Connector = async (address, tls, events) => (await import("./node-transport.ts")).connectNode(address, tls, events);

/**
 * A lockd client. Connections are per claim (one TCP connection per held or
 * awaited lock), so one client serves any number of concurrent claims.
 *
 * @example
 * const client = new LockClient({ servers: "127.0.0.1:7700" });
 * const report = await client.withLock("jobs/nightly", async ({ signal, token }) => {
 *   return await buildReport({ signal, fencingToken: token });
 * }, { lease: 10_000, wait: 30_000 });
 */
export class LockClient {
  /** The server map: one unnamed shard for a plain address list. */
  readonly map: ServerMap;
  private readonly placement: Placement | null;
  private readonly tls: TlsSettings | undefined;
  private readonly owner: string;
  private readonly reconnectMs: number;
  private readonly retryFirstConnect: boolean | undefined;
  private readonly minIntervalMs: number;
  private readonly connector: Connector;

  constructor(options: ClientOptions = {}) {
    const servers = options.servers ?? envServer() ?? DEFAULT_SERVER;
    // Both throw AddressError (a RangeError) naming the bad element.
    this.map = isServerMap(servers) ? checkServerMap(servers) : parseServerMap(servers);
    this.placement = placementOf(this.map);
    this.tls = options.tls;
    this.owner = options.owner ?? `${hostname()}/pid-${process.pid}`;
    this.reconnectMs = options.reconnectMs ?? DEFAULT_RECONNECT_MS;
    this.retryFirstConnect = options.retryFirstConnect;
    this.minIntervalMs = options.minHeartbeatIntervalMs ?? MIN_HEARTBEAT_INTERVAL_MS;
    this.connector = options.connect ?? (typeof Bun !== "undefined" ? connectBun : connectNode);
  }

  /**
   * Claim `name` and resolve once the server grants it (ACQUIRED). Rejects
   * with LockBusyError or LockDelayedError (`try`), WaitTimeoutError
   * (`wait`), LockAbortedError (`signal`), ServerUnavailableError,
   * LimitMismatchError (`limit` or `shared` differ from the name's live
   * sessions'), or LockRequestError.
   *
   * @example
   * await using lock = await client.acquire("db/migrate", { lease: 5000, wait: 60_000 });
   * await migrate({ signal: lock.signal, token: lock.token });
   */
  async acquire(name: string, options: AcquireOptions = {}): Promise<Lock> {
    const leaseMs = options.lease ?? DEFAULT_LEASE_MS;
    const limit = options.limit ?? 1;
    const shared = options.shared ?? false;
    // Refused here, before any connection: a request no server would accept.
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) throw new LockRequestError("BAD_REQUEST", `limit must be an integer 1..${MAX_LIMIT}, got ${limit}`);
    if (typeof shared !== "boolean") throw new LockRequestError("BAD_REQUEST", `shared must be true or false, got ${String(shared)}`);
    if (shared && limit !== 1) {
      throw new LockRequestError("BAD_REQUEST", `a shared claim has limit 1, got limit ${limit}: a name is a read/write lock or a semaphore, not both`);
    }
    const reclaim = options.reclaim ?? true;
    if (typeof reclaim !== "boolean") throw new LockRequestError("BAD_REQUEST", `reclaim must be true or false, got ${String(reclaim)}`);
    const request = { name, leaseMs, owner: options.owner ?? this.owner, try: options.try ?? false, limit, shared };
    let acquireFrame: Uint8Array;
    try {
      acquireFrame = encodeAcquire(request);
    } catch (error) {
      throw new LockRequestError("BAD_REQUEST", (error as Error).message, error);
    }
    // The reclaim (protocol.md section 14.3): the same claim, with RECLAIM and the grant's token and slot.
    const reclaimFrame = reclaim ? (token: bigint, slot: number) => encodeAcquire({ ...request, reclaim: { token, ...(slot >= 0 ? { slot } : {}) } }) : undefined;
    let lock: Lock | null = null;
    const onReclaim = options.onReclaim;
    if (options.wait !== undefined && !(options.wait >= 0)) throw new LockRequestError("BAD_REQUEST", `wait must be >= 0 ms, got ${options.wait}`);
    const shard = this.placement === null ? 0 : this.placement.indexOf(name);
    const { name: shardName, addresses } = this.map.shards[shard]!;
    const claim = new Claim({
      name,
      leaseMs,
      acquireFrame,
      limit,
      shared,
      waitMs: options.wait,
      signal: options.signal,
      addresses,
      shard: this.placement === null ? undefined : shardName,
      tls: this.tls,
      connect: this.connector,
      reconnectMs: this.reconnectMs,
      retryFirstConnect: this.retryFirstConnect,
      try: options.try ?? false,
      onRetry: options.onRetry,
      reclaimFrame,
      onReclaim: onReclaim === undefined ? undefined : () => lock !== null && onReclaim(lock),
      minHeartbeatIntervalMs: this.minIntervalMs,
    });
    let granted;
    try {
      granted = await claim.start();
    } catch (error) {
      if (this.placement !== null && error instanceof LockRequestError && error.code === "WRONG_SHARD") throw this.wrongShard(name, shard, error);
      throw error;
    }
    lock = new Lock(name, granted.token, granted.slot, granted.signal, claim);
    return lock;
  }

  /** The shard `name` belongs to in this client's map ("" for a plain address list). */
  shardOf(name: string): string {
    return this.placement === null ? "" : this.placement.shardOf(name);
  }

  private wrongShard(name: string, shard: number, error: LockRequestError): WrongShardError {
    const frame = error.cause instanceof ServerErrorFrame ? error.cause : undefined;
    const serverMessage = frame?.serverMessage || "the server says it is another shard's";
    const clientShard = this.map.shards[shard]!.name;
    const shards = this.placement!.shards;
    const generation = this.map.generation;
    const server = parseWrongShard(serverMessage);
    const detail = describeMismatch({ shards, generation, shard: clientShard, address: frame?.server }, server, serverMessage);
    return new WrongShardError(
      name,
      clientShard,
      describeShards(shards, generation),
      serverMessage,
      frame ?? error,
      detail,
      frame?.server,
      server?.shard,
      server === null ? undefined : describeShards(server.shards, server.generation),
    );
  }

  /**
   * Run `fn` while holding `name`, then release. If the lock is lost while
   * `fn` runs, `signal` aborts and withLock rejects at once with the
   * LockLostError (it does not wait for `fn`, and never runs it again).
   *
   * @example
   * await client.withLock("cron/cleanup", async ({ signal, token }) => {
   *   for (const batch of batches) {
   *     signal.throwIfAborted();
   *     await store.deleteBatch(batch, { fencingToken: token });
   *   }
   * }, { lease: 5000, try: true });
   */
  async withLock<T>(name: string, fn: (held: Held) => Promise<T> | T, options: AcquireOptions = {}): Promise<T> {
    const lock = await this.acquire(name, options);
    try {
      const signal = lock.signal;
      let onLost: (() => void) | undefined;
      const lost = new Promise<never>((_, reject) => {
        onLost = () => reject(signal.reason);
        signal.addEventListener("abort", onLost, { once: true });
      });
      try {
        const work = Promise.resolve().then(() => fn({ signal, token: lock.token, slot: lock.slot }));
        work.catch(() => {}); // a late failure after the loss is not unhandled
        return await Promise.race([work, lost]);
      } finally {
        signal.removeEventListener("abort", onLost!);
        lost.catch(() => {});
      }
    } finally {
      await lock.release();
    }
  }
}

/** The `servers` option is a map value, not text: neither a string nor an array of strings. */
function isServerMap(servers: string | readonly string[] | ServerMap): servers is ServerMap {
  return typeof servers === "object" && servers !== null && !Array.isArray(servers);
}

function envServer(): string | undefined {
  const value = typeof process === "undefined" ? undefined : process.env.LOCKD_SERVER;
  return value === undefined || value === "" ? undefined : value;
}
