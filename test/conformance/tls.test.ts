/**
 * TLS and mutual TLS, for every client through its driver, against a real
 * `lockd serve --tls-cert --tls-key --tls-client-ca` (certificates made by
 * openssl for the run): a client with the CA and a client certificate gets
 * the lock; a plaintext client on the TLS port, and a client without a
 * certificate on the mutual-TLS port, get SERVER_UNAVAILABLE (a setting to
 * fix), not a hang.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChildServer } from "../fixtures/ops-child.ts";
import { hasOpenssl, makeCerts, type Certs } from "../helpers/certs.ts";
import { CLIENTS, Driver, warnSkips } from "./clients.ts";

let server: ChildServer | undefined;
let certs: Certs | undefined;
let address = "";

if (!hasOpenssl) console.warn("conformance TLS: SKIPPING: `openssl` is not on PATH (it makes the test certificates)");

beforeAll(async () => {
  if (!hasOpenssl) return;
  certs = makeCerts();
  server = ChildServer.spawn([
    "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s",
    "--tls-cert", certs.paths.serverCert, "--tls-key", certs.paths.serverKey, "--tls-client-ca", certs.paths.caCert,
  ]);
  address = `127.0.0.1:${(await server.addresses()).listenPort}`;
});

afterAll(async () => {
  await server?.[Symbol.asyncDispose]();
  certs?.remove();
});

warnSkips();
for (const kind of CLIENTS) {
  describe.skipIf(kind.skip !== null || !hasOpenssl)(`conformance over TLS: ${kind.name} client`, () => {
    test("mutual TLS: granted; plaintext, or no client certificate: SERVER_UNAVAILABLE", async () => {
      await kind.setup();
      const driver = await Driver.start(kind);
      try {
        const ca = certs!.paths.caCert;
        const acquire = (id: string, tls: Record<string, string> | null) =>
          driver.send({ cmd: "acquire", id, servers: address, name: `tls/${kind.name}/${id}`, lease: 2000, try: false, wait: null, owner: id, tls });
        acquire("mtls", { ca, cert: certs!.paths.clientCert, key: certs!.paths.clientKey });
        acquire("plain", null);
        acquire("nocert", { ca });
        const outcome = (id: string) => driver.until((e) => e.id === id && (e.event === "acquired" || e.event === "error"), `${id} outcome`);
        expect(await outcome("mtls")).toMatchObject({ event: "acquired" });
        expect(await outcome("plain")).toMatchObject({ event: "error", code: "SERVER_UNAVAILABLE", class: "server" });
        expect(await outcome("nocert")).toMatchObject({ event: "error", code: "SERVER_UNAVAILABLE", class: "server" });
        driver.send({ cmd: "held", id: "mtls" });
        expect(await driver.until((e) => e.id === "mtls" && e.event === "held", "held?")).toMatchObject({ held: true });
        driver.send({ cmd: "release", id: "mtls" });
        await driver.until((e) => e.id === "mtls" && e.event === "released", "released");
      } finally {
        await driver.stop();
      }
    }, 60_000);
  });
}
