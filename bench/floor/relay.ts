/**
 * The floor for handover and claims: a bare Bun relay that does only what a
 * handover must do. The first connection to send anything is the holder and
 * gets 12 bytes at once (the size of ACQUIRED); later ones are waiters and
 * get 4 bytes (WAITING). When the holder's connection ends (FIN, RST or
 * error) the first waiter becomes the holder and is written 12 bytes. No
 * parsing, no names, no leases, no timers: everything lockd does beyond this
 * is what the ratio to this floor measures.
 *
 * For the force-release floor it also serves HTTP: any POST cuts the holder
 * (RST) and grants the next waiter, then answers 200: one loopback HTTP round
 * trip plus the RST handover, with no routing, auth, JSON or logging.
 *
 * Usage: bun bench/floor/relay.ts (a bench child; see bench/lib/child.ts)
 */
import type { Socket } from "bun";
import { ready, serveRequests } from "../lib/child.ts";

interface Peer {
  role: 0 | 1 | 2; // 0 new, 1 waiter, 2 holder
  gone: boolean;
}

// A valid ACQUIRED push and WAITING reply, so the bench client parses them like lockd's.
const GRANT = new Uint8Array([0x81, 0x00, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0, 1]);
const REPLY_GRANT = new Uint8Array([0x81, 0x01, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0, 1]);
const WAIT = new Uint8Array([0x82, 0x01, 0x00, 0x00]);

let holder: Socket<Peer> | null = null;
const waiters: Socket<Peer>[] = [];
let waitHead = 0;

function leave(socket: Socket<Peer>): void {
  const peer = socket.data;
  if (peer.gone) return;
  peer.gone = true;
  if (socket !== holder) return; // a leaving waiter is skipped when its turn comes
  holder = null;
  while (waitHead < waiters.length) {
    const next = waiters[waitHead++]!;
    if (next.data.gone) continue;
    holder = next;
    next.data.role = 2;
    next.write(GRANT);
    break;
  }
  if (waitHead === waiters.length) {
    waiters.length = 0;
    waitHead = 0;
  }
}

const listener = Bun.listen<Peer>({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    binaryType: "uint8array",
    open(socket) {
      socket.data = { role: 0, gone: false };
    },
    data(socket) {
      const peer = socket.data;
      if (peer.role !== 0) return;
      if (holder === null) {
        holder = socket;
        peer.role = 2;
        socket.write(REPLY_GRANT);
      } else {
        peer.role = 1;
        waiters.push(socket);
        socket.write(WAIT);
      }
    },
    end: leave,
    error: leave,
    close: leave,
  },
});

const http = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(request) {
    if (request.method !== "POST" || holder === null) return new Response("nothing held\n", { status: 404 });
    const cut = holder;
    leave(cut);
    cut.terminate();
    return new Response("released\n");
  },
});

serveRequests();
ready({ port: listener.port, opsPort: http.port });
