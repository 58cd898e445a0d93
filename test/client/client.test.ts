/** The client against the real in-process server, over real sockets. */
import { describe, expect, test } from "bun:test";
import { freePort } from "../helpers/ports.ts";
import {
  LockAbortedError,
  LockBusyError,
  LockClient,
  LockDelayedError,
  LockError,
  LockLostError,
  LockRequestError,
  ServerUnavailableError,
  WaitTimeoutError,
  type Connector,
} from "../../src/client/index.ts";
import { connectBun } from "../../src/client/bun-transport.ts";
import { ErrorCode, FrameType, OPTION_TRY, encodeError } from "../../src/protocol/index.ts";
import { LockServer } from "../../src/server/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { FakeServer, aborted, eventually } from "./fake-server.ts";
import { engineOf } from "../helpers/engine.ts";

/** A new server on the port of a stopped one: a restart. */
function restartOn(port: number): LockServer & AsyncDisposable {
  const server = new LockServer({ hostname: "127.0.0.1", port, ioTimeoutMs: 5000 });
  return Object.assign(server, { [Symbol.asyncDispose]: () => server.stop() });
}

function clientFor(port: number, extra: ConstructorParameters<typeof LockClient>[0] = {}): LockClient {
  return new LockClient({ servers: `127.0.0.1:${port}`, ...extra });
}

/** A connector that reports the first WAITING frame each connection receives. */
function tapWaiting(): { connect: Connector; waiting: () => Promise<void> } {
  let waiters: (() => void)[] = [];
  let seen = 0;
  let consumed = 0;
  const connect: Connector = (address, tls, events) =>
    connectBun(address, tls, {
      data(chunk) {
        if (chunk[0] === FrameType.WAITING) {
          seen++;
          for (const w of waiters) w();
          waiters = [];
        }
        events.data(chunk);
      },
      closed: (error) => events.closed(error),
    });
  return {
    connect,
    async waiting() {
      const want = ++consumed;
      if (seen < want) await new Promise<void>((resolve) => waiters.push(resolve));
      while (seen < want) await new Promise<void>((resolve) => waiters.push(resolve));
    },
  };
}

describe("acquire and release", () => {
  test("acquire resolves with a token and a live signal; release hands over; release twice is harmless", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    const lock = await client.acquire("c/basic", { lease: 5000 });
    expect(typeof lock.token).toBe("bigint");
    expect(lock.token).toBeGreaterThan(0n);
    expect(lock.signal.aborted).toBe(false);
    expect(lock.held).toBe(true);
    const busy = await client.acquire("c/basic", { try: true }).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(LockBusyError);
    expect((busy as LockBusyError).code).toBe("LOCK_BUSY");
    expect((busy as LockBusyError).class).toBe("lock");
    await lock.release();
    await lock.release();
    expect(lock.signal.aborted).toBe(true);
    expect((lock.signal.reason as LockLostError).why).toBe("released");
    const next = await client.acquire("c/basic", { try: true });
    expect(next.token).toBeGreaterThan(lock.token);
    await next.release();
    await eventually(() => server.connectionCount === 0, 5000, "all connections closed");
  });

  test("await using releases at the end of the scope", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    let signal: AbortSignal;
    {
      await using lock = await client.acquire("c/using");
      signal = lock.signal;
      expect(engineOf(server).sessions.size).toBe(1);
    }
    expect(signal.aborted).toBe(true);
    // The next try succeeds: the server saw the close.
    await using again = await client.acquire("c/using", { try: true });
    expect(again.held).toBe(true);
  });

  test("owner label reaches the server; a name the protocol forbids is a client error before any I/O", async () => {
    await using server = startServer();
    const client = clientFor(server.port, { owner: "tests/owner" });
    await using lock = await client.acquire("c/owner");
    const session = [...engineOf(server).sessions.values()][0]!;
    expect(session.owner).toBe("tests/owner");
    const bad = await client.acquire("").catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(LockRequestError);
    expect((bad as LockRequestError).class).toBe("client");
    // A control character is refused by the server: BAD_REQUEST, class client.
    const refused = await client.acquire("c/\u0001").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockRequestError);
    expect((refused as LockRequestError).code).toBe("BAD_REQUEST");
    expect((refused as LockRequestError).serverCode).toBe(0x21);
    expect(lock.held).toBe(true);
  });

  test("server unreachable: ServerUnavailableError, class server", async () => {
    const server = startServer();
    const port = server.port;
    await server.stop();
    const error = await clientFor(port).acquire("c/nobody").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerUnavailableError);
    expect((error as ServerUnavailableError).code).toBe("SERVER_UNAVAILABLE");
    expect((error as ServerUnavailableError).class).toBe("server");
    expect((error as ServerUnavailableError).cause).toBeDefined();
  });

  test("several addresses: an unreachable first one is skipped", async () => {
    const deadPort = await freePort();
    await using server = startServer();
    const client = new LockClient({ servers: [`127.0.0.1:${deadPort}`, `127.0.0.1:${server.port}`] });
    await using lock = await client.acquire("c/failover");
    expect(lock.held).toBe(true);
  });
});

describe("waiting", () => {
  test("promotion is a push: a waiter is granted without sending a heartbeat", async () => {
    await using server = startServer();
    const owner = await WirePeer.claim(server.port, "c/push");
    const first = owner.frames[0]!;
    const tap = tapWaiting();
    // A 60 s lease: the first heartbeat would be 15 s away.
    const pending = clientFor(server.port, { connect: tap.connect }).acquire("c/push", { lease: 60_000 });
    await tap.waiting();
    expect(engineOf(server).stats.heartbeats).toBe(0);
    owner.end();
    const lock = await pending;
    expect(lock.token).toBeGreaterThan(first.token!);
    expect(engineOf(server).stats.heartbeats).toBe(0);
    await lock.release();
  });

  test("heartbeats keep a waiter and then a holder alive past the lease", async () => {
    await using server = startServer();
    const owner = await WirePeer.claim(server.port, "c/long-wait");
    // Not shorter: the client rightly gives a claim up when this process stalls for more
    // than ~0.55 x lease, and a loaded 2-core machine stalls it 100-300 ms now and then.
    const lease = 1500;
    const pending = clientFor(server.port).acquire("c/long-wait", { lease });
    // 6 heartbeats at ~lease/4: one and a half leases of waiting.
    await eventually(() => engineOf(server).stats.heartbeats >= 6, 15_000, "6 heartbeats while waiting");
    owner.end();
    const lock = await pending;
    const before = engineOf(server).stats.heartbeats;
    await eventually(() => engineOf(server).stats.heartbeats >= before + 6 || !lock.held, 15_000, "6 heartbeats while holding");
    expect({ held: lock.held, reason: String(lock.signal.reason ?? "") }).toEqual({ held: true, reason: "" });
    expect(engineOf(server).stats.ends[ErrorCode.LEASE_EXPIRED] ?? 0).toBe(0); // nothing expired
    await lock.release();
  });

  test("wait gives up with WaitTimeoutError and closes its connection", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    await using held = await client.acquire("c/wait");
    const started = performance.now();
    const error = await client.acquire("c/wait", { wait: 200 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WaitTimeoutError);
    expect((error as WaitTimeoutError).code).toBe("WAIT_TIMEOUT");
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    await eventually(() => engineOf(server).sessions.size === 1, 5000, "the waiter's session to end");
    expect(held.held).toBe(true);
  });

  test("wait is satisfied when the lock frees in time", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    const held = await client.acquire("c/wait-ok");
    const tap = tapWaiting();
    const pending = clientFor(server.port, { connect: tap.connect }).acquire("c/wait-ok", { wait: 10_000 });
    await tap.waiting();
    await held.release();
    await using lock = await pending;
    expect(lock.token).toBeGreaterThan(held.token);
  });

  test("an outer AbortSignal cancels the wait without leaking the connection", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    await using held = await client.acquire("c/abort");
    const tap = tapWaiting();
    const controller = new AbortController();
    const pending = clientFor(server.port, { connect: tap.connect }).acquire("c/abort", { signal: controller.signal });
    await tap.waiting();
    expect(server.connectionCount).toBe(2);
    controller.abort(new Error("user gave up"));
    const error = await pending.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockAbortedError);
    expect(((error as LockAbortedError).cause as Error).message).toBe("user gave up");
    await eventually(() => server.connectionCount === 1, 5000, "the waiter's connection to close");
    // An already aborted signal never connects.
    const early = await client.acquire("c/abort", { signal: AbortSignal.abort() }).catch((e: unknown) => e);
    expect(early).toBeInstanceOf(LockAbortedError);
    expect(server.connectionCount).toBe(1);
  });

  test("an outer AbortSignal ends holding: the lock's signal aborts with why 'aborted'", async () => {
    await using server = startServer();
    const controller = new AbortController();
    const lock = await clientFor(server.port).acquire("c/abort-held", { signal: controller.signal });
    controller.abort();
    expect(lock.signal.aborted).toBe(true);
    expect((lock.signal.reason as LockLostError).why).toBe("aborted");
    await eventually(() => server.connectionCount === 0, 5000, "close");
  });
});

describe("SHUTTING_DOWN", () => {
  test("while waiting: the claim reconnects to the restarted server and gets the lock", async () => {
    // A port outside the ephemeral range: while it is down, no other listener and no
    // reconnecting client's source port can take it (restartOn binds it again).
    const first = startServer({ port: await freePort() });
    const port = first.port;
    const owner = await WirePeer.claim(port, "c/restart");
    const tap = tapWaiting();
    const pending = clientFor(port, { connect: tap.connect }).acquire("c/restart", { lease: 5000, wait: 15_000 });
    await tap.waiting();
    await first.stop();
    await owner.closed();
    await using second = restartOn(port);
    const lock = await pending;
    expect(lock.held).toBe(true);
    expect(engineOf(second).sessions.size).toBe(1);
    await lock.release();
  });

  test("while holding: the signal aborts with a typed error and withLock does not re-run the work", async () => {
    const first = startServer({ port: await freePort() }); // restartOn binds it again, as above
    const port = first.port;
    const client = clientFor(port);
    let runs = 0;
    let signalInside: AbortSignal | undefined;
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const result = client
      .withLock("c/held-shutdown", async ({ signal }) => {
        runs++;
        signalInside = signal;
        started();
        await aborted(signal, 15_000);
        return "finished";
      })
      .catch((e: unknown) => e);
    await running;
    await first.stop();
    const error = await result;
    expect(error).toBeInstanceOf(LockLostError);
    const lost = error as LockLostError;
    expect(lost.code).toBe("LOCK_LOST");
    expect(lost.why).toBe("server-error");
    expect(lost.serverCode).toBe(0x01);
    expect(lost.class).toBe("server");
    expect(signalInside!.aborted).toBe(true);
    expect(signalInside!.reason).toBe(lost);
    // A server comes back on the same port: nothing re-runs the work on its own.
    await using second = restartOn(port);
    await Bun.sleep(300); // give a (wrong) silent retry the chance to happen
    expect(runs).toBe(1);
    expect(engineOf(second).sessions.size).toBe(0);
    // And it had the chance: the server was there, and the lock free (machine.test.ts checks the rule itself).
    await using probe = await client.acquire("c/held-shutdown", { try: true });
    expect(probe.token).toBeGreaterThan(0n);
    expect(runs).toBe(1);
  });

  test("acquire while holding: the lock's signal aborts on SHUTTING_DOWN, reason LockLostError", async () => {
    const server = startServer();
    const lock = await clientFor(server.port).acquire("c/held-signal");
    await server.stop();
    await aborted(lock.signal, 5000);
    expect((lock.signal.reason as LockLostError).serverCode).toBe(0x01);
    await lock.release();
  });
});

describe("OVERLOADED", () => {
  test("a claim refused with OVERLOADED retries with backoff and gets the lock once there is room", async () => {
    await using server = startServer({ maxSessions: 1 });
    const owner = await WirePeer.claim(server.port, "c/overloaded-other");
    const pending = clientFor(server.port).acquire("c/overloaded", { wait: 10_000 });
    // Refused at least once: the server counts sessions it ended with OVERLOADED.
    await eventually(() => engineOf(server).stats.ends[ErrorCode.OVERLOADED]! >= 1, 5000, "an OVERLOADED refusal");
    owner.end();
    const lock = await pending;
    expect(lock.held).toBe(true);
    await lock.release();
  });
});

describe("withLock", () => {
  test("runs fn with the token and signal, returns its result, then releases", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    const out = await client.withLock("c/with", async ({ token, signal }) => {
      expect(signal.aborted).toBe(false);
      expect(engineOf(server).sessions.size).toBe(1);
      return token;
    });
    expect(typeof out).toBe("bigint");
    await eventually(() => engineOf(server).sessions.size === 0, 5000, "release");
  });

  test("an error from fn propagates and the lock is released", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    const error = await client
      .withLock("c/with-throw", () => {
        throw new Error("boom");
      })
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe("boom");
    await using again = await client.acquire("c/with-throw", { try: true });
    expect(again.held).toBe(true);
  });

  test("a lost lock rejects withLock at once even if fn ignores its signal", async () => {
    const server = startServer();
    try {
      let entered!: () => void;
      const inside = new Promise<void>((resolve) => (entered = resolve));
      const result = clientFor(server.port)
        .withLock("c/with-stubborn", () => {
          entered();
          return new Promise<never>(() => {}); // never settles, never looks at the signal
        })
        .catch((e: unknown) => e);
      await inside;
      void server.stop();
      const error = await result;
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).why).toBe("server-error");
    } finally {
      await server.stop();
    }
  });

  test("try on a held lock rejects with LockBusyError without running fn", async () => {
    await using server = startServer();
    const client = clientFor(server.port);
    await using held = await client.acquire("c/with-busy");
    let ran = false;
    const error = await client.withLock("c/with-busy", () => (ran = true), { try: true }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockBusyError);
    expect(ran).toBe(false);
    expect(held.held).toBe(true);
  });
});

test("a waiting claim whose lease expired (a stalled process) claims again and is granted", async () => {
  let connections = 0;
  using server = new FakeServer((conn, frame) => {
    if (frame.type !== FrameType.ACQUIRE) {
      conn.socket.write(new Uint8Array([FrameType.ACQUIRED, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9]));
      return;
    }
    connections++;
    if (connections === 1) {
      // Queued, then expired: as if the client had been stopped for a whole lease.
      conn.socket.write(new Uint8Array([FrameType.WAITING, 1, 0, 0]));
      conn.socket.end(new Uint8Array([FrameType.ERROR, 0, 0, 1, ErrorCode.LEASE_EXPIRED]));
    } else {
      conn.socket.write(new Uint8Array([FrameType.ACQUIRED, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9]));
    }
  });
  const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
  await using lock = await client.acquire("requeue", { lease: 2000, wait: 10_000 });
  expect(lock.token).toBe(9n);
  expect(connections).toBe(2);
});

test("a waiting claim that is KICKED is not retried: the operator's decision stands", async () => {
  using server = new FakeServer((conn, frame) => {
    if (frame.type !== FrameType.ACQUIRE) return;
    conn.socket.write(new Uint8Array([FrameType.WAITING, 1, 0, 0]));
    conn.socket.end(new Uint8Array([FrameType.ERROR, 0, 0, 1, ErrorCode.KICKED]));
  });
  const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
  const error = await client.acquire("kicked", { lease: 2000 }).then(() => null, (e: unknown) => e as { code: string });
  expect(error?.code).toBe("KICKED");
  expect(server.conns.length).toBe(1);
});

test("a try answered with LOCK_DELAYED rejects with LockDelayedError, the server's message in it; the next address is not tried", async () => {
  const message = "lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another 1800 ms";
  using delayed = new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE) conn.socket.end(encodeError(ErrorCode.LOCK_DELAYED, message));
  });
  using next = new FakeServer((conn) => conn.socket.write(new Uint8Array([FrameType.ACQUIRED, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9])));
  const client = new LockClient({ servers: `127.0.0.1:${delayed.port},127.0.0.1:${next.port}` });
  const error = await client.acquire("c/delayed", { lease: 2000, try: true }).then(() => null, (e: unknown) => e);
  expect(error).toBeInstanceOf(LockDelayedError);
  expect(error).toBeInstanceOf(LockError);
  const e = error as LockDelayedError;
  expect([e.code, e.class, e.lock, e.serverMessage]).toEqual(["LOCK_DELAYED", "lock", "c/delayed", message]);
  expect(e.message).toContain("no grant for another 1800 ms");
  // The claim was a TRY (options bit 0), and it ended there: one connection, nothing at the next address.
  expect(delayed.conns.map((c) => c.frames[0]!.body[1]! & OPTION_TRY)).toEqual([OPTION_TRY]);
  expect(next.conns).toHaveLength(0);
  // withLock: the same error, fn never runs.
  let ran = false;
  const viaWithLock = await client.withLock("c/delayed", () => (ran = true), { lease: 2000, try: true }).catch((x: unknown) => x);
  expect(viaWithLock).toBeInstanceOf(LockDelayedError);
  expect(ran).toBe(false);
});
