// bench/abuse.ts: its command line, and one short attack against a real
// `lockd serve` that runs to completion, prints its table row and leaves no
// process behind. The measurements themselves are not judged here (they
// belong in docs/reliability.md, from a full run).
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ATTACK_IDS, UsageError, parseAbuseArgs } from "../../bench/lib/abuse-options.ts";
import { dropOption } from "../../bench/lib/lockd-serve.ts";

const TOOL = join(import.meta.dir, "../../bench/abuse.ts");

describe("bench:abuse command line", () => {
  test("defaults: every attack, 10 s each, holders with 1 s and 5 s leases, no server options", () => {
    const options = parseAbuseArgs([])!;
    expect(options.only).toEqual(ATTACK_IDS);
    expect(options.durationMs).toBe(10_000);
    expect(options.leasesMs).toEqual([1000, 1000, 5000, 5000]);
    expect(options.ulimit).toBe(4096);
    expect(options.serverArgs).toEqual([]);
    // n, o and p: the lock-view flood, the keep-alive probes and the crowd expiry of issue 20.
    expect([options.waiters, options.viewers, options.keepalive, options.expirers]).toEqual([1000, 64, 64, 15_360]);
    expect(ATTACK_IDS.slice(-3)).toEqual(["n", "o", "p"]);
  });

  test("--only keeps the attacks in their order; everything after -- goes to the server", () => {
    const options = parseAbuseArgs(["--only", "h,a", "--duration=2s", "--", "--max-sessions-per-source", "64", "--io-timeout=1s"])!;
    expect(options.only).toEqual(["a", "h"]);
    expect(options.durationMs).toBe(2000);
    expect(options.serverArgs).toEqual(["--max-sessions-per-source", "64", "--io-timeout=1s"]);
  });

  test("bad input names the flag", () => {
    expect(() => parseAbuseArgs(["--only", "a,z"])).toThrow(/--only: unknown attack "z"/);
    expect(() => parseAbuseArgs(["--duration", "soon"])).toThrow(/--duration/);
    expect(() => parseAbuseArgs(["--flood", "-3"])).toThrow(/--flood/);
    expect(() => parseAbuseArgs(["--max-sessions-per-source", "64"])).toThrow(/unknown option --max-sessions-per-source \(lockd serve options go after --\)/);
    expect(() => parseAbuseArgs(["--rest"])).toThrow(UsageError);
    expect(parseAbuseArgs(["--help"])).toBeNull();
  });

  test("an option the server does not know is dropped with its value, in both spellings", () => {
    expect(dropOption(["--a", "1", "--new", "64", "--b=2"], "--new")).toEqual(["--a", "1", "--b=2"]);
    expect(dropOption(["--new=64", "--b", "2"], "--new")).toEqual(["--b", "2"]);
    expect(dropOption(["--new", "--b", "2"], "--new")).toEqual(["--b", "2"]);
  });
});

test("one short attack against a real lockd serve: a table row, the unknown server option reported, no process left", async () => {
  const proc = Bun.spawn(
    [process.execPath, TOOL, "--only", "h", "--duration", "500ms", "--rest", "500ms", "--after", "0s", "--churners", "2", "--leases", "5s", "--", "--no-such-option", "1"],
    { stdin: "ignore", stdout: "pipe", stderr: "pipe" },
  );
  const timer = setTimeout(() => proc.kill("SIGKILL"), 18_000);
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  // 0, or 1 if the holder lost its lock on this busy machine; 2 would be a failure of the tool.
  expect([0, 1]).toContain(code);
  expect(out).toMatch(/^\| h: new connections/m);
  expect(out).toContain("NOT KNOWN to this server, so run without: --no-such-option");
  expect(out).toMatch(/Machine: \d+ cores/);
  const pids = /pids server (\d+), legit (\d+), attacker (\d+)/.exec(err);
  expect(pids).not.toBeNull();
  for (const pid of pids!.slice(1)) {
    // Gone, or (pid reused) no longer one of ours.
    const cmdline = `/proc/${pid}/cmdline`;
    if (existsSync(cmdline)) expect(readFileSync(cmdline, "utf8")).not.toMatch(/abuse|main\.ts/);
  }
}, 20_000);
