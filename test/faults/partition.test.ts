// A partitioned owner: its link is cut, so the server hears neither a frame
// nor a close. The server must end it with LEASE_EXPIRED a whole lease after
// its last frame (not before) and hand the lock to the waiter.
//
// Two variants. As root with `ip` (CI), the owner runs in a network
// namespace this file creates, joined to the host by a veth pair in a
// private /30, and the cut takes that link down; where no namespace can be
// made, that test is reported skipped, with the reason in its name. The
// other cuts a test-owned proxy on 127.0.0.1 that stops forwarding without
// closing, and runs everywhere.
import { afterAll, expect, test } from "bun:test";
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

// Made when the file loads, so that the test can be skipped when it cannot be made.
const netnsProblem = Netns.unavailable();
const ns = netnsProblem === null ? Netns.create() : null;
const noNetns = ns === null ? ` (skipped: no network namespace: ${netnsProblem ?? Netns.lastError})` : "";
if (ns === null) console.warn(`partition.test.ts: the network namespace variant${noNetns}`);
afterAll(() => ns?.[Symbol.dispose]());

test.skipIf(ns === null)(`partitioned owner in a network namespace whose link is cut: expired at its lease and handed over${noNetns}`, async () => {
  console.log(`partition: network namespace ${ns!.name}, ${ns!.nsIp} -> ${ns!.hostIp} over veth ${ns!.hostIf}`);
  await using server = startServer({ hostname: ns!.hostIp });
  await partitionHandsOver(server, ns!.hostIp, `${ns!.hostIp}:${server.port}`, ns!.exec, () => ns!.cut());
}, 45_000);

test("partitioned owner behind a proxy that stops forwarding: expired at its lease and handed over", async () => {
  await using server = startServer();
  await using proxy = new SilentProxy(server.port);
  await partitionHandsOver(server, "127.0.0.1", `127.0.0.1:${proxy.port}`, [], () => proxy.cut());
}, 45_000);
