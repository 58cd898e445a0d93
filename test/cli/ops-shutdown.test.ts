import { expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { parseExposition, valueOf } from "../ops/promtext.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";

const SERVE = ["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0"];
const get = (port: number, path: string) => fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(5000) });

test("SIGTERM: readyz 503 and metrics up during the grace, every session got SHUTTING_DOWN, exit 0", async () => {
  await using child = ChildServer.spawn([...SERVE, "--shutdown-grace", "4s"]);
  const { listenPort, opsPort } = await child.addresses();
  expect((await get(opsPort, "/readyz")).status).toBe(200);
  const peers: WirePeer[] = [];
  for (let i = 0; i < 3; i++) {
    const p = await WirePeer.claim(listenPort, "shared", 10_000, { owner: `p${i}` });
    peers.push(p);
  }

  child.proc.kill("SIGTERM");
  for (const p of peers) {
    await p.closed();
    expect(p.frames.at(-1)!.type).toBe(FrameType.ERROR);
    expect(p.frames.at(-1)!.code).toBe(ErrorCode.SHUTTING_DOWN);
    expect(p.frames.filter((f) => f.type === FrameType.ACQUIRED).length).toBe(p === peers[0] ? 1 : 0);
  }
  await child.event("shutdown.grace");
  expect(child.exitCode).toBeNull();
  const ready = await get(opsPort, "/readyz");
  expect(ready.status).toBe(503);
  const metrics = await get(opsPort, "/metrics");
  expect(metrics.status).toBe(200);
  const m = parseExposition(await metrics.text());
  expect(valueOf(m, "lockd_session_ends_total", "lockd_session_ends_total", { reason: "shutting_down" })).toBe(3);
  expect(valueOf(m, "lockd_ready", "lockd_ready")).toBe(0);
  await expect(WirePeer.connect(listenPort)).rejects.toThrow();

  expect(await child.exit(15_000)).toBe(0);
  expect(child.lines.at(-1)!.event).toBe("shutdown.stopped");
}, 30_000);

test("a second signal exits at once with 70, long before the grace ends", async () => {
  await using child = ChildServer.spawn([...SERVE, "--shutdown-grace", "10m"]);
  await child.addresses();
  child.proc.kill("SIGTERM");
  await child.event("shutdown.grace");
  child.proc.kill("SIGINT");
  expect(await child.exit(10_000)).toBe(70);
  expect(child.logged("shutdown.forced")).toBe(true);
});
