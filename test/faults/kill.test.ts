// An owner process (the client library) killed with SIGKILL: the kernel
// closes its socket, and the waiter is granted at once, long before the
// owner's lease could have run out.
import { expect, test } from "bun:test";
import { LockClient } from "../../src/client/index.ts";
import { CLOSED_BY_PEER } from "../../src/core/session.ts";
import { startServer } from "../helpers/wire.ts";
import { spawnOwner, waitFor } from "./child.ts";
import { engineOf } from "../helpers/engine.ts";

const OWNER_LEASE = 60_000; // only the closed socket can explain a grant within the test's bounds

test("owner SIGKILLed: the waiter is granted promptly, with a larger token", async () => {
  await using server = startServer();
  await using owner = spawnOwner(`127.0.0.1:${server.port}`, "fault/kill", OWNER_LEASE);
  const held = await owner.event("granted");
  const ownerToken = BigInt(held.token);
  const session = [...engineOf(server).sessions.values()].find((s) => s.owner === `fault-owner/pid-${owner.pid}`)!;
  expect(session.token).toBe(Number(ownerToken));

  const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
  const waiting = client.acquire("fault/kill", { lease: 5000, wait: 20_000 });
  // The waiter is queued behind the owner before the kill.
  await waitFor(() => engineOf(server).sessions.size === 2 && [...engineOf(server).sessions.values()].some((s) => s !== session && s.lock !== null));

  const killedAt = performance.now();
  owner.proc.kill("SIGKILL");
  const lock = await waiting;
  const grantedAt = performance.now();
  try {
    expect(lock.token).toBeGreaterThan(ownerToken);
    expect(grantedAt - killedAt).toBeLessThan(10_000); // generous; the lease is 60 s
    expect(session.endReason).toBe(CLOSED_BY_PEER); // the peer closed: no lease expiry, no error
    expect(await owner.exited).not.toBe(0);
  } finally {
    await lock.release();
  }
}, 30_000);
