/**
 * Loaded into the bench's `lockd serve` (bun --preload, bench/lib/lockd-serve.ts):
 * how late the server's own event loop runs. A 10 ms timer notes how late
 * it fires; every 250 ms one JSON line on stderr gives the window's worst
 * lateness and the process's CPU time in that window. A late loop with CPU
 * time near the window's length was busy (the server's own work); a late
 * loop with little CPU time was waiting for a core (the machine's load).
 * Both timers are unref'd: they never keep the server alive.
 */
const TICK_MS = 10;
const WINDOW_MS = 250;
let due = performance.now() + TICK_MS;
let worst = 0;
let cpu = process.cpuUsage();
setInterval(() => {
  const now = performance.now();
  if (now - due > worst) worst = now - due;
  due = now + TICK_MS;
}, TICK_MS).unref();
setInterval(() => {
  const used = process.cpuUsage(cpu);
  cpu = process.cpuUsage();
  process.stderr.write(`${JSON.stringify({ msg: "bench loop lag", maxLagMs: Math.round(worst), cpuMs: Math.round((used.user + used.system) / 1000), windowMs: WINDOW_MS })}\n`);
  worst = 0;
}, WINDOW_MS).unref();
