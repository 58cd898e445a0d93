// Over real sockets: every arrow of the state diagram, FIFO with 100
// waiters, push handover, leases kept by heartbeats and ended by silence.
import { describe, expect, test } from "bun:test";
import { ErrorCode, FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";

const { ACQUIRED, WAITING, ERROR } = FrameType;

describe("state diagram over TCP", () => {
  test("CONNECTED -> ACQUIRED, CONNECTED -> WAITING, WAITING -> ACQUIRED on the owner's close (a push)", async () => {
    await using server = startServer();
    const a = await WirePeer.claim(server.port, "L", 60_000);
    const grant = a.frames[0]!;
    expect([grant.type, grant.flags]).toEqual([ACQUIRED, FLAG_REPLY]);
    const b = await WirePeer.claim(server.port, "L", 60_000);
    expect([b.frames[0]!.type, b.frames[0]!.flags]).toEqual([WAITING, FLAG_REPLY]);
    a.end();
    // b sends nothing more: the grant must come on the server's initiative.
    const push = await b.frame(1);
    expect([push.type, push.flags]).toEqual([ACQUIRED, 0]);
    expect(push.token!).toBeGreaterThan(grant.token!);
    b.end();
  });

  test("WAITING -> DISCONNECTED on close: the next waiter inherits its place", async () => {
    await using server = startServer();
    const [a, b, c] = await Promise.all([0, 1, 2].map(() => WirePeer.connect(server.port)));
    a!.acquire("L", 60_000);
    await a!.frame(0);
    b!.acquire("L", 60_000);
    await b!.frame(0);
    c!.acquire("L", 60_000);
    await c!.frame(0);
    b!.end();
    await b!.closed();
    a!.end();
    expect((await c!.frame(1)).type).toBe(ACQUIRED);
    expect(b!.frames.length).toBe(1);
    c!.end();
  });

  test("ACQUIRED -> DISCONNECTED by RST (terminate) hands over at once", async () => {
    await using server = startServer();
    const a = await WirePeer.claim(server.port, "L", 60_000);
    const b = await WirePeer.claim(server.port, "L", 60_000);
    a.terminate();
    expect((await b.frame(1)).type).toBe(ACQUIRED);
    b.end();
  });

  test("ACQUIRED -> DISCONNECTED and WAITING -> DISCONNECTED on lease expiry: LEASE_EXPIRED, never before the lease", async () => {
    await using server = startServer();
    // b and c must queue behind a before a's lease runs out: 1 s leaves room for the
    // 100-300 ms stalls of a loaded machine (with 300 ms, a could expire first).
    const lease = 1000;
    const a = await WirePeer.connect(server.port);
    const sentA = performance.now();
    a.acquire("L", lease);
    await a.frame(0);
    const b = await WirePeer.claim(server.port, "L", 60_000);
    const c = await WirePeer.connect(server.port);
    const sentC = performance.now();
    c.acquire("L", lease); // waits behind a, silent
    await c.frame(0);
    expect([b.frames[0]!.type, c.frames[0]!.type]).toEqual([WAITING, WAITING]);

    const expiredA = await a.frame(1, 5000);
    expect([expiredA.type, expiredA.code]).toEqual([ERROR, ErrorCode.LEASE_EXPIRED]);
    expect(expiredA.at - sentA).toBeGreaterThanOrEqual(lease);
    await a.closed();
    expect((await b.frame(1)).type).toBe(ACQUIRED); // the owner's expiry hands over

    const expiredC = await c.frame(1, 5000);
    expect([expiredC.type, expiredC.code]).toEqual([ERROR, ErrorCode.LEASE_EXPIRED]);
    expect(expiredC.at - sentC).toBeGreaterThanOrEqual(lease);
    await c.closed();
    b.end();
  });

  test("heartbeats keep owner and waiter alive across many leases", async () => {
    await using server = startServer();
    // 1 s: this process (peers and server alike) can stall for 100-300 ms on a loaded
    // 2-core machine, and a lease of 400 ms left a heartbeat only ~350 ms of slack.
    const lease = 1000;
    const owner = await WirePeer.claim(server.port, "L", lease);
    const token = owner.frames[0]!.token;
    const waiter = await WirePeer.claim(server.port, "L", lease);
    // Heartbeat after each reply with a pause of lease/8: 20 rounds span two and a half leases.
    for (let i = 1; i <= 20; i++) {
      await Bun.sleep(lease / 8); // the heartbeat schedule itself, not synchronisation
      owner.heartbeat();
      waiter.heartbeat();
      const [o, w] = await Promise.all([owner.frame(i), waiter.frame(i)]);
      expect([o.type, o.flags, o.token]).toEqual([ACQUIRED, FLAG_REPLY, token]);
      expect([w.type, w.flags]).toEqual([WAITING, FLAG_REPLY]);
    }
    expect(owner.isClosed || waiter.isClosed).toBe(false);
    owner.end();
    expect((await waiter.frame(21)).type).toBe(ACQUIRED);
    waiter.end();
  });
});

describe("FIFO over TCP", () => {
  test("100 waiters are granted in the order their ACQUIREs were accepted, tokens strictly increasing; one leaving the middle is skipped", async () => {
    await using server = startServer();
    const owner = await WirePeer.claim(server.port, "fifo", 60_000);
    let last = owner.frames[0]!.token!;
    const waiters: WirePeer[] = [];
    for (let i = 0; i < 100; i++) {
      const w = await WirePeer.claim(server.port, "fifo", 60_000, { owner: `w${i}` });
      expect(w.frames[0]!.type).toBe(WAITING); // accepted in this order
      waiters.push(w);
    }
    waiters[37]!.end();
    await waiters[37]!.closed();
    owner.end();
    for (const [i, w] of waiters.entries()) {
      if (i === 37) continue;
      const grant = await w.frame(1);
      expect([grant.type, grant.flags]).toEqual([ACQUIRED, 0]);
      expect(grant.token!).toBeGreaterThan(last);
      last = grant.token!;
      // Nobody after i has been granted yet.
      for (const later of waiters.slice(i + 1)) expect(later.frames.length).toBe(1);
      w.end();
    }
    expect(waiters[37]!.frames.length).toBe(1);
  });
});
