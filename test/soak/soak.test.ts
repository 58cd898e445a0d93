// The soak in miniature, in `npm test`: 200 sessions in two client
// processes for 12 s, with a client process killed and another stopped
// every 3 s. The external checker must see no violation and the server's
// fds must come back. (Too short for the RSS trend: that needs `npm run soak`.)
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

test("soak, CI-sized: churn, contention, kills and stalls with no ownership or token violation, no fd leak", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lockd-soak-"));
  dirs.push(dir);
  const json = join(dir, "soak.json");
  const proc = Bun.spawn(
    [process.execPath, join(import.meta.dir, "soak.ts"), "--minutes", "0.2", "--sessions", "200", "--workers", "2", "--fault-every", "3", "--json", json],
    { stdin: "ignore", stdout: "pipe", stderr: "pipe" },
  );
  const timer = setTimeout(() => proc.kill("SIGTERM"), 80_000); // the soak cleans up on SIGTERM
  try {
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    if (code !== 0) throw new Error(`soak exited ${code}\n${out}\n${err}`);
    const report = JSON.parse(readFileSync(json, "utf8"));
    expect(report.grants).toBeGreaterThan(100);
    expect(report.kills).toBeGreaterThanOrEqual(2);
    expect(report.stalls).toBeGreaterThanOrEqual(2);
    const c = report.checker;
    expect([c.duplicateTokens, c.overlaps, c.tokenOrder, c.endedBeforeStart, c.unended]).toEqual([0, 0, 0, 0, 0]);
    expect(report.fds.afterClientsLeft).toBeLessThanOrEqual(report.fds.baseline);
  } finally {
    clearTimeout(timer);
    proc.kill("SIGKILL");
    await proc.exited;
  }
}, 100_000);
