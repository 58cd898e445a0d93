// Handover when the owner's process dies: SIGKILL closes its socket in the
// kernel, and the server pushes ACQUIRED to the waiter without waiting for
// the owner's (10-minute) lease or the waiter's next heartbeat.
import { expect, test } from "bun:test";
import { FrameType } from "../../src/protocol/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";

async function firstLine(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.getReader();
  let text = "";
  try {
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
  } finally {
    reader.releaseLock();
  }
  return text.split("\n")[0]!;
}

test("owner process killed with SIGKILL: the waiter gets ACQUIRED pushed at once", async () => {
  await using server = startServer();
  const child = Bun.spawn([process.execPath, `${import.meta.dir}/../fixtures/holder.ts`, String(server.port), "killed"], {
    stdout: "pipe",
    stderr: "inherit",
  });
  try {
    const line = await firstLine(child.stdout);
    expect(line).toMatch(/^held \d+$/);
    const holderToken = BigInt(line.split(" ")[1]!);

    const waiter = await WirePeer.claim(server.port, "killed", 60_000);
    expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);

    const killedAt = performance.now();
    child.kill("SIGKILL");
    const grant = await waiter.frame(1, 5000); // the lease is 10 minutes: only the close can explain a grant
    expect([grant.type, grant.flags]).toEqual([FrameType.ACQUIRED, 0]);
    expect(grant.token!).toBeGreaterThan(holderToken);
    expect(grant.at).toBeGreaterThan(killedAt);
    expect(await child.exited).not.toBe(0);
    waiter.end();
  } finally {
    child.kill("SIGKILL");
    await child.exited;
  }
});
