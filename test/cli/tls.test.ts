// TLS from the command line: `lockd serve` with mutual TLS and an HTTPS ops
// server, `lockd run` with a client certificate, `lockd status --ops-ca`.
import { describe, expect, test } from "bun:test";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";
import { join } from "node:path";
import { hasOpenssl, suiteCerts } from "../helpers/certs.ts";

if (!hasOpenssl) console.warn("cli/tls.test.ts: the openssl command is absent; TLS tests are skipped");

describe.skipIf(!hasOpenssl)("TLS flags", () => {
  const certs = suiteCerts();

  test("serve with mutual TLS and HTTPS ops; run with a client certificate; status over HTTPS", async () => {
    const p = certs.paths;
    await using server = ChildServer.spawn([
      "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s",
      "--tls-cert", p.serverCert, "--tls-key", p.serverKey, "--tls-client-ca", p.caCert,
      "--ops-tls-cert", p.serverCert, "--ops-tls-key", p.serverKey,
    ]);
    const start = await server.event("server.listening");
    expect([start.tls, start.opsTls]).toEqual(["mutual", "on"]);
    const { listenPort, opsPort } = await server.addresses();
    const printToken = [process.execPath, "-e", "console.log('token=' + process.env.LOCKD_TOKEN)"];

    const ok = await runCli(["run", "--server", `127.0.0.1:${listenPort}`, "--tls-ca", p.caCert, "--tls-cert", p.clientCert, "--tls-key", p.clientKey, "tls-job", "--", ...printToken]);
    expect(ok.err).toBe("");
    expect(ok.out).toMatch(/^token=\d+\n$/);
    expect(ok.code).toBe(0);

    // Without a client certificate the server refuses every connection: the claim cannot be made.
    const refused = await runCli(["run", "--server", `127.0.0.1:${listenPort}`, "--tls-ca", p.caCert, "--wait", "1s", "tls-job", "--", ...printToken]);
    expect(refused.out).toBe("");
    expect(refused.code).toBe(69);
    expect(refused.err).toContain("requires a client certificate");
    expect(refused.err).toContain("--tls-cert FILE --tls-key FILE");

    const status = await runCli(["status", "--ops", `127.0.0.1:${opsPort}`, "--ops-ca", p.caCert, "--json"]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.out).total).toBe(0);
    const plain = await runCli(["status", "--ops", `127.0.0.1:${opsPort}`, "--timeout", "2s"]);
    expect(plain.code).toBe(69); // plain HTTP to an HTTPS server gets no answer it can use

    server.proc.kill("SIGTERM");
    expect(await server.exit()).toBe(0);
  });

  test("a certificate without its key is a usage error; an unreadable file is 66", async () => {
    const p = certs.paths;
    const half = await runCli(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--tls-cert", p.serverCert]);
    expect(half.code).toBe(64);
    expect(half.err).toContain("--tls-key is needed with --tls-cert");
    const missing = await runCli(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--tls-cert", "/nonexistent/cert.pem", "--tls-key", p.serverKey]);
    expect(missing.code).toBe(66);
    expect(missing.err).toContain("--tls-cert /nonexistent/cert.pem");
  });

  test("each TLS mistake says what is wrong and which flag fixes it", async () => {
    const p = certs.paths;
    const otherCa = join(certs.dir, "other-ca.crt");
    await using tlsServer = ChildServer.spawn([
      "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s",
      "--tls-cert", p.serverCert, "--tls-key", p.serverKey, "--ops-tls-cert", p.serverCert, "--ops-tls-key", p.serverKey,
    ]);
    await using plainServer = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"]);
    await tlsServer.event("server.listening");
    await plainServer.event("server.listening");
    const tls = await tlsServer.addresses();
    const plain = await plainServer.addresses();
    const job = ["tls-job", "--", process.execPath, "-e", "console.log('ran')"];
    // A 60 s lease: the old connect timeout (0.8 x lease) would outlast runCli's limit; only a prompt answer passes.
    const run = (port: number, ...flags: string[]) => runCli(["run", "--lease", "60s", "--server", `127.0.0.1:${port}`, ...flags, ...job]);
    const cases: { what: string; result: Promise<{ code: number; out: string; err: string }>; says: string[] }[] = [
      { what: "run without TLS on the TLS port", result: run(tls.listenPort), says: ["speaks TLS", "--tls", "--tls-ca"] },
      { what: "run --tls, server certificate not in the system CAs", result: run(tls.listenPort, "--tls"), says: ["does not trust", "--tls-ca FILE"] },
      { what: "run --tls-ca of another CA", result: run(tls.listenPort, "--tls-ca", otherCa), says: ["does not trust", "unable to verify", "--tls-ca FILE"] },
      { what: "run --tls-ca on a plaintext port", result: run(plain.listenPort, "--tls-ca", p.caCert), says: ["does not speak TLS", "drop --tls"] },
    ];
    for (const { what, result, says } of cases) {
      const { code, out, err } = await result;
      expect({ what, code, out }).toEqual({ what, code: 69, out: "" });
      for (const text of says) expect({ what, err, has: err.includes(text) }).toEqual({ what, err, has: true });
      expect(err).not.toContain("frame type");
    }
    const status = (port: number, ...flags: string[]) => runCli(["status", "--ops", `127.0.0.1:${port}`, "--timeout", "5s", ...flags]);
    const opsCases: { what: string; result: Promise<{ code: number; out: string; err: string }>; says: string[] }[] = [
      { what: "status over HTTP to HTTPS ops", result: status(tls.opsPort), says: ["speaks HTTPS", "--ops-ca FILE"] },
      { what: "status --ops-ca of another CA", result: status(tls.opsPort, "--ops-ca", otherCa), says: ["does not trust", "--ops-ca FILE"] },
      { what: "status --ops-ca to plain HTTP ops", result: status(plain.opsPort, "--ops-ca", p.caCert), says: ["plain HTTP", "drop --ops-ca"] },
    ];
    for (const { what, result, says } of opsCases) {
      const { code, err } = await result;
      expect({ what, code }).toEqual({ what, code: 69 });
      for (const text of says) expect({ what, err, has: err.includes(text) }).toEqual({ what, err, has: true });
      expect(err).not.toContain("fetch()");
    }
  });
});
