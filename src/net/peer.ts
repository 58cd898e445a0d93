import { bracketHost } from "./address.ts";

/**
 * A socket's peer as `host:port` (an IPv6 host in brackets), for logs and
 * views; "" when Bun no longer knows the address (the socket is closed).
 */
export function peerOf(socket: { readonly remoteAddress?: string; readonly remotePort?: number }): string {
  const address = socket.remoteAddress ?? "";
  if (address === "") return "";
  const port = socket.remotePort;
  const host = bracketHost(address);
  return port === undefined ? host : `${host}:${port}`;
}
