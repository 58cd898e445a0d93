/**
 * Start-up of the compiled binary, against floors built the same way in the
 * same run:
 *
 * - `lockd serve` to accepting: from spawn to the moment a TCP connect to
 *   the port it logged succeeds, against a program that only listens
 *   (bench/floor/listen.ts). Budget: within 1.5x.
 * - `lockd run NAME -- true` against a running lockd serve: from spawn to
 *   exit, against a program that only connects, sends one ACQUIRE, reads
 *   ACQUIRED and closes (bench/floor/acquire.ts). Budget: within 1.2x.
 *   Beside it, for scale, the same floor that also runs `true` between
 *   ACQUIRED and the close (what lockd run cannot skip: a child process),
 *   and that floor again in a binary that also carries all of lockd's code,
 *   never loaded (bench/floor/acquire-in-lockd.ts: what the single binary
 *   costs a start). CPU time and peak RSS are reported beside the
 *   wall-clock ratios.
 *
 * lockd is built by `npm run build` (what ships: bun build --compile
 * --bytecode --splitting), the floors with the same compile flags. Starts
 * alternate between the two sides, after warm-up starts of each.
 *
 * Usage: bun bench/startup.ts [--runs 20]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ratio, summarize, table } from "./lib/stats.ts";

const runsIndex = process.argv.indexOf("--runs");
const RUNS = runsIndex > 0 ? Number(process.argv[runsIndex + 1]) : 20;
if (!Number.isSafeInteger(RUNS) || RUNS < 1) throw new Error(`--runs: "${process.argv[runsIndex + 1]}" is not a whole number of at least 1`);
const root = new URL("..", import.meta.url).pathname;
/** No single start may take longer than this (a hang is a failed bench, not a slow sample). */
const START_BOUND_MS = 10_000;

async function spawnOk(cmd: string[], what: string): Promise<void> {
  const proc = Bun.spawn(cmd, { cwd: root, stdout: "ignore", stderr: "inherit" });
  if ((await proc.exited) !== 0) throw new Error(`${what} failed`);
}

/** lockd exactly as `npm run build` makes it, into `out`. */
const buildLockd = (out: string) => spawnOk(["npm", "run", "--silent", "build", "--", "--outfile", out], "npm run build");

/** A floor program, compiled with lockd's flags (package.json "build"; --splitting where it has chunks to split). */
const buildFloor = (entry: string, out: string, splitting = false) =>
  spawnOk([process.execPath, "build", "--compile", "--bytecode", "--format=esm", ...(splitting ? ["--splitting"] : []), entry, "--outfile", out], `bun build --compile ${entry}`);

/**
 * Read `proc`'s stderr until a JSON log line names the address it listens
 * on; its port. The rest of stderr is read on in the background, so that a
 * long-running server never blocks on a full pipe.
 */
async function loggedPort(proc: Bun.Subprocess<"ignore", "ignore", "pipe">, what: string): Promise<number> {
  const reader = proc.stderr.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const timer = setTimeout(() => proc.kill("SIGKILL"), START_BOUND_MS);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`${what} exited before it logged its address: ${text}`);
      text += decoder.decode(value, { stream: true });
      const match = /"listen":"[^"]*:(\d+)"/.exec(text);
      if (match !== null) {
        void (async () => {
          while (!(await reader.read()).done);
        })().catch(() => {});
        return Number(match[1]);
      }
    }
  } finally {
    clearTimeout(timer);
  }
}

interface Run {
  readonly ms: number;
  readonly cpuMs: number;
  readonly maxRssMiB: number;
}

/** What rusage says of a reaped child: CPU ms (user + system), peak RSS MiB. */
function usageOf(proc: Bun.Subprocess): { cpuMs: number; maxRssMiB: number } {
  const usage = proc.resourceUsage()!;
  return { cpuMs: Number(usage.cpuTime.user + usage.cpuTime.system) / 1000, maxRssMiB: usage.maxRSS / 1024 / 1024 };
}

/**
 * Spawn a listener, wait for its logged address, connect to it: ms from
 * spawn to connected, and the CPU it had used when it was killed right after.
 */
async function startOnce(cmd: string[]): Promise<Run> {
  const t0 = performance.now();
  const proc = Bun.spawn(cmd, { stdin: "ignore", stdout: "ignore", stderr: "pipe" });
  let ms = Number.NaN;
  try {
    const port = await loggedPort(proc, cmd[0]!);
    const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
    ms = performance.now() - t0;
    socket.end();
  } finally {
    proc.kill("SIGKILL");
    await proc.exited;
  }
  return { ms, ...usageOf(proc) };
}

/** Spawn a command that must exit 0; wall ms from spawn to exit, its CPU time and peak RSS. */
async function runOnce(cmd: string[]): Promise<Run> {
  const t0 = performance.now();
  const proc = Bun.spawn(cmd, { stdin: "ignore", stdout: "ignore", stderr: "pipe" });
  const timer = setTimeout(() => proc.kill("SIGKILL"), START_BOUND_MS);
  const [code, err] = await Promise.all([proc.exited, new Response(proc.stderr).text()]);
  const ms = performance.now() - t0;
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}: ${err}`);
  return { ms, ...usageOf(proc) };
}

const p50 = (values: number[]) => summarize(values).p50;

const dir = mkdtempSync(join(tmpdir(), "lockd-startup-"));
let server: Bun.Subprocess<"ignore", "ignore", "pipe"> | null = null;
try {
  const lockd = join(dir, "lockd");
  const listen = join(dir, "listen");
  const acquire = join(dir, "acquire");
  await buildLockd(lockd);
  await buildFloor("bench/floor/listen.ts", listen);
  await buildFloor("bench/floor/acquire.ts", acquire);
  const acquireBig = join(dir, "acquire-in-lockd");
  await buildFloor("bench/floor/acquire-in-lockd.ts", acquireBig, true);

  // 1. serve to accepting, against the bare listener.
  const serveCmd = (i: number) => [lockd, "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--data-dir", join(dir, `data-${i}`), "--shutdown-grace", "0s"];
  await startOnce(serveCmd(0)); // warm the page cache
  await startOnce([listen]);
  const ours: Run[] = [];
  const base: Run[] = [];
  for (let i = 0; i < RUNS; i++) {
    base.push(await startOnce([listen]));
    ours.push(await startOnce(serveCmd(i)));
  }

  // 2. lockd run NAME -- true against one running server, against the bare client.
  server = Bun.spawn(serveCmd(RUNS), { stdin: "ignore", stdout: "ignore", stderr: "pipe" });
  const port = await loggedPort(server, "lockd serve");
  const address = `127.0.0.1:${port}`;
  const runCmd = [lockd, "run", "--server", address, "bench/run", "--", "true"];
  const floorCmd = [acquire, address, "bench/floor"];
  const floorTrueCmd = [acquire, address, "bench/floor-true", "--", "true"];
  const floorBigCmd = [acquireBig, address, "bench/floor-big", "--", "true"];
  for (let i = 0; i < 3; i++) {
    await runOnce(floorCmd);
    await runOnce(floorTrueCmd);
    await runOnce(floorBigCmd);
    await runOnce(runCmd);
  }
  const client: Run[] = [];
  const clientTrue: Run[] = [];
  const clientBig: Run[] = [];
  const run: Run[] = [];
  for (let i = 0; i < RUNS; i++) {
    client.push(await runOnce(floorCmd));
    clientTrue.push(await runOnce(floorTrueCmd));
    clientBig.push(await runOnce(floorBigCmd));
    run.push(await runOnce(runCmd));
  }

  const ms = (runs: Run[]) => runs.map((r) => r.ms);
  const cpu = (runs: Run[]) => runs.map((r) => r.cpuMs);
  const rss = (runs: Run[]) => runs.map((r) => r.maxRssMiB);
  const row = (bench: string, floor: Run[], lockd: Run[], budget: number | null): string[] => {
    const wall = p50(ms(lockd)) / p50(ms(floor));
    return [
      bench,
      p50(ms(floor)).toFixed(1),
      Math.max(...ms(floor)).toFixed(1),
      p50(ms(lockd)).toFixed(1),
      Math.max(...ms(lockd)).toFixed(1),
      ratio(p50(ms(lockd)), p50(ms(floor))),
      budget === null ? "-" : `${budget}x`,
      budget === null ? "" : wall <= budget ? "met" : "missed",
      ratio(p50(cpu(lockd)), p50(cpu(floor))),
      `${p50(rss(floor)).toFixed(1)} / ${p50(rss(lockd)).toFixed(1)}`,
    ];
  };
  console.log(`\nStart-up of the compiled binary, wall ms (${RUNS} starts each, alternating with the floor's)\n`);
  console.log(
    table(
      ["bench", "floor p50", "floor max", "lockd p50", "lockd max", "p50 ratio", "budget", "", "CPU p50 ratio", "peak RSS MiB floor / lockd"],
      [
        row("serve: spawn -> connect succeeds", base, ours, 1.5),
        row("run NAME -- true: spawn -> exit", client, run, 1.2),
        row("  the same, floor also runs true", clientTrue, run, null),
        row("  the same, that floor in a binary with lockd's code", clientBig, run, null),
      ],
    ),
  );
  console.log(
    `\nfloors: serve against bench/floor/listen.ts; run against bench/floor/acquire.ts (connect, ACQUIRE, ACQUIRED, close; on the third row it also spawns true and waits for it before the close; on the fourth, the same in a binary that carries all of lockd's modules, bench/floor/acquire-in-lockd.ts)` +
      `\nCPU: user + system of the process (serve: until it was killed right after the connect); p50 ${p50(cpu(base)).toFixed(1)} / ${p50(cpu(ours)).toFixed(1)} ms serve, ${p50(cpu(client)).toFixed(1)} / ${p50(cpu(clientTrue)).toFixed(1)} / ${p50(cpu(clientBig)).toFixed(1)} / ${p50(cpu(run)).toFixed(1)} ms run (floor / floor with true / in lockd's binary / lockd)`,
  );
} finally {
  if (server !== null) {
    server.kill("SIGKILL");
    await server.exited;
  }
  rmSync(dir, { recursive: true, force: true });
}
