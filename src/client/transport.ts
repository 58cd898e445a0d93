/**
 * The client's socket, behind a three-part interface so one client runs on
 * Bun (Bun.connect) and on Node.js (node:net, node:tls), and so tests can
 * put anything they like underneath.
 *
 * Frames from a client are tiny (ACQUIRE at most 782 bytes, HEARTBEAT 4) and
 * at most one is in flight, so a transport only has to deliver bytes in
 * order; it must never drop the tail of a short write.
 */

import type { Address } from "../net/address.ts";
export type { Address };

/** TLS for the lock connection: `true` for system CAs, or the usual knobs. */
export type TlsSettings =
  | boolean
  | {
      /** PEM CA bundle(s) to trust instead of the system store. */
      readonly ca?: string | readonly string[];
      /** PEM client certificate and key, for servers that want mutual TLS. */
      readonly cert?: string;
      readonly key?: string;
      /** SNI / certificate host name, when it differs from the address. */
      readonly serverName?: string;
      /** Default true. */
      readonly rejectUnauthorized?: boolean;
    };

export interface TransportEvents {
  /** Bytes from the server; the view is valid only during the call. */
  data(chunk: Uint8Array): void;
  /** The connection is gone (once). `error` when it failed rather than closed. */
  closed(error: Error | undefined): void;
}

export interface Transport {
  /** Queue bytes in order; never blocks and never drops. */
  write(bytes: Uint8Array): void;
  /** Close (FIN). Idempotent; resolves once the socket is closed. */
  close(): Promise<void>;
}

/** Opens a connection; rejects if it cannot be established. */
export type Connector = (address: Address, tls: TlsSettings | undefined, events: TransportEvents) => Promise<Transport>;

/** One address or a list of them: the grammar every lockd command shares (src/net/address.ts). */
export { AddressError, formatAddress, parseAddress, parseAddressList } from "../net/address.ts";

/**
 * Plain words for the errno codes a connect (or an open connection) fails
 * with: Bun's own message for a refused connect is only "Failed to
 * connect", and Node's repeats the code and the address.
 */
const ERRNO_WORDS: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  ECONNABORTED: "connection aborted",
  EPIPE: "connection closed (broken pipe)",
  ETIMEDOUT: "connection timed out",
  EHOSTUNREACH: "host unreachable",
  EHOSTDOWN: "host is down",
  ENETUNREACH: "network unreachable",
  ENETDOWN: "network is down",
  EADDRNOTAVAIL: "address not available",
  ENOTFOUND: "name not found",
  EAI_NONAME: "name not found",
  EAI_NODATA: "name has no address",
  EAI_AGAIN: "temporary failure in name lookup",
  EAI_FAIL: "name lookup failed",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
};

/**
 * What a network error means, for a message that already names the
 * address: "connection refused (ECONNREFUSED)"; an error without a known
 * code keeps its own message (with its code when the message lacks it).
 */
export function networkErrorText(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : String(error);
  if (typeof code !== "string" || code === "") return message;
  const words = ERRNO_WORDS[code];
  if (words !== undefined) return `${words} (${code})`;
  return message.includes(code) ? message : `${message} (${code})`;
}
