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
