/** Transport over Bun.connect: the default wherever the Bun global exists. */
import type { Socket } from "bun";
import type { Address, TlsSettings, Transport, TransportEvents } from "./transport.ts";

class BunTransport implements Transport {
  socket: Socket<BunTransport> | null = null;
  /** Bytes the kernel did not take yet (a short write), flushed on drain. */
  private outbox: Uint8Array | null = null;
  private isClosed = false;
  get isGone(): boolean {
    return this.isClosed;
  }
  private onClosed: (() => void)[] = [];
  /** TLS: settles the handshake wait in connectBun (Bun drops writes made before it completes). */
  handshake: ((error: Error | undefined) => void) | null = null;
  /**
   * connectBun has resolved: from now on the end of the connection is an
   * event. Before that it is the rejection of the connect (with the
   * handshake's own error, say "unable to verify the first certificate"),
   * as in the node:net transport, not a bare "closed".
   */
  opened = false;

  constructor(readonly events: TransportEvents) {}

  write(bytes: Uint8Array): void {
    const socket = this.socket;
    if (socket === null || this.isClosed) return;
    if (this.outbox !== null) {
      this.outbox = concat(this.outbox, bytes);
      return;
    }
    const written = socket.write(bytes);
    if (written >= 0 && written < bytes.length) this.outbox = bytes.slice(written);
  }

  drain(): void {
    const outbox = this.outbox;
    if (outbox === null || this.socket === null) return;
    const written = this.socket.write(outbox);
    this.outbox = written < 0 || written === outbox.length ? null : outbox.slice(written);
  }

  close(): Promise<void> {
    if (this.isClosed) return Promise.resolve();
    const done = new Promise<void>((resolve) => this.onClosed.push(resolve));
    this.socket?.end();
    return done;
  }

  gone(error: Error | undefined): void {
    this.handshake?.(error ?? new Error("the connection closed during the TLS handshake"));
    this.handshake = null;
    if (this.isClosed) return;
    this.isClosed = true;
    this.outbox = null;
    for (const resolve of this.onClosed) resolve();
    this.onClosed = [];
    if (this.opened) this.events.closed(error);
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

export async function connectBun(address: Address, tls: TlsSettings | undefined, events: TransportEvents): Promise<Transport> {
  const transport = new BunTransport(events);
  const secure = tls !== undefined && tls !== false;
  const handshake = secure
    ? new Promise<void>((resolve, reject) => {
        transport.handshake = (error) => (error === undefined ? resolve() : reject(error));
      })
    : null;
  transport.socket = await Bun.connect<BunTransport>({
    hostname: address.host,
    port: address.port,
    data: transport,
    ...(tls === undefined || tls === false ? {} : { tls: bunTls(tls) }),
    socket: {
      binaryType: "uint8array",
      handshake(socket, success, error) {
        const settle = socket.data.handshake;
        socket.data.handshake = null;
        settle?.(success ? undefined : (error ?? new Error("TLS handshake failed")));
        if (!success) socket.terminate();
      },
      data(socket, chunk: Uint8Array) {
        socket.data.events.data(chunk);
      },
      drain(socket) {
        socket.data.drain();
      },
      end(socket) {
        socket.data.gone(undefined);
      },
      close(socket, error) {
        socket.data.gone(error);
      },
      error(socket, error) {
        socket.data.gone(error);
      },
      connectError() {
        // Bun.connect rejects; nothing was opened.
      },
    },
  });
  if (handshake !== null) await handshake; // rejects when the server's certificate is refused
  if (transport.isGone) throw new Error("the server closed the connection before it was usable");
  transport.opened = true;
  return transport;
}

function bunTls(tls: TlsSettings): Bun.TLSOptions | boolean {
  if (tls === true) return true;
  if (tls === false) return false;
  // Bun.connect takes an empty object as "no TLS" (no handshake ever runs):
  // { } here means TLS with the system CAs, as for node:tls.
  if (tls.ca === undefined && tls.cert === undefined && tls.key === undefined && tls.serverName === undefined && tls.rejectUnauthorized === undefined) {
    return true;
  }
  return {
    ...(tls.ca !== undefined ? { ca: typeof tls.ca === "string" ? tls.ca : [...tls.ca] } : {}),
    ...(tls.cert !== undefined ? { cert: tls.cert } : {}),
    ...(tls.key !== undefined ? { key: tls.key } : {}),
    ...(tls.serverName !== undefined ? { serverName: tls.serverName } : {}),
    ...(tls.rejectUnauthorized !== undefined ? { rejectUnauthorized: tls.rejectUnauthorized } : {}),
  };
}
