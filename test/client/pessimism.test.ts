/**
 * The pessimism rule against a scripted server: it answers ACQUIRE and the
 * first heartbeats, then delays or withholds replies. The held lock's signal
 * must abort about 0.8 x lease after the *send* of the last answered frame,
 * and strictly before the lease a real server would count from that frame's
 * arrival.
 */
import { expect, test } from "bun:test";
import { LockClient, LockLostError } from "../../src/client/index.ts";
import { FLAG_REPLY, FrameType, encodeAcquired } from "../../src/protocol/index.ts";
import { FakeServer, aborted, type ClientFrame, type FakeConn } from "./fake-server.ts";

// 2 s: the 0.2 x lease margin (400 ms) absorbs timer lateness on a loaded 2-core machine.
const LEASE = 2000;

function grantReply(): Uint8Array {
  return encodeAcquired(42, FLAG_REPLY);
}

test("withheld heartbeat reply: the signal aborts at 0.8 x lease from the last answered send, before the lease", async () => {
  const answerHeartbeats = 2;
  let answered: ClientFrame | undefined;
  using server = new FakeServer((conn: FakeConn, frame: ClientFrame) => {
    const heartbeats = conn.frames.filter((f) => f.type === FrameType.HEARTBEAT).length;
    if (frame.type === FrameType.ACQUIRE || heartbeats <= answerHeartbeats) {
      answered = frame;
      conn.socket.write(grantReply());
    }
  });
  const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
  const lock = await client.acquire("p/withheld", { lease: LEASE });
  try {
    expect(lock.token).toBe(42n);
    const abortedAt = await aborted(lock.signal, 10 * LEASE);
    const conn = server.conns[0]!;
    const heartbeats = conn.frames.filter((f) => f.type === FrameType.HEARTBEAT);
    // The withheld one was sent, and no second heartbeat followed it: one in flight at most.
    expect(heartbeats.length).toBe(answerHeartbeats + 1);
    const sinceAnswered = abortedAt - answered!.at;
    expect(sinceAnswered).toBeGreaterThan(0.8 * LEASE - 100); // the send came a little before this arrival
    expect(sinceAnswered).toBeLessThan(LEASE); // a real server expires at arrival + lease: strictly later
    const reason = lock.signal.reason as LockLostError;
    expect(reason).toBeInstanceOf(LockLostError);
    expect(reason.code).toBe("LOCK_LOST");
    expect(reason.why).toBe("unconfirmed");
    expect(reason.class).toBe("lock");
    // The client closes the connection when it gives up.
    await server.until(() => conn.closed, 5000, "client close");
  } finally {
    await lock.release();
  }
});

test("replies slower than clientTimeout: confirmation counts from the send, so the lock is lost", async () => {
  // The ACQUIRE reply is delayed by 0.5 x lease, and every heartbeat reply by
  // 0.9 x lease (after its send + 0.8 x lease: too late to confirm anything).
  // Counting from the send, the claim is confirmed until ACQUIRE's send +
  // 0.8 x lease; a client counting from the reply's arrival would hold on
  // until 1.3 x lease, past the server's expiry.
  const timers: ReturnType<typeof setTimeout>[] = [];
  let acquireAt = 0;
  using server = new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE) {
      acquireAt = frame.at;
      timers.push(setTimeout(() => conn.socket.write(grantReply()), 0.5 * LEASE));
    } else timers.push(setTimeout(() => conn.closed || conn.socket.write(grantReply()), 0.9 * LEASE));
  });
  try {
    const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
    const lock = await client.acquire("p/slow", { lease: LEASE });
    const abortedAt = await aborted(lock.signal, 10 * LEASE);
    // Aborted at about 0.8 x lease after ACQUIRE, the last frame answered in time.
    expect(abortedAt - acquireAt).toBeGreaterThan(0.8 * LEASE - 100);
    expect(abortedAt - acquireAt).toBeLessThan(LEASE);
    expect((lock.signal.reason as LockLostError).why).toBe("unconfirmed");
    await lock.release();
  } finally {
    for (const t of timers) clearTimeout(t);
  }
});

test("prompt replies keep the lock well past the lease, heartbeats spaced by the schedule, never bunched", async () => {
  using server = new FakeServer((conn) => conn.socket.write(grantReply()));
  const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
  // The file's 2 s lease, not a short one: the client rightly gives a lock up when this
  // process stalls for more than about 0.55 x lease (0.8 x lease after the last answered
  // send, which was up to lease/4 earlier), and a loaded 2-core machine stalls a process
  // for 100-300 ms now and then (a 200 ms lease was lost that way).
  await using lock = await client.acquire("p/healthy", { lease: LEASE });
  const frames = server.conns[0]!.frames;
  // 6 heartbeats at lease/4: one and a half leases.
  await server.until(() => frames.length >= 7 || lock.signal.aborted, 15_000, "6 heartbeats");
  expect({ aborted: lock.signal.aborted, reason: String(lock.signal.reason ?? "") }).toEqual({ aborted: false, reason: "" });
  // Each heartbeat goes out an interval (lease/4 minus twice the smoothed round trip) after
  // the previous reply, which the fake sends on arrival: far apart, never back to back.
  for (let i = 2; i < 7; i++) expect(frames[i]!.at - frames[i - 1]!.at).toBeGreaterThan(LEASE / 8);
});
