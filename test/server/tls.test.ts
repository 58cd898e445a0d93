// TLS on the protocol listener: works end to end (handover still a push),
// mutual TLS refuses clients without a certificate from the configured CA,
// and a plaintext client gets no lockd frame, only a closed connection.
import { describe, expect, test } from "bun:test";
import { FrameType } from "../../src/protocol/index.ts";
import { hasOpenssl, suiteCerts } from "../helpers/certs.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

if (!hasOpenssl) console.warn("tls.test.ts: the openssl command is absent; TLS tests are skipped");

describe.skipIf(!hasOpenssl)("TLS", () => {
  const certs = suiteCerts();

  test("acquire, heartbeat and a pushed handover over TLS", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    const tls = { ca: certs.caCert, serverName: "127.0.0.1" };
    const a = await WirePeer.claim(server.port, "tls", 60_000, { tls });
    const grant = a.frames[0]!;
    expect(grant.type).toBe(FrameType.ACQUIRED);
    a.heartbeat();
    expect((await a.frame(1)).token).toBe(grant.token);
    const b = await WirePeer.claim(server.port, "tls", 60_000, { tls });
    expect(b.frames[0]!.type).toBe(FrameType.WAITING);
    a.end();
    const push = await b.frame(1);
    expect([push.type, push.flags]).toEqual([FrameType.ACQUIRED, 0]);
    expect(push.token!).toBeGreaterThan(grant.token!);
    b.end();
  });

  test("mutual TLS: a client certificate from the CA is served; none, or one from another CA, is refused", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey, clientCa: certs.caCert } });
    const good = await WirePeer.claim(server.port, "mtls", 60_000, { tls: { ca: certs.caCert, cert: certs.clientCert, key: certs.clientKey } });
    expect(good.frames[0]!.type).toBe(FrameType.ACQUIRED);

    for (const tls of [{ ca: certs.caCert }, { ca: certs.caCert, cert: certs.strangerCert, key: certs.strangerKey }]) {
      const refused = await WirePeer.connect(server.port, "127.0.0.1", tls);
      refused.acquire("mtls", 60_000); // whatever it sends is never read as a frame
      await refused.closed();
      expect(refused.frames).toEqual([]);
    }
    expect(engineOf(server).locks.get("mtls")!.waiting).toBe(0);
    good.heartbeat();
    expect((await good.frame(1)).type).toBe(FrameType.ACQUIRED);
    good.end();
  });

  test("a plaintext client on the TLS port gets no lockd frame, only a closed connection", async () => {
    await using server = startServer({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    const plain = await WirePeer.connect(server.port);
    plain.acquire("plain", 60_000);
    await plain.closed();
    // The TLS stack may answer with its own alert record (type 0x15), which is no lockd frame.
    expect(plain.frames).toEqual([]);
    expect(engineOf(server).sessions.size).toBe(0);
  });
});
