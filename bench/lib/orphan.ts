/**
 * For the children of bench/abuse.ts: when the bench goes away (the IPC
 * channel closes: it was killed, even with SIGKILL) or the child's bounded
 * lifetime runs out, exit, and take the bench's `lockd serve` along, which
 * has no IPC channel of its own and would otherwise keep running, and its
 * data directory. The server
 * is named by its PID and its data directory: it is killed only if that PID
 * still runs a command line naming that directory (never a reused PID).
 */
import { readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** `server` is "PID:DATA_DIR" as bench/abuse.ts passes it, or "" for none. */
export function exitWithBench(lifetimeMs: number, server: string): void {
  const colon = server.indexOf(":");
  const pid = colon > 0 ? Number(server.slice(0, colon)) : 0;
  const dataDir = colon > 0 ? server.slice(colon + 1) : "";
  const leave = (code: number) => {
    if (pid > 0 && dataDir !== "") {
      try {
        if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(dataDir)) process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
      // Its data directory too, if it is one of the bench's (lockd-abuse-* in the temp directory).
      if (dataDir.startsWith(join(tmpdir(), "lockd-abuse-"))) rmSync(dataDir, { recursive: true, force: true });
    }
    process.exit(code);
  };
  setTimeout(() => leave(3), lifetimeMs).unref();
  process.on("disconnect", () => leave(0));
}
