/**
 * Address lists and failover, client side: the next address at once on a
 * refusal, SHUTTING_DOWN or a broken connection of a claim not held yet; a
 * held lock that is lost stays lost (never re-acquired behind the caller's
 * back); retryFirstConnect waits out a server that is not up yet.
 */
import { expect, test } from "bun:test";
import { LockClient, LockLostError, ServerUnavailableError, WaitTimeoutError, type Address, type Connector } from "../../src/client/index.ts";
import { connectBun } from "../../src/client/bun-transport.ts";
import { ErrorCode, FrameType, WAITING_REPLY_FRAME } from "../../src/protocol/index.ts";
import { Wakeup } from "../helpers/events.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { freePort } from "../helpers/ports.ts";
import { FakeServer } from "./fake-server.ts";
import { engineOf } from "../helpers/engine.ts";

/** A connector that records the port of every connect, and wakes on each WAITING a connection receives. */
function recorder(): { connect: Connector; ports: number[]; waiting: (n: number) => Promise<void>; connects: (n: number) => Promise<void> } {
  const ports: number[] = [];
  const events = new Wakeup();
  let waitings = 0;
  const connect: Connector = (address: Address, tls, handlers) => {
    ports.push(address.port);
    events.wake();
    return connectBun(address, tls, {
      data(chunk) {
        if (chunk[0] === FrameType.WAITING) {
          waitings++;
          events.wake();
        }
        handlers.data(chunk);
      },
      closed: (error) => handlers.closed(error),
    });
  };
  return {
    connect,
    ports,
    waiting: (n) => events.until(() => waitings >= n, 10_000, () => `${n} WAITING frames, saw ${waitings}`).then(() => {}),
    connects: (n) => events.until(() => ports.length >= n, 10_000, () => `${n} connects, saw ${JSON.stringify(ports)}`).then(() => {}),
  };
}

test("a list whose first address refuses: the second, a real server, grants", async () => {
  await using server = startServer();
  const refusing = await freePort();
  const tap = recorder();
  const client = new LockClient({ servers: `127.0.0.1:${refusing},127.0.0.1:${server.port}`, connect: tap.connect });
  await using lock = await client.acquire("f/refused", { lease: 5000 });
  expect(lock.token).toBeGreaterThan(0n);
  expect(tap.ports).toEqual([refusing, server.port]);
});

test("SHUTTING_DOWN while waiting: the next server of the list is asked at once, not the one shutting down", async () => {
  const first = startServer();
  try {
    await using second = startServer();
    const owner = await WirePeer.claim(first.port, "f/failover");
    const tap = recorder();
    const client = new LockClient({ servers: [`127.0.0.1:${first.port}`, `127.0.0.1:${second.port}`], connect: tap.connect });
    const pending = client.acquire("f/failover", { lease: 5000, wait: 15_000 });
    await tap.waiting(1);
    await first.stop(); // SHUTTING_DOWN to the owner and the waiter
    const lock = await pending;
    expect(tap.ports).toEqual([first.port, second.port]);
    expect(engineOf(second).sessions.size).toBe(1);
    await lock.release();
  } finally {
    await first.stop();
  }
});

test("a broken connection while waiting: the next address, then the one after", async () => {
  // A answers WAITING and then breaks the connection; B is down; C grants.
  using a = new FakeServer((conn, frame) => {
    if (frame.type !== FrameType.ACQUIRE) return;
    conn.socket.write(WAITING_REPLY_FRAME);
    conn.socket.terminate();
  });
  await using c = startServer();
  const b = await freePort();
  const tap = recorder();
  const client = new LockClient({ servers: [`127.0.0.1:${a.port}`, `127.0.0.1:${b}`, `127.0.0.1:${c.port}`], connect: tap.connect });
  await using lock = await client.acquire("f/broken", { lease: 5000, wait: 15_000 });
  expect(tap.ports).toEqual([a.port, b, c.port]);
  expect(lock.token).toBeGreaterThan(0n);
});

test("a held lock whose server shuts down is lost, and the client does not re-acquire it on the next server", async () => {
  const first = startServer();
  try {
    await using second = startServer();
    const tap = recorder();
    const client = new LockClient({ servers: [`127.0.0.1:${first.port}`, `127.0.0.1:${second.port}`], connect: tap.connect });
    const lock = await client.acquire("f/held", { lease: 5000 });
    const lost = new Promise<unknown>((resolve) => lock.signal.addEventListener("abort", () => resolve(lock.signal.reason), { once: true }));
    await first.stop();
    const reason = await lost;
    expect(reason).toBeInstanceOf(LockLostError);
    expect((reason as LockLostError).serverCode).toBe(ErrorCode.SHUTTING_DOWN);
    expect(lock.held).toBe(false);
    // The caller decides: a new claim goes to the next server; the old one never did.
    expect(tap.ports).toEqual([first.port]);
    await using again = await client.acquire("f/held", { lease: 5000 });
    expect(tap.ports).toEqual([first.port, first.port, second.port]);
    expect(again.token).toBeGreaterThan(0n);
  } finally {
    await first.stop();
  }
});

test("retryFirstConnect: a server that is not up yet is waited for; one address without a wait, a TRY, or false: ServerUnavailableError at once", async () => {
  const port = await freePort();
  const plain = new LockClient({ servers: `127.0.0.1:${port}` });
  expect(await plain.acquire("f/late").then(() => null, (e: unknown) => e)).toBeInstanceOf(ServerUnavailableError);
  expect(await plain.acquire("f/late", { wait: 20_000, try: true }).then(() => null, (e: unknown) => e)).toBeInstanceOf(ServerUnavailableError);
  const optOut = new LockClient({ servers: `127.0.0.1:${port}`, retryFirstConnect: false });
  expect(await optOut.acquire("f/late", { wait: 20_000 }).then(() => null, (e: unknown) => e)).toBeInstanceOf(ServerUnavailableError);

  const tap = recorder();
  const client = new LockClient({ servers: `127.0.0.1:${port}`, retryFirstConnect: true, reconnectMs: 15_000, connect: tap.connect });
  const retries: string[] = [];
  const pending = client.acquire("f/late", { lease: 5000, onRetry: (detail) => retries.push(detail) });
  await tap.connects(2); // refused at least once, and trying again
  await using server = startServer({ port });
  await using lock = await pending;
  expect(lock.token).toBeGreaterThan(0n);
  expect(retries[0]).toContain(`cannot connect to 127.0.0.1:${port}`);
});

test("by default a claim with a wait waits out a server that refuses connections (a restart, a failover)", async () => {
  const port = await freePort();
  const tap = recorder();
  const client = new LockClient({ servers: `127.0.0.1:${port}`, connect: tap.connect });
  const backoffs: number[] = [];
  const pending = client.acquire("f/late-default", { lease: 5000, wait: 20_000, onRetry: (_detail, delay, backoff) => backoff && backoffs.push(delay) });
  await tap.connects(2); // refused at least once, and trying again
  await using server = startServer({ port });
  await using lock = await pending;
  expect(lock.token).toBeGreaterThan(0n);
  expect(backoffs.length).toBeGreaterThan(0);
});

test("a wait that runs out while no server answers says the servers were unavailable", async () => {
  const port = await freePort();
  const client = new LockClient({ servers: `127.0.0.1:${port}` }); // a wait: retried by default
  const error = await client.acquire("f/down", { wait: 200 }).then(() => null, (e: unknown) => e);
  expect(error).toBeInstanceOf(WaitTimeoutError);
  expect((error as WaitTimeoutError).unavailable).toContain(`cannot connect to 127.0.0.1:${port}`);
  expect((error as WaitTimeoutError).message).toContain("lock server unavailable");
});

test("an HTTP port (lockd's ops server, say) is named as such, not as 'unknown frame type 0x48'", async () => {
  using http = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("no") });
  const client = new LockClient({ servers: `127.0.0.1:${http.port}` });
  const error = await client.acquire("f/http").then(() => null, (e: unknown) => e as Error);
  expect(error?.message).toContain(`the server at 127.0.0.1:${http.port} answered in HTTP`);
  expect(error?.message).toContain("ops server");
  expect(error?.message).not.toContain("frame type");
});
