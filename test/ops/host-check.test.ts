// The ops server answers only for Hosts it knows (issue 20): IP addresses,
// localhost, the names it was given (--ops-allow-host) and its advertised
// ops name. A DNS name nobody gave, as a page in an operator's browser that
// rebinds its own name to this address would send, gets 421 with one line
// naming the flag; probes are answered whatever Host they send.
import { expect, test } from "bun:test";
import { connect } from "node:net";
import { startDaemon } from "./harness.ts";

/** One request with the given Host; the status and body. */
function ask(port: number, path: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let text = "";
    socket.on("data", (chunk) => (text += chunk.toString("utf8")));
    socket.on("error", reject);
    socket.on("end", () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      resolve({ status, body: text.slice(text.indexOf("\r\n\r\n") + 4) });
    });
    socket.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  });
}

test("IP addresses, localhost and given names are answered; another DNS name gets 421 naming the flag; probes always", async () => {
  await using ops = startDaemon({ opsAllowHosts: ["lockd.internal"], advertiseOps: "ops-a.example:7701" });
  const port = ops.daemon.ops.port;
  for (const host of [`127.0.0.1:${port}`, "127.0.0.1", `[::1]:${port}`, `localhost:${port}`, "LOCALHOST", `lockd.internal:${port}`, "Lockd.Internal.", "ops-a.example:7701"]) {
    expect({ host, status: (await ask(port, "/v1/locks", host)).status }).toEqual({ host, status: 200 });
  }
  const refused = await ask(port, "/v1/locks", `evil.example:${port}`);
  expect(refused.status).toBe(421);
  expect(JSON.parse(refused.body)).toMatchObject({ error: { code: "UNKNOWN_HOST" } });
  expect(JSON.parse(refused.body).error.message).toContain("--ops-allow-host");
  for (const path of ["/ui", "/metrics", "/v1/locks/x/force-release"]) expect((await ask(port, path, "evil.example")).status).toBe(421);
  // Probes send what they like (a Kubernetes probe sends the pod's IP, a load balancer a name of its own).
  for (const path of ["/livez", "/healthz", "/readyz"]) expect((await ask(port, path, "evil.example")).status).toBe(200);
});
