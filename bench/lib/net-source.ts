/**
 * Connections from a chosen loopback source address (127.x.y.z), for benches
 * that must not share a source with the traffic they measure: a server with
 * a per-source session limit counts sessions by the peer's address, and
 * everything on one machine is 127.0.0.1 unless it binds another. Bun.connect
 * cannot bind a source address (Bun 1.4.5), so this uses node:net.
 *
 * - `sourceConnector(source)`: a Connector for the client library
 *   (LockClient's `connect` option), plain TCP only.
 * - `connectFrom(...)`: a raw socket, resolved once connected.
 * - `httpGet(...)`: one HTTP/1.1 GET on a fresh connection (Connection:
 *   close), resolved with the status and the body length.
 */
import * as net from "node:net";
import type { Address, Connector, TransportEvents } from "../../src/client/index.ts";
import { nodeTransport } from "../../src/client/node-transport.ts";

/** A Connector for LockClient that connects from `source` (TLS is not supported). */
export function sourceConnector(source: string): Connector {
  return (address: Address, tls, events: TransportEvents) =>
    tls !== undefined && tls !== false
      ? Promise.reject(new Error("sourceConnector: TLS is not supported"))
      : nodeTransport(net.connect({ host: address.host, port: address.port, localAddress: source }), false, events);
}

/** A raw node:net socket from `source` to 127.0.0.1:port; rejects on error or after `timeoutMs`. */
export function connectFrom(source: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise<net.Socket>((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port, localAddress: source });
    socket.setNoDelay(true);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`connect timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once("connect", () => {
      clearTimeout(timer);
      resolve(socket);
    });
    socket.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

export interface HttpResult {
  /** HTTP status, or 0 when the request failed (see `error`). */
  readonly status: number;
  readonly bytes: number;
  readonly error?: string;
  /** The whole answer (head and body) as latin1 text, when asked for. */
  readonly text?: string;
}

/** GET `path` from 127.0.0.1:port on a fresh connection from `source`; gives up after `timeoutMs`. */
export function httpGet(source: string, port: number, path: string, timeoutMs: number, keepText = false): Promise<HttpResult> {
  return new Promise<HttpResult>((resolve) => {
    let bytes = 0;
    let head = "";
    const chunks: Buffer[] = [];
    let done = false;
    const socket = net.connect({ host: "127.0.0.1", port, localAddress: source });
    const finish = (result: HttpResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => finish({ status: 0, bytes, error: "timeout" }), timeoutMs);
    socket.once("connect", () => socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`));
    socket.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      if (keepText) chunks.push(chunk);
      if (head.length < 64) head += chunk.toString("latin1", 0, Math.min(chunk.length, 64));
    });
    const answered = () => {
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(head);
      return status === null ? null : { status: Number(status[1]), bytes, ...(keepText ? { text: Buffer.concat(chunks).toString("latin1") } : {}) };
    };
    // A server that answers and closes before reading the request (the ops
    // listener refusing at accept) makes the kernel reset the connection
    // once the request arrives; a refusal's status line read before the
    // reset is still its answer. A reset before any status line, or after
    // a 200 (whose body may be short), is a failure.
    socket.once("error", (error: Error & { code?: string }) => {
      const answer = answered();
      finish(answer !== null && answer.status !== 200 ? answer : { status: 0, bytes, error: error.code ?? error.message });
    });
    socket.once("close", () => finish(answered() ?? { status: 0, bytes, error: bytes === 0 ? "closed without an answer" : "bad answer" }));
  });
}
