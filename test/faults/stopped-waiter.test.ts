// A waiter process stopped (SIGSTOP) while the server promotes it: the
// ACQUIRED push sits in its socket buffer, the server expires it at its
// lease and promotes the next waiter. When the stopped process resumes, the
// push it finally reads confirms nothing (its last answered send is more
// than 0.8 x lease ago), so it must not report the lock as granted while
// another client holds it: it rejoins the queue instead, and is granted
// (with a larger token) only after the current holder leaves.
import { expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { watchEnds } from "../helpers/ends.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { spawnOwner, waitFor } from "./child.ts";
import { engineOf } from "../helpers/engine.ts";

const LEASE = 1000;

test("a waiter stopped through its promotion does not report a grant on resume while the next holder holds", async () => {
  await using server = startServer();
  const ends = watchEnds(server);
  const first = await WirePeer.claim(server.port, "fault/stopped-waiter", 60_000);
  expect(first.frames[0]!.type).toBe(FrameType.ACQUIRED);

  await using waiter = spawnOwner(`127.0.0.1:${server.port}`, "fault/stopped-waiter", LEASE);
  await waitFor(() => [...engineOf(server).sessions.values()].some((s) => s.owner === `fault-owner/pid-${waiter.pid}` && s.lock !== null), 10_000, "the child queued");
  const session = [...engineOf(server).sessions.values()].find((s) => s.owner === `fault-owner/pid-${waiter.pid}`)!;
  const next = await WirePeer.claim(server.port, "fault/stopped-waiter", 60_000);
  expect(next.frames[0]!.type).toBe(FrameType.WAITING);

  waiter.proc.kill("SIGSTOP");
  try {
    first.end(); // the stopped child is promoted: its ACQUIRED waits unread in its socket
    await ends.until((e) => e.some((x) => x.sessionId === session.id), LEASE + 15_000);
    expect(session.endReason).toBe(ErrorCode.LEASE_EXPIRED);
    const grant = await next.frame(1, 10_000);
    expect(grant.type).toBe(FrameType.ACQUIRED);
  } finally {
    waiter.proc.kill("SIGCONT");
  }
  // Resumed, it reads the stale push (and the ERROR after it). While `next`
  // holds, no grant may be reported: wait until it has reconnected and queued again.
  const requeued = () => [...engineOf(server).sessions.values()].some((s) => s.owner === `fault-owner/pid-${waiter.pid}` && s !== session && s.lock !== null);
  await waitFor(() => requeued() || waiter.events.some((e) => e.ev === "granted"), 15_000, "the child queued again (or reported a grant)");
  expect(waiter.events.map((e) => `${e.ev} ${e.why ?? e.token ?? ""}`.trim())).toEqual([]);
  expect(requeued()).toBe(true);

  next.end(); // now it is its turn
  const granted = await waiter.event("granted", 15_000);
  expect(BigInt(granted.token)).toBeGreaterThan(next.frames[1]!.token!);
}, 60_000);
