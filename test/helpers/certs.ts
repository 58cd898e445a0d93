/**
 * Throwaway certificates for TLS tests, made with the `openssl` command in a
 * temp directory: a CA, a server certificate for 127.0.0.1/localhost, and a
 * client certificate, both signed by the CA, plus a second, unrelated CA.
 */
import { afterAll, beforeAll } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface Certs {
  readonly dir: string;
  readonly caCert: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
  /** A client certificate from another CA: must be refused under mTLS. */
  readonly strangerCert: string;
  readonly strangerKey: string;
  /** Paths of the same files, for CLI flags. */
  readonly paths: Record<"caCert" | "serverCert" | "serverKey" | "clientCert" | "clientKey", string>;
  remove(): void;
}

export const hasOpenssl = Bun.which("openssl") !== null;

function openssl(dir: string, args: string[]): void {
  const result = Bun.spawnSync(["openssl", ...args], { cwd: dir, stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`openssl ${args.join(" ")} failed: ${result.stderr.toString()}`);
}

function signed(dir: string, name: string, ca: string, subject: string, ext: string): void {
  openssl(dir, ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subject]);
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl(dir, ["x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`, "-CAcreateserial", "-out", `${name}.crt`, "-days", "2", "-extfile", `${name}.ext`]);
}

function ca(dir: string, name: string): void {
  openssl(dir, ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.crt`, "-days", "2", "-subj", `/CN=${name}`]);
}

export function makeCerts(): Certs {
  const dir = mkdtempSync(join(tmpdir(), "lockd-certs-"));
  ca(dir, "ca");
  ca(dir, "other-ca");
  signed(dir, "server", "ca", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  signed(dir, "client", "ca", "/CN=lockd-test-client", "extendedKeyUsage=clientAuth\n");
  signed(dir, "stranger", "other-ca", "/CN=stranger", "extendedKeyUsage=clientAuth\n");
  const read = (file: string) => readFileSync(join(dir, file), "utf8");
  return {
    dir,
    caCert: read("ca.crt"),
    serverCert: read("server.crt"),
    serverKey: read("server.key"),
    clientCert: read("client.crt"),
    clientKey: read("client.key"),
    strangerCert: read("stranger.crt"),
    strangerKey: read("stranger.key"),
    paths: {
      caCert: join(dir, "ca.crt"),
      serverCert: join(dir, "server.crt"),
      serverKey: join(dir, "server.key"),
      clientCert: join(dir, "client.crt"),
      clientKey: join(dir, "client.key"),
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * Certificates for the tests of one describe block (call it in the block):
 * made before its first test, removed after its last. The object is filled
 * in by the beforeAll, so read its fields inside the tests.
 */
export function suiteCerts(): Certs {
  const certs = {} as Certs;
  beforeAll(() => {
    Object.assign(certs, makeCerts());
  });
  afterAll(() => certs.remove?.());
  return certs;
}
