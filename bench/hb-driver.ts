/**
 * Heartbeat driver (a bench child): opens N sessions to lockd or to the echo
 * floor and, on `run`, keeps one HEARTBEAT in flight per session as fast as
 * replies come back (a closed loop: the maximum rate, not the protocol's
 * schedule), for a warm-up and then a measured window. It runs in its own
 * process so that it is not the server's process that pays for the client,
 * and reports its own CPU time so the report can show who used what.
 *
 * Usage: bun bench/hb-driver.ts <port> <sessions> <lockd|echo>
 */
import { HEARTBEAT_FRAME, encodeAcquire } from "../src/protocol/index.ts";
import { ready, serveRequests } from "./lib/child.ts";
import { Peer, PeerState } from "./lib/peer.ts";
import { Samples, summarize } from "./lib/stats.ts";

const [portArg, sessionsArg, mode] = process.argv.slice(2);
const port = Number(portArg);
const sessions = Number(sessionsArg);
const peers: Peer[] = [];
const rtt = new Samples(1 << 17);
let measuring = false;
let running = false;
let frames = 0;

function onReply(peer: Peer, at: number): void {
  if (measuring) {
    frames++;
    rtt.add(at - peer.sentAt);
  }
  if (!running) return;
  peer.sentAt = performance.now();
  peer.socket!.write(HEARTBEAT_FRAME);
}

// Connect in batches so the listen backlog never overflows.
for (let i = 0; i < sessions; i += 100) {
  const batch: Promise<Peer>[] = [];
  for (let j = i; j < Math.min(sessions, i + 100); j++) {
    batch.push(
      Peer.connect("127.0.0.1", port).then(async (peer) => {
        if (mode === "lockd") {
          // A lock per session: every session is an owner, as in the budget's setting.
          const state = await peer.acquire(encodeAcquire({ name: `hb/${process.pid}/${j}`, leaseMs: 600_000, owner: "", try: false }));
          if (state !== PeerState.OWNER) throw new Error(`session ${j} did not get its lock`);
        }
        // The echo floor has no ACQUIRE: the session starts as an owner, and every 12-byte answer is a reply.
        else peer.state = PeerState.OWNER;
        peer.onReply = onReply;
        return peer;
      }),
    );
  }
  peers.push(...(await Promise.all(batch)));
}

serveRequests({
  async run(request) {
    const warmupMs = Number(request.warmupMs);
    const durationMs = Number(request.durationMs);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    running = true;
    for (const peer of peers) {
      peer.sentAt = performance.now();
      peer.socket!.write(HEARTBEAT_FRAME);
    }
    await Bun.sleep(warmupMs);
    measuring = true;
    frames = 0;
    rtt.clear();
    const m0 = performance.now();
    await Bun.sleep(durationMs);
    measuring = false;
    const m1 = performance.now();
    running = false;
    const cpu1 = process.cpuUsage(cpu0);
    const wall = performance.now() - t0;
    const closed = peers.filter((p) => p.state === PeerState.CLOSED).length;
    const s = summarize(rtt.toArray());
    return { frames, seconds: (m1 - m0) / 1000, rttP50: s.p50, rttP99: s.p99, cpuUs: cpu1.user + cpu1.system, wallMs: wall, closed };
  },
});
ready({ sessions: peers.length });
