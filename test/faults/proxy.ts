/**
 * A test-owned TCP proxy on 127.0.0.1 that can stop forwarding without
 * closing anything: the partition stand-in where network namespaces are not
 * available. After `cut()` bytes in both directions are dropped, and closes
 * are not passed on either, so each side sees only silence.
 */
import type { Socket, TCPSocketListener } from "bun";

interface Pipe {
  peer: Socket<Pipe> | null;
  /** Bytes from the client that arrived before the upstream connection was open. */
  early: Uint8Array[];
}

export class SilentProxy implements AsyncDisposable {
  private cutOff = false;
  private readonly sockets = new Set<Socket<Pipe>>();
  private readonly listener: TCPSocketListener<Pipe>;

  constructor(upstreamPort: number) {
    const proxy = this;
    const forward = (from: Socket<Pipe>, chunk: Uint8Array): void => {
      if (proxy.cutOff) return;
      if (from.data.peer === null) from.data.early.push(chunk);
      else from.data.peer.write(chunk);
    };
    const close = (socket: Socket<Pipe>): void => {
      proxy.sockets.delete(socket);
      if (!proxy.cutOff) socket.data.peer?.end();
    };
    this.listener = Bun.listen<Pipe>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        binaryType: "uint8array",
        open(client) {
          client.data = { peer: null, early: [] };
          proxy.sockets.add(client);
          void Bun.connect<Pipe>({
            hostname: "127.0.0.1",
            port: upstreamPort,
            data: { peer: client, early: [] },
            socket: {
              binaryType: "uint8array",
              open(upstream) {
                proxy.sockets.add(upstream);
                client.data.peer = upstream;
                for (const chunk of client.data.early.splice(0)) upstream.write(chunk);
              },
              data: forward,
              close,
              error() {},
            },
          }).catch(() => client.end());
        },
        data: forward,
        close,
        error() {},
      },
    });
  }

  get port(): number {
    return this.listener.port;
  }

  /** Stop forwarding in both directions; keep every connection open. */
  cut(): void {
    this.cutOff = true;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.cutOff = true;
    for (const socket of this.sockets) socket.terminate();
    this.listener.stop(true);
  }
}
