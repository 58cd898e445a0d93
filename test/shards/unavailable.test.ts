/**
 * With a server map, the library's SERVER_UNAVAILABLE names the shard whose
 * servers could not be reached, and their addresses: after a map change,
 * "shard gamma at HOST:PORT" says which shard is not up yet.
 */
import { expect, test } from "bun:test";
import { freePort } from "../helpers/ports.ts";
import { LockClient, ServerUnavailableError } from "../../src/client/index.ts";
import { Placement } from "../../src/shard/placement.ts";

test("a claim on a shard whose servers are down fails with SERVER_UNAVAILABLE naming the shard", async () => {
  const three = new Placement(["alpha", "beta", "gamma"]);
  let name = "";
  for (let i = 0; name === ""; i++) if (three.shardOf(`moved/${i}`) === "gamma") name = `moved/${i}`;
  const port = await freePort();
  // alpha's and beta's addresses are never dialled: the name is gamma's.
  const client = new LockClient({ servers: `gen=2;alpha=127.0.0.1:1;beta=127.0.0.1:2;gamma=127.0.0.1:${port}` });
  const error = await client.acquire(name).then(
    (lock) => { void lock.release(); return null; },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ServerUnavailableError);
  const unavailable = error as ServerUnavailableError;
  expect(unavailable.code).toBe("SERVER_UNAVAILABLE");
  expect(unavailable.shard).toBe("gamma");
  expect(unavailable.message).toStartWith(`lock server of shard gamma at 127.0.0.1:${port} unavailable: `);
});

test("without a map the message is as before and names no shard", async () => {
  const port = await freePort();
  const error = await new LockClient({ servers: `127.0.0.1:${port}` }).acquire("plain").catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ServerUnavailableError);
  expect((error as ServerUnavailableError).shard).toBeUndefined();
  expect((error as ServerUnavailableError).message).toStartWith("lock server unavailable: ");
});
