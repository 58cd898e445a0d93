/**
 * `lockd serve` as a bench child: the real command (src/cli/main.ts serve) on
 * 127.0.0.1 port 0 for both listeners, with its own data directory, its JSON
 * log lines on stderr collected, its RSS read from /proc/PID/status.
 *
 * Extra server options pass through as given. A server that does not know
 * one of them exits 64 with "unknown option --x": `start` then drops that
 * option (and its value) and starts again, and says so in `ignored`, so the
 * same command line runs against servers from before and after an option
 * exists. With `ulimit`, the server is started through
 * `sh -c 'ulimit -n N; exec bun ...'` (the same PID: exec); with `ulimitHard`
 * too, `ulimit -H -n H && ulimit -S -n N` (a soft limit the server may raise).
 */
import type { Subprocess } from "bun";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { forEachLine } from "../../test/helpers/lines.ts";

const MAIN = join(import.meta.dir, "../../src/cli/main.ts");
/** Measures the server's event-loop lateness from inside (bench/lib/loop-lag-preload.ts). */
const LAG_PRELOAD = join(import.meta.dir, "loop-lag-preload.ts");
const live = new Set<LockdServe>();

export interface ServeOptions {
  /** Options after `serve` (beyond --listen, --ops, --data-dir, which this sets). */
  readonly args: readonly string[];
  /** Open-file limit for the server, soft and hard (0: inherit). */
  readonly ulimit?: number;
  /** A hard limit above `ulimit` (0: the same): the soft limit is then the server's to raise. */
  readonly ulimitHard?: number;
  /** How long to wait for the startup line. */
  readonly startMs?: number;
}

export class LockdServe {
  readonly lines: Record<string, unknown>[] = [];
  readonly raw: string[] = [];
  exitCode: number | null = null;
  readonly exited: Promise<number>;
  private waiters: (() => void)[] = [];

  private constructor(
    readonly proc: Subprocess<"ignore", "ignore", "pipe">,
    /** Its own data directory (removed by stop()); also names it on its command line. */
    readonly dataDir: string,
  ) {
    live.add(this);
    void forEachLine(proc.stderr, (line) => {
      try {
        this.lines.push(JSON.parse(line));
      } catch {
        this.raw.push(line);
      }
      this.wake();
    });
    this.exited = proc.exited.then((code) => {
      this.exitCode = code;
      this.wake();
      return code;
    });
  }

  get pid(): number {
    return this.proc.pid;
  }

  /**
   * Start a server; drops options the server calls unknown and retries.
   * Resolves with the server, its ports and the options it did not know.
   */
  static async start(options: ServeOptions): Promise<{ server: LockdServe; port: number; opsPort: number; ignored: string[] }> {
    let args = [...options.args];
    const ignored: string[] = [];
    for (let attempt = 0; attempt < 20; attempt++) {
      const server = LockdServe.spawn(args, options.ulimit ?? 0, options.ulimitHard ?? 0);
      const started = await server.startupLine(options.startMs ?? 15_000);
      if (started !== null) {
        const port = Number(String(started.listen).split(":").pop());
        const opsPort = Number(String(started.ops).split(":").pop());
        return { server, port, opsPort, ignored };
      }
      await server.stop();
      const unknown = [...server.raw.join("\n").matchAll(/unknown option (--[\w-]+)/g)].map((m) => m[1]!);
      if (server.exitCode !== 64 || unknown.length === 0) {
        throw new Error(`lockd serve ${args.join(" ")} did not start (exit ${server.exitCode}): ${server.raw.join("\n")} ${JSON.stringify(server.lines)}`);
      }
      for (const flag of unknown) {
        args = dropOption(args, flag);
        ignored.push(flag);
      }
    }
    throw new Error("lockd serve: gave up dropping unknown options");
  }

  private static spawn(args: readonly string[], ulimit: number, hard: number): LockdServe {
    const dataDir = mkdtempSync(join(tmpdir(), "lockd-abuse-"));
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LOCKD_"))) as Record<string, string>;
    const command = [process.execPath, "--preload", LAG_PRELOAD, MAIN, "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--data-dir", dataDir, "--shutdown-grace", "0s", ...args];
    // `exec` keeps the PID: the one we measure and kill is the server itself.
    const limits = hard > 0 ? `ulimit -H -n ${hard} && ulimit -S -n ${ulimit}` : `ulimit -n ${ulimit}`;
    const argv = ulimit > 0 ? ["sh", "-c", `${limits} && exec "$@"`, "sh", ...command] : command;
    const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "ignore", stderr: "pipe", env: base });
    return new LockdServe(proc, dataDir);
  }

  /** The "lockd listening" line, or null once the process has exited without it. */
  private async startupLine(ms: number): Promise<Record<string, unknown> | null> {
    const deadline = performance.now() + ms;
    for (;;) {
      const line = this.lines.find((l) => l.msg === "lockd listening");
      if (line !== undefined) return line;
      if (this.exitCode !== null) {
        await Bun.sleep(20); // let the last stderr lines arrive
        return null;
      }
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`lockd serve: no startup line within ${ms} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 1000));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /**
   * The server's worst event-loop lateness among the "bench loop lag" lines
   * from line index `from` on, with the CPU time of that 250 ms window; null
   * when there are none.
   */
  loopLag(from: number): { maxLagMs: number; cpuMs: number } | null {
    let worst: { maxLagMs: number; cpuMs: number } | null = null;
    for (let i = from; i < this.lines.length; i++) {
      const line = this.lines[i]!;
      if (line.msg !== "bench loop lag") continue;
      const lag = Number(line.maxLagMs);
      if (worst === null || lag > worst.maxLagMs) worst = { maxLagMs: lag, cpuMs: Number(line.cpuMs) };
    }
    return worst;
  }

  /** Resident set size in bytes (VmRSS), or NaN once the process is gone. */
  rss(): number {
    try {
      const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${this.pid}/status`, "utf8"));
      return match === null ? Number.NaN : Number(match[1]) * 1024;
    } catch {
      return Number.NaN;
    }
  }

  /** CPU time (user + system) in seconds so far, from /proc/PID/stat (USER_HZ 100), or NaN. */
  cpuSeconds(): number {
    try {
      const stat = readFileSync(`/proc/${this.pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      return Number.NaN;
    }
  }

  /** Open file descriptors (entries of /proc/PID/fd), or NaN. */
  fds(): number {
    try {
      return readdirSync(`/proc/${this.pid}/fd`).length;
    } catch {
      return Number.NaN;
    }
  }

  /** SIGKILL and wait for the exit; removes the data directory. Idempotent. */
  async stop(): Promise<void> {
    if (this.exitCode === null) this.proc.kill("SIGKILL");
    await this.exited;
    live.delete(this);
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** Kill every server still running. */
export async function stopAllServers(): Promise<void> {
  await Promise.all([...live].map((server) => server.stop()));
}

/** `args` without `flag`: `--flag=value`, or `--flag` and its value when the next word is not an option. */
export function dropOption(args: readonly string[], flag: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg.startsWith(`${flag}=`)) continue;
    if (arg === flag) {
      if (i + 1 < args.length && !args[i + 1]!.startsWith("--")) i++;
      continue;
    }
    out.push(arg);
  }
  return out;
}
