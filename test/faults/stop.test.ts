// An owner process stopped with SIGSTOP (a long GC pause): the server hears
// nothing from it, so the waiter is granted once the owner's lease has run
// from its last frame, never before. On SIGCONT the owner's signal aborts
// (it has not been confirmed for 0.8 x lease), and the write it was in the
// middle of carries its old token, which the guarded resource refuses
// because the new owner's larger token has been seen.
import { expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { spawnOwner } from "./child.ts";
import { FencedResource } from "./fence.ts";
import { engineOf } from "../helpers/engine.ts";

const LEASE = 2000;

test("owner SIGSTOPped: granted after its lease, not before; on SIGCONT it has lost and its write is fenced off", async () => {
  await using server = startServer();
  using fence = new FencedResource();
  await using owner = spawnOwner(`127.0.0.1:${server.port}`, "fault/gc", LEASE, fence.url);
  const oldToken = BigInt((await owner.event("granted")).token);
  const session = [...engineOf(server).sessions.values()].find((s) => s.owner === `fault-owner/pid-${owner.pid}`)!;
  expect(BigInt(session.token)).toBe(oldToken);
  expect((await fence.write(oldToken))).toBe(200); // the owner's token is good while it holds

  const waiter = await WirePeer.claim(server.port, "fault/gc", 60_000);
  expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);

  const stoppedAt = performance.now();
  owner.proc.kill("SIGSTOP");
  try {
    const grant = await waiter.frame(1, LEASE + 15_000);
    expect(grant.type).toBe(FrameType.ACQUIRED);
    expect(session.endReason).toBe(ErrorCode.LEASE_EXPIRED);
    // The owner's last frame reached the server before the stop (allowing
    // for one already on the wire) ...
    expect(session.lastSeen).toBeLessThan(stoppedAt + 100);
    // ... and the grant came a whole lease after it: strictly not before.
    expect(grant.at - session.lastSeen).toBeGreaterThanOrEqual(LEASE);
    expect(grant.at - stoppedAt).toBeLessThan(LEASE + 10_000); // generous upper bound
    expect(owner.events.some((e) => e.ev === "aborted")).toBe(false); // a stopped process hears nothing

    const newToken = grant.token!;
    expect(newToken).toBeGreaterThan(oldToken);
    expect(await fence.write(newToken)).toBe(200);
  } finally {
    // The scenario is a pause of at least a whole lease. The grant can come
    // as early as a lease after the owner's last heartbeat, which may have
    // been up to lease/4 before the stop: keep it stopped for the rest, so
    // its own pause detector (a gap over 0.8 x lease) always sees the pause.
    const rest = stoppedAt + LEASE - performance.now();
    if (rest > 0) await Bun.sleep(rest);
    owner.proc.kill("SIGCONT");
  }

  // Resumed: it learns it lost (its 0.8 x lease rule, or the server's ERROR/close) ...
  const aborted = await owner.event("aborted");
  expect(["unconfirmed", "server-error", "closed"]).toContain(aborted.why);
  const resumed = await owner.event("resumed");
  expect(resumed.held).toBe(false); // its first look after the pause says so, whichever timer ran first
  expect(resumed.pausedMs).toBeGreaterThanOrEqual(0.8 * LEASE);
  // ... and the write it was about to make carries its old token and is refused.
  const write = await owner.event("write");
  expect(write.token).toBe(String(oldToken));
  expect(write.status).toBe(409);
  expect(fence.writes.map((w) => [w.token, w.accepted])).toEqual([
    [oldToken, true],
    [fence.highest, true],
    [oldToken, false],
  ]);
  waiter.end();
}, 45_000);
