// TLS from the command line: `lockd serve` with mutual TLS and an HTTPS ops
// server, `lockd run` with a client certificate, `lockd status --ops-ca`.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";
import { type Certs, hasOpenssl, makeCerts } from "../helpers/certs.ts";

if (!hasOpenssl) console.warn("cli/tls.test.ts: the openssl command is absent; TLS tests are skipped");

describe.skipIf(!hasOpenssl)("TLS flags", () => {
  let certs: Certs;
  beforeAll(() => {
    certs = makeCerts();
  });
  afterAll(() => certs.remove());

  test("serve with mutual TLS and HTTPS ops; run with a client certificate; status over HTTPS", async () => {
    const p = certs.paths;
    await using server = ChildServer.spawn([
      "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s",
      "--tls-cert", p.serverCert, "--tls-key", p.serverKey, "--tls-client-ca", p.caCert,
      "--ops-tls-cert", p.serverCert, "--ops-tls-key", p.serverKey,
    ]);
    const start = await server.line("lockd listening");
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
    expect([69, 75]).toContain(refused.code);

    const status = await runCli(["status", "--ops", `127.0.0.1:${opsPort}`, "--ops-ca", p.caCert, "--json"]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.out).total).toBe(0);
    const plain = await runCli(["status", "--ops", `127.0.0.1:${opsPort}`, "--timeout", "2s"]);
    expect(plain.code).not.toBe(0); // plain HTTP to an HTTPS server gets no answer it can use

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
});
