/**
 * The crowd for bench/abuse.ts (a child process): `count` idle sessions that
 * each own a lock of their own, named with `nameBytes` bytes, leased for 30
 * minutes so they need no heartbeat during a run. They connect from many
 * loopback source addresses (127.0.1.1, 127.0.1.2, ...; `perSource` sessions
 * each), as many separate clients would, so a per-source session limit on
 * the server does not refuse them.
 *
 * With `queue` for nameBytes (attack n): every session claims the one lock
 * QUEUE_NAME instead, with an owner label of the longest length (256
 * bytes): one holder and `count - 1` waiters, in the order they connected.
 *
 * Usage: bun bench/abuse-crowd.ts <port> <count> <nameBytes|queue> <perSource> <lifetimeMs> [serverPid:dataDir]
 */
import type { Socket } from "node:net";
import { FrameType, encodeAcquire } from "../src/protocol/index.ts";
import { MAX_OWNER_LENGTH } from "../src/protocol/constants.ts";
import { QUEUE_NAME } from "./lib/abuse-options.ts";
import { ready, serveRequests } from "./lib/child.ts";
import { connectFrom } from "./lib/net-source.ts";
import { exitWithBench } from "./lib/orphan.ts";

const [portArg, countArg, nameArg = "16", perSourceArg = "32", lifetimeArg = "600000", serverArg = ""] = process.argv.slice(2);
const PORT = Number(portArg);
const COUNT = Number(countArg);
const QUEUE = nameArg === "queue";
const NAME_BYTES = QUEUE ? 0 : Math.max(8, Math.min(512, Number(nameArg)));
const PER_SOURCE = Math.max(1, Number(perSourceArg));
const LEASE_MS = 30 * 60_000;
exitWithBench(Number(lifetimeArg), serverArg);

const sockets: Socket[] = [];
let granted = 0;
let failed = 0;

function sourceOf(i: number): string {
  const k = Math.floor(i / PER_SOURCE);
  return `127.0.${1 + Math.floor(k / 250)}.${1 + (k % 250)}`;
}

function nameOf(i: number): string {
  if (QUEUE) return QUEUE_NAME;
  const base = `abuse/crowd/${process.pid}/${i}/`;
  return base.padEnd(NAME_BYTES, "x");
}

async function open(i: number): Promise<void> {
  let socket: Socket;
  try {
    socket = await connectFrom(sourceOf(i), PORT, 10_000);
  } catch {
    failed++;
    return;
  }
  sockets.push(socket);
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      failed++;
      resolve();
    }, 10_000);
    socket.once("data", (chunk: Buffer) => {
      clearTimeout(timer);
      // In the queue, WAITING is the session in place.
      if (chunk[0] === FrameType.ACQUIRED || (QUEUE && chunk[0] === FrameType.WAITING)) granted++;
      else failed++;
      resolve();
    });
    socket.on("error", () => {});
    socket.write(encodeAcquire({ name: nameOf(i), leaseMs: LEASE_MS, owner: QUEUE ? `abuse-crowd/${i}/`.padEnd(MAX_OWNER_LENGTH, "o") : "abuse-crowd", try: false }));
  });
}

// The queue's holder first, so every later session waits.
if (QUEUE && COUNT > 0) await open(0);
const BATCH = 200;
for (let i = QUEUE ? 1 : 0; i < COUNT; i += BATCH) {
  const batch: Promise<void>[] = [];
  for (let j = i; j < Math.min(COUNT, i + BATCH); j++) batch.push(open(j));
  await Promise.all(batch);
}

serveRequests({}, () => ({ granted, failed, open: sockets.filter((s) => !s.destroyed).length }));
ready({ granted, failed });
