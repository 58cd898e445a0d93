/**
 * The lockd client library. Runs on Bun and on Node.js 20+.
 *
 * @example
 * import { LockClient } from "lockd/client";
 * const client = new LockClient({ servers: "127.0.0.1:7700" });
 * await using lock = await client.acquire("jobs/nightly", { lease: 5000 });
 * doWork({ signal: lock.signal, fencingToken: lock.token });
 */
export { DEFAULT_LEASE_MS, DEFAULT_RECONNECT_MS, DEFAULT_SERVER, LockClient, type AcquireOptions, type ClientOptions, type Held } from "./client.ts";
export {
  LockAbortedError,
  LockBusyError,
  LockDelayedError,
  LimitMismatchError,
  LockError,
  LockLostError,
  LockRequestError,
  ServerErrorFrame,
  ServerUnavailableError,
  WaitTimeoutError,
  WrongShardError,
  type LockErrorClass,
  type LostWhy,
} from "./errors.ts";
export { Lock } from "./lock.ts";
export { firstConnectRetried } from "./machine.ts";
export { baseInterval, clientTimeout, heartbeatInterval, MIN_HEARTBEAT_INTERVAL_MS, PAUSE_BOUNDS, type PauseBounds, reconnectPause, RTT_ALPHA, smoothRtt } from "./schedule.ts";
export { AddressError, formatAddress, parseAddress, parseAddressList, type Address, type Connector, type TlsSettings, type Transport, type TransportEvents } from "./transport.ts";
export { formatServerMap, parseServerMap, type ServerMap, type ShardAddresses } from "../shard/map.ts";
export { Placement } from "../shard/placement.ts";
