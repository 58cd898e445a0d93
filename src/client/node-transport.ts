/** Transport over node:net / node:tls, for Node.js (which has no Bun global). */
import * as net from "node:net";
import * as tlsModule from "node:tls";
import type { Address, TlsSettings, Transport, TransportEvents } from "./transport.ts";

class NodeTransport implements Transport {
  private isClosed = false;
  private onClosed: (() => void)[] = [];

  constructor(private readonly socket: net.Socket) {}

  write(bytes: Uint8Array): void {
    // node:net queues what the kernel does not take, in order.
    if (!this.isClosed) this.socket.write(bytes);
  }

  close(): Promise<void> {
    if (this.isClosed) return Promise.resolve();
    const done = new Promise<void>((resolve) => this.onClosed.push(resolve));
    this.socket.end();
    return done;
  }

  gone(): void {
    this.isClosed = true;
    for (const resolve of this.onClosed) resolve();
    this.onClosed = [];
  }
}

export function connectNode(address: Address, tls: TlsSettings | undefined, events: TransportEvents): Promise<Transport> {
  const secure = tls !== undefined && tls !== false;
  const socket: net.Socket = secure
    ? tlsModule.connect({ host: address.host, port: address.port, ...nodeTls(tls, address.host) })
    : net.connect({ host: address.host, port: address.port });
  return nodeTransport(socket, secure, events);
}

/**
 * A Transport over a node:net (or, with `secure`, node:tls) socket that is
 * connecting: resolves once it is connected (TLS: after the handshake),
 * rejects if it fails before that.
 */
export function nodeTransport(socket: net.Socket, secure: boolean, events: TransportEvents): Promise<Transport> {
  return new Promise<Transport>((resolve, reject) => {
    socket.setNoDelay(true);
    const transport = new NodeTransport(socket);
    let connected = false;
    let failure: Error | undefined;
    socket.once(secure ? "secureConnect" : "connect", () => {
      connected = true;
      resolve(transport);
    });
    socket.on("data", (chunk: Buffer) => events.data(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)));
    socket.on("error", (error: Error) => {
      failure = error;
      if (!connected) reject(error);
    });
    socket.on("end", () => socket.end());
    socket.once("close", () => {
      transport.gone();
      if (connected) events.closed(failure);
    });
  });
}

function nodeTls(tls: TlsSettings | undefined, host: string): tlsModule.ConnectionOptions {
  if (tls === undefined || typeof tls === "boolean") return { servername: net.isIP(host) ? undefined : host };
  return {
    ...(tls.ca !== undefined ? { ca: typeof tls.ca === "string" ? tls.ca : [...tls.ca] } : {}),
    ...(tls.cert !== undefined ? { cert: tls.cert } : {}),
    ...(tls.key !== undefined ? { key: tls.key } : {}),
    servername: tls.serverName ?? (net.isIP(host) ? undefined : host),
    ...(tls.rejectUnauthorized !== undefined ? { rejectUnauthorized: tls.rejectUnauthorized } : {}),
  };
}
