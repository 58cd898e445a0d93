// The server SIGKILLed and restarted on the same port with the same data
// directory: held locks are reported lost at once (the connection closed),
// waiting claims of the client library reconnect on their own and are
// granted by the new process, and fencing tokens only grow across the crash.
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LockClient, LockLostError, type Lock } from "../../src/client/index.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { aborted } from "../client/fake-server.ts";
import { freePort } from "../helpers/ports.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function serve(dataDir: string, port: number): ChildServer {
  return ChildServer.spawn(["serve", "--listen", `127.0.0.1:${port}`, "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_DATA_DIR: dataDir });
}

async function waitingCount(opsPort: number, name: string): Promise<number> {
  const response = await fetch(`http://127.0.0.1:${opsPort}/v1/locks/${encodeURIComponent(name)}`);
  return response.status === 200 ? ((await response.json()) as { waiting: number }).waiting : 0;
}

test("server SIGKILL and restart with the same data dir: holders lose, waiters reconnect and win, tokens only grow", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-fault-restart-"));
  dirs.push(dataDir);
  // A port from outside the kernel's ephemeral range: while nothing listens on it
  // (between the kill and the restart), no port-0 listener and no outgoing
  // connection on the machine (the reconnecting clients' own) can be given it.
  const first = serve(dataDir, await freePort());
  let second: ChildServer | null = null;
  const held: Lock[] = [];
  try {
    const { listenPort, opsPort } = await first.addresses();
    const client = new LockClient({ servers: `127.0.0.1:${listenPort}`, reconnectMs: 30_000 });
    const holder = await client.acquire("fault/restart", { lease: 2000 });
    const other = await client.acquire("fault/restart-other", { lease: 2000 });
    held.push(holder, other);
    const before = [holder.token, other.token];
    const claims = [0, 1].map((i) => client.acquire("fault/restart", { lease: 2000, wait: 40_000 }).then((lock) => ({ i, lock })));
    for (const c of claims) c.catch(() => {});
    const queuedBy = performance.now() + 20_000; // a bound, not a wait: polled, as the server is another process
    while ((await waitingCount(opsPort, "fault/restart")) < 2) {
      if (performance.now() > queuedBy) throw new Error("the two waiters never queued");
      await Bun.sleep(20);
    }

    first.proc.kill("SIGKILL");
    await first.exited;
    // Held locks: lost at once, told why.
    for (const lock of [holder, other]) {
      await aborted(lock.signal, 10_000);
      const reason = lock.signal.reason as LockLostError;
      expect(reason).toBeInstanceOf(LockLostError);
      expect(["closed", "server-error"]).toContain(reason.why);
    }

    second = serve(dataDir, listenPort);
    await second.addresses();
    // The waiters reconnect on their own (backoff) and queue again: one wins, then the other.
    const winner = await Promise.race(claims);
    held.push(winner.lock);
    expect(winner.lock.token).toBeGreaterThan(before[0]! > before[1]! ? before[0]! : before[1]!);
    await winner.lock.release();
    const next = await claims[1 - winner.i]!;
    held.push(next.lock);
    expect(next.lock.token).toBeGreaterThan(winner.lock.token);
    await next.lock.release();
  } finally {
    for (const lock of held) await lock.release();
    await first[Symbol.asyncDispose]();
    if (second !== null) await second[Symbol.asyncDispose]();
  }
}, 60_000);
