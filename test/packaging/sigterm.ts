/**
 * Start `lockd serve` through some launcher (npm start, the bin shim), send
 * SIGTERM to the process the caller started (as a supervisor or `kill` does:
 * that pid only, not its group) and report what is left: the server's own
 * pid (from its server.listening log line), whether it is still alive once
 * the launcher has exited, and whether its two ports can be bound again.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { forEachLine } from "../helpers/lines.ts";
import { alive } from "../helpers/pids.ts";

export interface SigtermOutcome {
  /** The launcher's exit code (null when a signal ended it) and signal. */
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | number | null;
  /** The server's pid, from its log. */
  readonly serverPid: number;
  /** The server process still existed after the launcher exited. */
  readonly serverAlive: boolean;
  /** Both of the server's ports could be bound after the launcher exited. */
  readonly portsFree: boolean;
  /** The server logged its clean stop. */
  readonly stoppedCleanly: boolean;
  readonly stderr: string;
}

function canBind(hostname: string, port: number): boolean {
  try {
    const listener = Bun.listen({ hostname, port, socket: { data() {} } });
    listener.stop(true);
    return true;
  } catch {
    return false;
  }
}

function hostPort(text: string): [string, number] {
  const colon = text.lastIndexOf(":");
  return [text.slice(0, colon), Number(text.slice(colon + 1))];
}

/** `argv` runs in `cwd` with the server on ephemeral loopback ports and a temp data directory. */
export async function sigtermOutcome(argv: string[], cwd: string, env: Record<string, string | undefined> = process.env): Promise<SigtermOutcome> {
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-sigterm-"));
  const proc = Bun.spawn(argv, {
    cwd,
    stdin: "ignore",
    stdout: "ignore",
    stderr: "pipe",
    env: { ...env, LOCKD_LISTEN: "127.0.0.1:0", LOCKD_OPS: "127.0.0.1:0", LOCKD_DATA_DIR: dataDir, LOCKD_SHUTDOWN_GRACE: "0s", LOCKD_LOG_LEVEL: "info" },
  });
  let stderr = "";
  let listening: { pid: number; listen: string; ops: string } | undefined;
  let stopped = false;
  let onListening: () => void = () => {};
  const listeningSeen = new Promise<void>((resolve) => (onListening = resolve));
  const reading = forEachLine(proc.stderr, (line) => {
    stderr += `${line}\n`;
    if (!line.startsWith("{")) return;
    const entry = JSON.parse(line) as { event?: string; pid?: number; listen?: string; ops?: string };
    if (entry.event === "server.listening") {
      listening = { pid: entry.pid!, listen: entry.listen!, ops: entry.ops! };
      onListening();
    }
    if (entry.event === "shutdown.stopped") stopped = true;
  });
  const exited = proc.exited;
  const guard = setTimeout(() => proc.kill("SIGKILL"), 20_000);
  let serverPid = 0;
  try {
    await Promise.race([listeningSeen, exited]);
    if (listening === undefined) throw new Error(`the server did not start (exit ${proc.exitCode}):\n${stderr}`);
    serverPid = listening.pid;
    process.kill(proc.pid, "SIGTERM");
    await exited;
    const serverAlive = alive(serverPid);
    const portsFree = canBind(...hostPort(listening.listen)) && canBind(...hostPort(listening.ops));
    if (!serverAlive) await reading;
    return { exitCode: proc.exitCode, signalCode: proc.signalCode, serverPid, serverAlive, portsFree, stoppedCleanly: stopped, stderr };
  } finally {
    clearTimeout(guard);
    proc.kill("SIGKILL");
    if (serverPid !== 0 && alive(serverPid)) process.kill(serverPid, "SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  }
}
