/**
 * Start-up of the compiled binary to accepting: `bun build --compile` lockd
 * (src/cli/main.ts) and the floor (bench/floor/listen.ts, a program that only
 * listens), then start each many times, alternating, and time from spawn to
 * the moment a TCP connect to the port it logged succeeds.
 *
 * Usage: bun bench/startup.ts [--runs 20]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ratio, summarize, table } from "./lib/stats.ts";

const runsIndex = process.argv.indexOf("--runs");
const RUNS = runsIndex > 0 ? Number(process.argv[runsIndex + 1]) : 20;
const root = new URL("..", import.meta.url).pathname;

async function compile(entry: string, out: string): Promise<void> {
  const proc = Bun.spawn([process.execPath, "build", "--compile", entry, "--outfile", out], { cwd: root, stdout: "ignore", stderr: "inherit" });
  if ((await proc.exited) !== 0) throw new Error(`bun build --compile ${entry} failed`);
}

/** Spawn `cmd`, wait for its JSON log line with `listen`, connect to it; ms from spawn to connected. */
async function startOnce(cmd: string[]): Promise<number> {
  const t0 = performance.now();
  const proc = Bun.spawn(cmd, { stdout: "ignore", stderr: "pipe" });
  try {
    const reader = proc.stderr.getReader();
    const decoder = new TextDecoder();
    let text = "";
    let port = 0;
    while (port === 0) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`${cmd[0]} exited before it logged its address: ${text}`);
      text += decoder.decode(value, { stream: true });
      const match = /"listen":"[^"]*:(\d+)"/.exec(text);
      if (match !== null) port = Number(match[1]);
    }
    const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
    const t1 = performance.now();
    socket.end();
    reader.releaseLock();
    return t1 - t0;
  } finally {
    proc.kill("SIGKILL");
    await proc.exited;
  }
}

const dir = mkdtempSync(join(tmpdir(), "lockd-startup-"));
try {
  const lockd = join(dir, "lockd");
  const floor = join(dir, "listen");
  await compile("src/cli/main.ts", lockd);
  await compile("bench/floor/listen.ts", floor);
  const ours: number[] = [];
  const base: number[] = [];
  await startOnce([lockd, "serve", "--listen", "127.0.0.1:0"]); // warm the page cache
  await startOnce([floor]);
  for (let i = 0; i < RUNS; i++) {
    base.push(await startOnce([floor]));
    ours.push(await startOnce([lockd, "serve", "--listen", "127.0.0.1:0"]));
  }
  const f = summarize(base);
  const o = summarize(ours);
  console.log(`\nStart-up of the compiled binary to accepting, ms (${RUNS} starts each; floor = compiled bare listener)\n`);
  console.log(
    table(
      ["bench", "floor p50", "floor max", "lockd p50", "lockd max", "p50 ratio", "budget"],
      [["spawn -> connect succeeds", f.p50.toFixed(1), Math.max(...base).toFixed(1), o.p50.toFixed(1), Math.max(...ours).toFixed(1), ratio(o.p50, f.p50), "< 100 ms"]],
    ),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
