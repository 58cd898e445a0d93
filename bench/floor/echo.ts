/**
 * The floor for heartbeats: a bare Bun echo server that answers every 4
 * bytes in with 12 bytes out (the size of HEARTBEAT and of the owner's
 * ACQUIRED reply), gathered into one write per chunk as lockd does. No
 * frame parsing, no sessions, no timers.
 *
 * Usage: bun bench/floor/echo.ts (a bench child; see bench/lib/child.ts)
 */
import { ready, serveRequests } from "../lib/child.ts";

const REPLY = new Uint8Array([0x81, 0x01, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0, 1]);
const scratch = new Uint8Array(256 * 1024);
for (let i = 0; i + 12 <= scratch.length; i += 12) scratch.set(REPLY, i);

/** Bytes of an incomplete 4-byte unit carried to the next chunk, per socket. */
interface Carry {
  rest: number;
}

const listener = Bun.listen<Carry>({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    binaryType: "uint8array",
    open(socket) {
      socket.data = { rest: 0 };
    },
    data(socket, chunk: Uint8Array) {
      const total = socket.data.rest + chunk.length;
      const frames = total >>> 2;
      socket.data.rest = total & 3;
      if (frames > 0) socket.write(scratch, 0, Math.min(frames * 12, scratch.length - (scratch.length % 12)));
    },
  },
});

serveRequests();
ready({ port: listener.port });
