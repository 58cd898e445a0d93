/**
 * The client's semaphores and shared claims: `limit` and `shared` on
 * acquire/withLock, the slot of a grant, LIMIT_MISMATCH, and the strict
 * checks of ACQUIRED (protocol.md section 13), on a manual clock
 * (ClaimMachine) and over sockets against the real server and scripted ones.
 */
import { describe, expect, test } from "bun:test";
import { LimitMismatchError, LockBusyError, LockClient, LockError, LockLostError, LockRequestError, type Connector } from "../../src/client/index.ts";
import { ErrorCode, FLAG_REPLY, FLAG_SLOT, FrameType, OPTION_LIMIT, OPTION_SHARED, encodeAcquire, encodeAcquiredSlot } from "../../src/protocol/index.ts";
import { startServer } from "../helpers/wire.ts";
import { FakeServer, aborted } from "./fake-server.ts";
import { ManualClaim } from "./manual-claim.ts";

const LEASE = 1000;

/** A ManualClaim for a claim with `limit`, its ACQUIRE sent at 0. */
function claim(limit: number): ManualClaim {
  return new ManualClaim({ limit, acquireFrame: encodeAcquire({ name: "m/lock", leaseMs: LEASE, owner: "test", try: false, limit }) }).open();
}

function failure(m: ManualClaim): LockRequestError {
  const ending = m.ending;
  expect(ending?.kind).toBe("failed");
  return (ending as { error: LockRequestError }).error;
}

function loss(m: ManualClaim): LockLostError {
  const ending = m.ending;
  expect(ending?.kind).toBe("lost");
  return (ending as { error: LockLostError }).error;
}

/** ACQUIRED as a reply: token 7 and `body` after the 8 token bytes (a raw frame, for broken ones). */
function rawAcquired(flags: number, tail: number[]): Uint8Array {
  return new Uint8Array([FrameType.ACQUIRED, flags, 0, 8 + tail.length, 0, 0, 0, 0, 0, 0, 0, 7, ...tail]);
}

describe("the slot of a grant (ClaimMachine)", () => {
  test("a semaphore's grant carries its slot; every heartbeat answer with the same token and slot keeps it", () => {
    const m = claim(3);
    m.advance(10);
    m.replySlot(7, 2);
    expect(m.of("granted")).toEqual([{ at: 10, kind: "granted", token: 7n, slot: 2 }]);
    expect(m.machine.slot).toBe(2);
    for (let i = 0; i < 4; i++) {
      const sent = m.sends().length;
      m.advance(m.armedAt);
      expect(m.sends().length).toBe(sent + 1);
      m.advance(m.now + 5);
      m.replySlot(7, 2);
    }
    expect(m.ending).toBeUndefined();
    expect(m.machine.state).toBe("held");
  });

  test("a waiter promoted by push gets the slot the push carries", () => {
    const m = claim(2);
    m.advance(5);
    m.replyWaiting();
    m.advance(50);
    m.pushSlot(11, 1);
    expect(m.of("granted")).toEqual([{ at: 50, kind: "granted", token: 11n, slot: 1 }]);
  });

  test("an exclusive grant has no slot (-1 in the machine)", () => {
    const m = claim(1);
    m.advance(10);
    m.replyGranted(7);
    expect(m.of("granted")).toEqual([{ at: 10, kind: "granted", token: 7n, slot: -1 }]);
  });

  test("a grant that breaks the slot rules ends the claim with PROTOCOL_VIOLATION, not retried", () => {
    const cases: [string, number, Uint8Array, string][] = [
      ["a slot on an exclusive grant", 1, encodeAcquiredSlot(7, 0, FLAG_REPLY), "slot 0 for a claim of limit 1"],
      ["no slot on a semaphore's grant", 2, rawAcquired(FLAG_REPLY, []), "without a slot for a claim of limit 2"],
      ["a slot equal to the limit", 2, encodeAcquiredSlot(7, 2, FLAG_REPLY), "slot 2 for a claim of limit 2"],
      ["a slot far above the limit", 3, encodeAcquiredSlot(7, 0xffff, FLAG_REPLY), "slot 65535 for a claim of limit 3"],
      ["flag SLOT on an 8-byte body", 2, rawAcquired(FLAG_REPLY | FLAG_SLOT, []), "flag SLOT and a 8-byte body"],
      ["flag SLOT on a 9-byte body", 2, rawAcquired(FLAG_REPLY | FLAG_SLOT, [0]), "flag SLOT and a 9-byte body"],
      ["a 10-byte body without flag SLOT", 2, rawAcquired(FLAG_REPLY, [0, 1]), "10-byte body and no flag SLOT"],
      ["a slot in a push to a waiter of limit 1", 1, encodeAcquiredSlot(7, 0, 0), "slot 0 for a claim of limit 1"],
    ];
    for (const [what, limit, frame, says] of cases) {
      const m = claim(limit);
      m.advance(5);
      if (frame[1]! & FLAG_REPLY) m.read(frame);
      else {
        m.replyWaiting();
        m.read(frame);
      }
      const error = failure(m);
      expect(error.code, what).toBe("PROTOCOL_VIOLATION");
      expect(error.message, what).toContain(says);
      expect(m.of("granted"), what).toEqual([]);
      expect(m.of("retry"), what).toEqual([]);
    }
  });

  test("a held semaphore grant whose heartbeat answer changes the slot, drops it, or changes the token is lost (why protocol)", () => {
    const cases: [string, Uint8Array, string][] = [
      ["another slot", encodeAcquiredSlot(7, 0, FLAG_REPLY), "slot changed from 1 to 0"],
      ["no slot", rawAcquired(FLAG_REPLY, []), "without a slot for a claim of limit 2"],
      ["another token, the same slot", encodeAcquiredSlot(8, 1, FLAG_REPLY), "token changed from 7 to 8"],
    ];
    for (const [what, frame, says] of cases) {
      const m = claim(2);
      m.advance(10);
      m.replySlot(7, 1);
      m.advance(m.armedAt); // the first HEARTBEAT
      expect(m.sends()).toHaveLength(1);
      m.advance(m.now + 5);
      m.read(frame);
      const error = loss(m);
      expect(error.why, what).toBe("protocol");
      expect(error.message, what).toContain(says);
    }
  });

  test("LIMIT_MISMATCH ends the claim with LimitMismatchError: class client, the server's message, not retried", () => {
    const m = new ManualClaim({ limit: 3, shared: false, addresses: [{ host: "10.0.0.1", port: 7700 }, { host: "10.0.0.2", port: 7700 }] }).open();
    const said = "this name's live sessions claim it with limit 2 (a semaphore); this claim asked for limit 3 (a semaphore): every session of a name must use the same limit";
    m.error(ErrorCode.LIMIT_MISMATCH, said);
    const error = failure(m) as LimitMismatchError;
    expect(error).toBeInstanceOf(LimitMismatchError);
    expect(error).toBeInstanceOf(LockRequestError);
    expect([error.code, error.class, error.serverCode, error.limit, error.shared, error.serverMessage]).toEqual(["LIMIT_MISMATCH", "client", ErrorCode.LIMIT_MISMATCH, 3, false, said]);
    expect(m.of("retry")).toEqual([]);
    expect(m.of("connect")).toHaveLength(1);
  });
});

/** A connector that fails the test if it is ever used: the claim must be refused before any connection. */
const NEVER: Connector = () => {
  throw new Error("the client connected for a request it should have refused");
};

describe("limit and shared options", () => {
  test("a bad limit, or shared with a limit above 1, is BAD_REQUEST before any connection", async () => {
    const client = new LockClient({ servers: "127.0.0.1:1", connect: NEVER });
    const cases: [string, object, string][] = [
      ["limit 0", { limit: 0 }, "limit must be an integer 1..65535, got 0"],
      ["limit 65536", { limit: 65536 }, "limit must be an integer 1..65535, got 65536"],
      ["limit 2.5", { limit: 2.5 }, "got 2.5"],
      ["limit NaN", { limit: NaN }, "got NaN"],
      ["shared with limit 3", { limit: 3, shared: true }, "a shared claim has limit 1, got limit 3"],
      ["shared not a boolean", { shared: "yes" }, "shared must be true or false"],
    ];
    for (const [what, options, says] of cases) {
      const error = await client.acquire("c/bad", options).then(() => null, (e: unknown) => e);
      expect(error, what).toBeInstanceOf(LockRequestError);
      expect([(error as LockRequestError).code, (error as LockRequestError).class], what).toEqual(["BAD_REQUEST", "client"]);
      expect((error as Error).message, what).toContain(says);
      let ran = false;
      const viaWithLock = await client.withLock("c/bad", () => (ran = true), options).catch((e: unknown) => e);
      expect((viaWithLock as LockRequestError).code, what).toBe("BAD_REQUEST");
      expect(ran, what).toBe(false);
    }
  });

  test("the ACQUIRE's bytes: limit 1 without the LIMIT option (unchanged), limit 3 with it, shared with SHARED", async () => {
    using server = new FakeServer((conn) => conn.socket.write(new Uint8Array([FrameType.ACQUIRED, FLAG_REPLY, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9])));
    const client = new LockClient({ servers: `127.0.0.1:${server.port}`, owner: "o" });
    await (await client.acquire("c/b", { lease: 2000 })).release();
    await (await client.acquire("c/b", { lease: 2000, limit: 1 })).release();
    await (await client.acquire("c/b", { lease: 2000, shared: true })).release();
    // A claim with limit 3 over a server that grants without a slot: sent right, then refused as a violation.
    const error = await client.acquire("c/b", { lease: 2000, limit: 3 }).then(() => null, (e: unknown) => e as LockRequestError);
    expect(error?.code).toBe("PROTOCOL_VIOLATION");
    const bodies = server.conns.map((c) => Array.from(c.frames[0]!.body));
    const exclusive = Array.from(encodeAcquire({ name: "c/b", leaseMs: 2000, owner: "o", try: false }).subarray(4));
    expect(bodies[0]).toEqual(exclusive);
    expect(bodies[1]).toEqual(exclusive);
    expect(bodies[2]).toEqual([exclusive[0]!, OPTION_SHARED, ...exclusive.slice(2)]);
    // version, options LIMIT, lease 2000, limit 3 at body offset 6, name_length at 8, name, owner.
    expect(bodies[3]).toEqual([1, OPTION_LIMIT, 0, 0, 0x07, 0xd0, 0, 3, 0, 3, ...new TextEncoder().encode("c/bo")]);
  });
});

describe("against the real server", () => {
  test("limit 2: two hold at once in slots 0 and 1, a third waits and is promoted into the freed slot with a greater token", async () => {
    await using server = startServer();
    const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
    const a = await client.acquire("c/sem", { lease: 2000, limit: 2 });
    const b = await client.acquire("c/sem", { lease: 2000, limit: 2 });
    expect([a.slot, b.slot]).toEqual([0, 1]);
    expect(b.token > a.token).toBe(true);
    const busy = await client.acquire("c/sem", { lease: 2000, limit: 2, try: true }).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(LockBusyError);
    const third = client.acquire("c/sem", { lease: 2000, limit: 2 });
    await a.release();
    const c = await third;
    expect(c.slot).toBe(0);
    expect(c.token > b.token).toBe(true);
    expect([b.held, c.held]).toEqual([true, true]);
    await b.release();
    await c.release();
  });

  test("withLock passes the slot beside the token; an exclusive lock's slot is null", async () => {
    await using server = startServer();
    const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
    const seen = await client.withLock("c/sem-with", ({ token, slot }) => ({ token, slot }), { lease: 2000, limit: 4 });
    expect(seen.slot).toBe(0);
    expect(seen.token > 0n).toBe(true);
    const exclusive = await client.withLock("c/excl-with", ({ slot }) => slot, { lease: 2000 });
    expect(exclusive).toBeNull();
    await using lock = await client.acquire("c/excl", { lease: 2000 });
    expect(lock.slot).toBeNull();
  });

  test("shared claims hold together; an exclusive one waits for both and then holds alone", async () => {
    await using server = startServer();
    const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
    const r1 = await client.acquire("c/rw", { lease: 2000, shared: true });
    const r2 = await client.acquire("c/rw", { lease: 2000, shared: true });
    expect([r1.slot, r2.slot, r1.held, r2.held]).toEqual([null, null, true, true]);
    const busy = await client.acquire("c/rw", { lease: 2000, try: true }).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(LockBusyError);
    const writer = client.acquire("c/rw", { lease: 2000 });
    await r1.release();
    await r2.release();
    const w = await writer;
    expect(w.token > r2.token).toBe(true);
    const reader = await client.acquire("c/rw", { lease: 2000, shared: true, try: true }).catch((e: unknown) => e);
    expect(reader).toBeInstanceOf(LockBusyError);
    await w.release();
  });

  test("a claim with another limit gets LimitMismatchError naming both limits; the next address is not tried; the holder keeps its lock", async () => {
    await using server = startServer();
    using next = new FakeServer((conn) => conn.socket.write(new Uint8Array([FrameType.ACQUIRED, FLAG_REPLY, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9])));
    const client = new LockClient({ servers: `127.0.0.1:${server.port},127.0.0.1:${next.port}` });
    await using holder = await client.acquire("c/mismatch", { lease: 2000, limit: 2 });
    for (const [options, limit, shared] of [[{ limit: 3 }, 3, false], [{}, 1, false], [{ shared: true }, 1, true]] as const) {
      const error = await client.acquire("c/mismatch", { lease: 2000, ...options }).then(() => null, (e: unknown) => e);
      expect(error).toBeInstanceOf(LimitMismatchError);
      expect(error).toBeInstanceOf(LockError);
      const e = error as LimitMismatchError;
      expect([e.code, e.class, e.serverCode, e.lock, e.limit, e.shared]).toEqual(["LIMIT_MISMATCH", "client", ErrorCode.LIMIT_MISMATCH, "c/mismatch", limit, shared]);
      expect(e.message).toContain("limit 2");
      expect(e.message).toContain(`limit ${limit}`);
    }
    expect(next.conns).toHaveLength(0);
    expect(holder.held).toBe(true);
    expect(holder.slot).toBe(0);
  });

  test("a held semaphore grant whose slot changes is lost: the signal aborts with why protocol", async () => {
    let answers = 0;
    using server = new FakeServer((conn) => conn.socket.write(encodeAcquiredSlot(9, answers++ === 0 ? 0 : 1, FLAG_REPLY)));
    const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
    const lock = await client.acquire("c/slot-change", { lease: 400, limit: 2 });
    expect([lock.token, lock.slot]).toEqual([9n, 0]);
    await aborted(lock.signal, 5000);
    const reason = lock.signal.reason as LockLostError;
    expect([reason.why, reason.class]).toEqual(["protocol", "lock"]);
    expect(reason.message).toContain("slot changed from 0 to 1");
    await server.until(() => server.conns[0]!.closed, 5000, "the client closing the connection");
  });
});
