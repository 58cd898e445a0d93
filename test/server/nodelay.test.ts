// No Nagle delay on replies: Bun sets TCP_NODELAY on every accepted socket
// (design.md 4a). We rely on that default rather than a syscall of our own
// per accept, so this test proves it, watching the server's syscalls.
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FrameType } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";

const strace = Bun.which("strace");
if (strace === null) console.warn("nodelay.test.ts: strace is absent; the TCP_NODELAY check is skipped");

test.skipIf(strace === null)("accepted sockets get TCP_NODELAY", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-nodelay-"));
  const trace = join(dir, "trace");
  const child = Bun.spawn([strace!, "-f", "-e", "trace=accept4,accept,setsockopt", "-o", trace, process.execPath, join(import.meta.dir, "../fixtures/nodelay-server.ts")], {
    stdout: "pipe",
    stderr: "ignore",
  });
  try {
    const reader = child.stdout.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    const peer = await WirePeer.connect(Number(text.trim()));
    peer.acquire("nodelay", 5000);
    expect((await peer.frame(0)).type).toBe(FrameType.ACQUIRED);
    peer.end();
    expect(await child.exited).toBe(0);
    const lines = readFileSync(trace, "utf8").split("\n");
    const accepted = lines.map((l) => /accept4?\(.*\)\s*=\s*(\d+)$/.exec(l)?.[1]).filter((fd): fd is string => fd !== undefined);
    expect(accepted.length).toBeGreaterThan(0);
    for (const fd of accepted) {
      expect(lines.some((l) => l.includes(`setsockopt(${fd}, SOL_TCP, TCP_NODELAY, [1]`))).toBe(true);
    }
  } finally {
    child.kill("SIGKILL");
    await child.exited;
    rmSync(dir, { recursive: true, force: true });
  }
});
