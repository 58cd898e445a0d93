// A client that stops reading and floods heartbeats (every one needs a
// reply) is cut, and meanwhile every other session's heartbeats are answered
// within its schedule: each reply arrives before that session's
// clientTimeout (0.8 x lease) after its send, the protocol's own bound. The
// server is a real `lockd serve` process. The flood never gets as far as
// filling the kernel buffers: the first read with more than PIPELINE_LIMIT
// frames ends the session with PROTOCOL_ERROR (protocol.md section 7,
// rule 11), long before io-timeout or the outbox bound would act.
import { expect, test } from "bun:test";
import { FrameType } from "../../src/protocol/index.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { steadyHolder } from "../helpers/steady.ts";
import { WirePeer } from "../helpers/wire.ts";

const IO_TIMEOUT_MS = 1000;
const LEASE = 1500;
const CLIENT_TIMEOUT = 0.8 * LEASE;
const OTHERS = 6;

test("a client that stops reading and floods is cut for pipelining; every other session's replies stay within 0.8 x lease", async () => {
  await using child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--io-timeout", `${IO_TIMEOUT_MS}ms`]);
  const { listenPort } = await child.addresses();
  const others = await Promise.all(Array.from({ length: OTHERS }, (_, i) => steadyHolder(listenPort, `fault/steady-${i}`, LEASE, LEASE / 4, 10_000)));

  const stuck = await WirePeer.connect(listenPort);
  try {
    stuck.acquire("fault/stuck", 60_000);
    expect((await stuck.frame(0)).type).toBe(FrameType.ACQUIRED);
    stuck.pause();
    // 500,000 heartbeats (2 MB) ask for 6 MB of replies: more than the kernel buffers hold.
    const flood = new Uint8Array(4 * 500_000);
    for (let i = 0; i < flood.length; i += 4) flood[i] = FrameType.HEARTBEAT;
    const started = performance.now();
    await stuck.writeAll(flood, 20_000).catch(() => {}); // the server may cut it before it has all of it
    const cut = await child.event("session.protocol_error", IO_TIMEOUT_MS + 20_000);
    expect(cut.lock).toBe("fault/stuck");
    expect(cut.reason).toBe("PROTOCOL_ERROR");
    const cutAfter = performance.now() - started;
    expect(cutAfter).toBeLessThan(IO_TIMEOUT_MS + 20_000);

    // Every other session kept its schedule throughout, and keeps it after the cut.
    const counts = others.map((o) => o.rtts.length);
    await Promise.all(others.map(async (o, i) => {
      const deadline = performance.now() + 10_000;
      while (o.rtts.length < counts[i]! + 2 && performance.now() < deadline) await Bun.sleep(LEASE / 4);
    }));
    for (const other of others) await other.finish();
    for (const other of others) {
      expect(other.rtts.length).toBeGreaterThanOrEqual(3);
      for (const rtt of other.rtts) expect(rtt).toBeLessThan(CLIENT_TIMEOUT);
    }
    const worst = Math.max(...others.flatMap((o) => o.rtts));
    console.log(`slow reader cut (PROTOCOL_ERROR, pipelining) ${Math.round(cutAfter)} ms after its flood began; ${others.reduce((n, o) => n + o.rtts.length, 0)} heartbeats of ${OTHERS} sessions, worst round trip ${worst.toFixed(1)} ms (bound ${CLIENT_TIMEOUT} ms)`);
  } finally {
    stuck.terminate();
  }
}, 60_000);
