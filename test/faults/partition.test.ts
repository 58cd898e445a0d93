// A partitioned owner: its link is cut, so the server hears neither a frame
// nor a close. The server must end it with LEASE_EXPIRED a whole lease after
// its last frame (not before) and hand the lock to the waiter.
//
// As root with `ip` (CI), the owner runs in a network namespace this test
// creates, joined to the host by a veth pair in a private /30, and the cut
// takes that link down. Elsewhere a test-owned proxy on 127.0.0.1 stops
// forwarding without closing; the test prints which mode ran. The proxy
// variant also runs on its own, everywhere.
import { expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import type { LockServer } from "../../src/server/index.ts";
import { watchEnds } from "../helpers/ends.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { spawnOwner, waitFor } from "./child.ts";
import { Netns } from "./netns.ts";
import { SilentProxy } from "./proxy.ts";
import { engineOf } from "../helpers/engine.ts";

const LEASE = 1500;

/** The owner holds; the waiter queues; `cut()` partitions the owner; then the handover is checked. */
async function partitionHandsOver(server: LockServer, hostIp: string, ownerServer: string, prefix: readonly string[], cut: () => void): Promise<void> {
  const ends = watchEnds(server);
  await using owner = spawnOwner(ownerServer, "fault/partition", LEASE, undefined, prefix);
  const oldToken = BigInt((await owner.event("granted", 15_000)).token);
  const session = [...engineOf(server).sessions.values()].find((s) => s.owner === `fault-owner/pid-${owner.pid}`)!;
  expect(session).toBeDefined();
  // At least one heartbeat went through the link before the cut: the link really worked.
  const grantedSeen = session.lastSeen;
  await waitFor(() => session.lastSeen > grantedSeen, 5 * LEASE, "a heartbeat over the link");

  const waiter = await WirePeer.claim(server.port, "fault/partition", 60_000, { hostname: hostIp });
  expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);

  const cutAt = performance.now();
  cut();
  const grant = await waiter.frame(1, LEASE + 15_000);
  expect(grant.type).toBe(FrameType.ACQUIRED);
  expect(grant.token!).toBeGreaterThan(oldToken);
  const end = ends.ends.find((e) => e.sessionId === session.id);
  expect(end?.code).toBe(ErrorCode.LEASE_EXPIRED);
  expect(session.lastSeen).toBeLessThan(cutAt + 100); // nothing crossed after the cut (one frame may have been on the wire)
  expect(end!.at - session.lastSeen).toBeGreaterThanOrEqual(LEASE); // not before the lease
  expect(grant.at - session.lastSeen).toBeGreaterThanOrEqual(LEASE);
  expect(grant.at - cutAt).toBeLessThan(LEASE + 10_000); // generous upper bound
  waiter.end();
}

async function viaProxy(): Promise<void> {
  await using server = startServer();
  await using proxy = new SilentProxy(server.port);
  await partitionHandsOver(server, "127.0.0.1", `127.0.0.1:${proxy.port}`, [], () => proxy.cut());
}

test("partitioned owner: expired at its lease and handed over (network namespace, else proxy)", async () => {
  const why = Netns.unavailable();
  const ns = why === null ? Netns.create() : null;
  if (ns === null) {
    console.log(`partition mode: proxy (network namespace unavailable: ${why ?? Netns.lastError})`);
    await viaProxy();
    return;
  }
  try {
    console.log(`partition mode: network namespace ${ns.name}, ${ns.nsIp} -> ${ns.hostIp} over veth ${ns.hostIf}`);
    await using server = startServer({ hostname: ns.hostIp });
    await partitionHandsOver(server, ns.hostIp, `${ns.hostIp}:${server.port}`, ns.exec, () => ns.cut());
  } finally {
    ns[Symbol.dispose]();
  }
}, 45_000);

test("partitioned owner behind a proxy that stops forwarding: expired at its lease and handed over", async () => {
  await viaProxy();
}, 45_000);
