// The client library over TLS: a claim and its push handover, mutual TLS
// with a client certificate, and a server certificate the client does not
// trust is refused (no ACQUIRE is ever sent).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { LockClient } from "../../src/client/index.ts";
import { connectNode } from "../../src/client/node-transport.ts";
import { type Certs, hasOpenssl, makeCerts } from "../helpers/certs.ts";
import { startServer } from "../helpers/wire.ts";

if (!hasOpenssl) console.warn("client/tls.test.ts: the openssl command is absent; TLS tests are skipped");

describe.skipIf(!hasOpenssl)("client over TLS", () => {
  let certs: Certs;
  beforeAll(() => {
    certs = makeCerts();
  });
  afterAll(() => certs.remove());

  test("acquire, hold past a lease, and a handover pushed to a waiting TLS client", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    const client = new LockClient({ servers: `127.0.0.1:${server.port}`, tls: { ca: certs.caCert } });
    const first = await client.acquire("tls-lock", { lease: 300 });
    const waiting = client.acquire("tls-lock", { lease: 300 });
    // Held across several leases: heartbeats over TLS keep it.
    await Bun.sleep(900);
    expect(first.signal.aborted).toBe(false);
    await first.release();
    const second = await waiting;
    expect(second.token).toBeGreaterThan(first.token);
    await second.release();
  });

  test("mutual TLS: the client certificate is presented (Bun and node:tls transports)", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey, clientCa: certs.caCert } });
    const tls = { ca: certs.caCert, cert: certs.clientCert, key: certs.clientKey };
    for (const connect of [undefined, connectNode]) {
      const client = new LockClient({ servers: `127.0.0.1:${server.port}`, tls, ...(connect ? { connect } : {}) });
      await using lock = await client.acquire("mtls-lock", { lease: 5000 });
      expect(lock.token).toBeGreaterThan(0n);
    }
  });

  test("a server certificate from an untrusted CA: refused, no session, typed error", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    const client = new LockClient({ servers: `127.0.0.1:${server.port}`, tls: { ca: certs.strangerCert }, reconnectMs: 300 });
    const error = await client.acquire("tls-lock", { lease: 1000 }).then(
      () => null,
      (e: unknown) => e as Error & { code?: string },
    );
    expect(error).not.toBeNull();
    expect(typeof error!.code).toBe("string");
    expect(server.engine.locks.size).toBe(0); // no ACQUIRE ever reached the server
    expect(server.engine.stats.grantsImmediate + server.engine.stats.queued).toBe(0);
  });
});
