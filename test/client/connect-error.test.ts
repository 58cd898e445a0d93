// A connect that fails says what happened in plain words and where: Bun's
// own message for a refused connect is only "Failed to connect".
import { expect, test } from "bun:test";
import { LockClient, ServerUnavailableError } from "../../src/client/index.ts";
import { connectBun } from "../../src/client/bun-transport.ts";
import { connectNode } from "../../src/client/node-transport.ts";
import { networkErrorText } from "../../src/client/transport.ts";
import { freePort } from "../helpers/ports.ts";

test("a closed port on 127.0.0.1 is 'connection refused' with the address, over Bun.connect and node:net alike", async () => {
  const port = await freePort();
  for (const [transport, connect] of [["bun", connectBun], ["node", connectNode]] as const) {
    const client = new LockClient({ servers: `127.0.0.1:${port}`, retryFirstConnect: false, connect });
    const error = await client.acquire("connect/refused").then(() => null, (e: unknown) => e);
    expect({ transport, error }).toEqual({ transport, error: expect.any(ServerUnavailableError) });
    expect({ transport, message: (error as Error).message }).toEqual({
      transport,
      message: `lock server unavailable: cannot connect to 127.0.0.1:${port}: connection refused (ECONNREFUSED)`,
    });
  }
});

test("errno codes get their plain meaning; other errors keep their message, with the code when it lacks one", () => {
  const errno = (code: string, message = "Failed to connect") => Object.assign(new Error(message), { code });
  expect(networkErrorText(errno("ECONNREFUSED"))).toBe("connection refused (ECONNREFUSED)");
  expect(networkErrorText(errno("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:1"))).toBe("connection refused (ECONNREFUSED)");
  expect(networkErrorText(errno("ETIMEDOUT"))).toBe("connection timed out (ETIMEDOUT)");
  expect(networkErrorText(errno("EHOSTUNREACH"))).toBe("host unreachable (EHOSTUNREACH)");
  expect(networkErrorText(errno("ENOTFOUND", "getaddrinfo ENOTFOUND db.invalid"))).toBe("name not found (ENOTFOUND)");
  expect(networkErrorText(errno("ECONNRESET"))).toBe("connection reset (ECONNRESET)");
  expect(networkErrorText(errno("EWHATEVER"))).toBe("Failed to connect (EWHATEVER)");
  expect(networkErrorText(errno("EWHATEVER", "it went EWHATEVER"))).toBe("it went EWHATEVER");
  expect(networkErrorText(new Error("ECONNREFUSED"))).toBe("ECONNREFUSED");
  expect(networkErrorText("gone")).toBe("gone");
});
