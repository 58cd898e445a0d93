/**
 * One stop request that reaches `lockd serve` through two paths is one stop.
 * The npm bin shim (bin/lockd.mjs, run by Node.js) runs Bun as its child and
 * relays signals to it; when a signal goes to the whole process group
 * without a terminal (kill -INT -PGID, timeout(1), systemd's
 * KillMode=control-group), Bun gets it directly and again from the shim.
 * That must be a clean stop (exit 0), not the second-signal exit 70; a
 * deliberate second signal, after the repeat window, still forces it.
 */
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { LogEvent } from "../../src/log/events.ts";
import { SIGNAL_REPEAT_WINDOW_MS } from "../../src/server/daemon.ts";
import { forEachLine } from "../helpers/lines.ts";

const ROOT = resolve(import.meta.dir, "../..");
const NODE = Bun.which("node");
const noNode = NODE === null ? " (skipped: no node to run the shim)" : "";

interface Served {
  readonly pgid: number;
  readonly exited: Promise<number>;
  /** Event codes logged so far, in order. */
  readonly events: string[];
  /** The ops server's HOST:PORT, from the server.listening line ("" before it). */
  readonly ops: string;
  /** Resolves when a line with this event code has been logged (or the process exited). */
  logged(event: LogEvent): Promise<void>;
  stderr(): string;
  [Symbol.asyncDispose](): Promise<void>;
}

/** `node bin/lockd.mjs serve` in its own process group (and session: no terminal), on loopback port 0. */
function serveInOwnGroup(graceSeconds: number): Served {
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-group-"));
  const proc = Bun.spawn([NODE!, join(ROOT, "bin/lockd.mjs"), "serve"], {
    cwd: ROOT,
    detached: true,
    stdin: "ignore",
    stdout: "ignore",
    stderr: "pipe",
    env: {
      ...process.env,
      LOCKD_LISTEN: "127.0.0.1:0",
      LOCKD_OPS: "127.0.0.1:0",
      LOCKD_DATA_DIR: dataDir,
      LOCKD_SHUTDOWN_GRACE: `${graceSeconds}s`,
      LOCKD_LOG_LEVEL: "info",
    },
  });
  const guard = setTimeout(() => killGroup(proc.pid, "SIGKILL"), 25_000);
  const events: string[] = [];
  let ops = "";
  let text = "";
  const waiters: { event: string; resolve: () => void }[] = [];
  const reading = forEachLine(proc.stderr, (line) => {
    text += `${line}\n`;
    if (!line.startsWith("{")) return;
    const entry = JSON.parse(line) as { event?: string; ops?: string };
    const event = entry.event ?? "";
    if (event === "server.listening") ops = entry.ops ?? "";
    events.push(event);
    for (const w of waiters) if (w.event === event) w.resolve();
  });
  const exited = proc.exited;
  return {
    pgid: proc.pid,
    exited,
    events,
    get ops() {
      return ops;
    },
    logged: (event) =>
      events.includes(event)
        ? Promise.resolve()
        : Promise.race([new Promise<void>((resolve) => waiters.push({ event, resolve })), exited.then(() => {})]),
    stderr: () => text,
    async [Symbol.asyncDispose]() {
      clearTimeout(guard);
      killGroup(proc.pid, "SIGKILL");
      await exited;
      await reading;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function killGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // the group is gone
  }
}

test.skipIf(NODE === null)(`one SIGINT to the shim's whole process group is one clean stop: exit 0, not the second-signal exit 70${noNode}`, async () => {
  await using served = serveInOwnGroup(0);
  await served.logged("server.listening");
  expect(served.events).toContain("server.listening");
  // Bun gets it from the kernel and again from the shim, which relays it.
  process.kill(-served.pgid, "SIGINT");
  const code = await served.exited;
  expect({ code, stopped: served.events.includes("shutdown.stopped"), second: served.events.includes("shutdown.forced") }, served.stderr()).toEqual({
    code: 0,
    stopped: true,
    second: false,
  });
}, 30_000);

test.skipIf(NODE === null)(`a second SIGINT to the group after the repeat window forces the exit: 70${noNode}`, async () => {
  await using served = serveInOwnGroup(60);
  await served.logged("server.listening");
  expect(served.events).toContain("server.listening");
  // A probe: a server someone called keeps its grace (one nobody called stops at once).
  expect((await fetch(`http://${served.ops}/livez`, { signal: AbortSignal.timeout(5000) })).status).toBe(200);
  process.kill(-served.pgid, "SIGINT");
  await served.logged("shutdown.begins");
  expect(served.events).toContain("shutdown.begins");
  // The server took the first signal before it logged that line: once the
  // window has passed on the monotonic clock since then, the next one is a second request.
  const after = performance.now() + SIGNAL_REPEAT_WINDOW_MS + 100;
  for (let i = 0; i < 100 && performance.now() < after; i++) await Bun.sleep(Math.max(1, after - performance.now()));
  expect(performance.now()).toBeGreaterThanOrEqual(after);
  expect(served.events).not.toContain("shutdown.stopped"); // still in its 60 s grace period
  process.kill(-served.pgid, "SIGINT");
  const code = await served.exited;
  expect({ code, second: served.events.includes("shutdown.forced"), stopped: served.events.includes("shutdown.stopped") }, served.stderr()).toEqual({
    code: 70,
    second: true,
    stopped: false,
  });
}, 30_000);
