// The client library over TLS: a claim and its push handover, mutual TLS
// with a client certificate, and a server certificate the client does not
// trust is refused (no ACQUIRE is ever sent).
import { describe, expect, test } from "bun:test";
import { LockClient, ServerUnavailableError } from "../../src/client/index.ts";
import { connectNode } from "../../src/client/node-transport.ts";
import { hasOpenssl, suiteCerts } from "../helpers/certs.ts";
import { startServer } from "../helpers/wire.ts";
import { eventually } from "./fake-server.ts";
import { engineOf } from "../helpers/engine.ts";

if (!hasOpenssl) console.warn("client/tls.test.ts: the openssl command is absent; TLS tests are skipped");

describe.skipIf(!hasOpenssl)("client over TLS", () => {
  const certs = suiteCerts();

  test("acquire, hold past a lease, and a handover pushed to a waiting TLS client", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    const client = new LockClient({ servers: `127.0.0.1:${server.port}`, tls: { ca: certs.caCert } });
    // 1.5 s, not shorter: the client rightly gives a lock up when this process stalls for
    // more than ~0.55 x lease, and a loaded 2-core machine stalls it 100-300 ms now and then.
    const lease = 1500;
    const first = await client.acquire("tls-lock", { lease });
    const waiting = client.acquire("tls-lock", { lease });
    // Held past a lease: heartbeats over TLS keep it (12 heartbeats of two sessions at lease/4: 1.5 leases each).
    await eventually(() => engineOf(server).stats.heartbeats >= 12 || first.signal.aborted, 15_000, "12 heartbeats over TLS");
    expect({ aborted: first.signal.aborted, reason: String(first.signal.reason ?? "") }).toEqual({ aborted: false, reason: "" });
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
    expect(engineOf(server).locks.size).toBe(0); // no ACQUIRE ever reached the server
    expect(engineOf(server).stats.grantsImmediate + engineOf(server).stats.queued).toBe(0);
  });

  /** The error of a claim that cannot succeed, with its TLS diagnosis. */
  async function refused(client: LockClient): Promise<ServerUnavailableError> {
    const error = await client.acquire("tls-lock", { lease: 60_000 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ServerUnavailableError);
    return error as ServerUnavailableError;
  }

  test("a plaintext client on the TLS port is told the server speaks TLS (not 'unknown frame type 0x15')", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    for (const connect of [undefined, connectNode]) {
      const error = await refused(new LockClient({ servers: `127.0.0.1:${server.port}`, ...(connect ? { connect } : {}) }));
      expect(error.tls?.kind).toBe("server-speaks-tls");
      expect(error.message).toContain(`the server at 127.0.0.1:${server.port} speaks TLS`);
      expect(error.message).toContain("tls option");
      expect(error.message).not.toContain("frame type");
    }
  });

  test("an untrusted certificate names itself on both transports (Bun said 'the server closed the connection')", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    for (const connect of [undefined, connectNode]) {
      const error = await refused(new LockClient({ servers: `127.0.0.1:${server.port}`, tls: { ca: certs.strangerCert }, ...(connect ? { connect } : {}) }));
      expect(error.tls?.kind).toBe("untrusted");
      expect(error.message).toContain("does not trust");
      expect(error.message).toContain("unable to verify");
      expect(error.message).toContain("tls.ca");
    }
  });

  test("tls: {} is TLS with the system CAs: an untrusted certificate fails the connect at once, not at the connect timeout", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    // With a 60 s lease the connect timeout is 48 s, past this test's limit: only a prompt failure passes.
    const error = await refused(new LockClient({ servers: `127.0.0.1:${server.port}`, tls: {} }));
    expect(error.tls?.kind).toBe("untrusted");
  });

  test("a TLS client on a plaintext port is told the server does not speak TLS", async () => {
    await using server = startServer();
    for (const connect of [undefined, connectNode]) {
      const error = await refused(new LockClient({ servers: `127.0.0.1:${server.port}`, tls: { ca: certs.caCert }, ...(connect ? { connect } : {}) }));
      expect(error.tls?.kind).toBe("server-plaintext");
      expect(error.message).toContain("does not speak TLS");
    }
    expect(engineOf(server).locks.size).toBe(0);
  });

  test("a TLS problem on one address of a list does not stop the claim: the next address grants", async () => {
    await using tlsServer = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    await using plain = startServer();
    const client = new LockClient({ servers: [`127.0.0.1:${tlsServer.port}`, `127.0.0.1:${plain.port}`] });
    await using lock = await client.acquire("tls-list", { lease: 5000 });
    expect(lock.token).toBeGreaterThan(0n);
  });

  test("mutual TLS without a client certificate says so (the server's alert, on both transports)", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey, clientCa: certs.caCert } });
    for (const connect of [undefined, connectNode]) {
      const error = await refused(new LockClient({ servers: `127.0.0.1:${server.port}`, tls: { ca: certs.caCert }, ...(connect ? { connect } : {}) }));
      expect(error.tls?.kind).toBe("client-certificate");
      expect(error.message).toContain("requires a client certificate");
      expect(error.message).toContain("tls.cert and tls.key");
    }
    expect(engineOf(server).locks.size).toBe(0);
  });
});
