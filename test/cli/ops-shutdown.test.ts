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
  const { opsPort } = await child.addresses();
  expect((await get(opsPort, "/livez")).status).toBe(200); // someone called: the grace is kept
  child.proc.kill("SIGTERM");
  await child.event("shutdown.grace");
  child.proc.kill("SIGINT");
  expect(await child.exit(10_000)).toBe(70);
  expect(child.logged("shutdown.forced")).toBe(true);
});

test("SIGTERM to a lockd serve nobody called since start: it stops at once, whatever --shutdown-grace (npm start, then Ctrl-C)", async () => {
  // Ten minutes of grace: kept, it would outlast the test.
  await using child = ChildServer.spawn([...SERVE, "--shutdown-grace", "10m"]);
  await child.addresses();
  child.proc.kill("SIGTERM");
  expect(await child.exit(15_000)).toBe(0);
  const shutdown = child.lines.filter((l) => String(l.event).startsWith("shutdown."));
  expect(shutdown.map((l) => l.event)).toEqual(["shutdown.begins", "shutdown.grace_skipped", "shutdown.stopped"]);
  expect(shutdown[1]).toMatchObject({ why: "idle", graceMs: 600_000 });
}, 30_000);

test("SIGTERM to a lockd serve that had a lock session (ended before the stop): it keeps the grace, its ops server answers in it", async () => {
  await using child = ChildServer.spawn([...SERVE, "--shutdown-grace", "10m"]);
  const { listenPort, opsPort } = await child.addresses();
  const peer = await WirePeer.claim(listenPort, "before-stop", 10_000);
  peer.end();
  await peer.closed();
  child.proc.kill("SIGTERM");
  expect((await child.event("shutdown.grace")).graceMs).toBe(600_000);
  expect(child.logged("shutdown.grace_skipped")).toBe(false);
  expect((await get(opsPort, "/readyz")).status).toBe(503);
  expect(child.exitCode).toBeNull();
  // A different signal ends the grace (the forced exit).
  child.proc.kill("SIGINT");
  expect(await child.exit(10_000)).toBe(70);
}, 30_000);
