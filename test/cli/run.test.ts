/** `lockd run` as a user runs it: a subprocess against an in-process server. */
import { afterEach, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { constants as osConstants } from "node:os";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Wakeup } from "../helpers/events.ts";
import { startServer } from "../helpers/wire.ts";
import { alive } from "../helpers/pids.ts";
import { freePort, freePorts } from "../helpers/ports.ts";
import { FakeServer } from "../client/fake-server.ts";
import { delayedLine } from "../../src/cli/run.ts";
import { LockDelayedError } from "../../src/client/errors.ts";
import { ErrorCode, FLAG_RECLAIM, FLAG_RECLAIMABLE, FLAG_REPLY, FrameType, OPTION_TRY, WAITING_REPLY_FRAME, decodeAcquire, encodeAcquired, encodeError } from "../../src/protocol/index.ts";
import { engineOf } from "../helpers/engine.ts";

const ROOT = resolve(import.meta.dir, "../..");
const MAIN = resolve(ROOT, "src/cli/main.ts");
const CHILD = resolve(ROOT, "test/fixtures/run-child.ts");

/** A running process whose stdout is read line by line, as lines arrive. */
class Proc {
  readonly lines: string[] = [];
  stderr = "";
  private readonly events = new Wakeup();
  readonly done: Promise<number>;
  /** Exited, and all its output read: a line that is not there now never comes. */
  private finished = false;

  constructor(readonly proc: Bun.Subprocess<"ignore", "pipe", "pipe">) {
    const pump = async () => {
      const decoder = new TextDecoder();
      let partial = "";
      for await (const chunk of proc.stdout) {
        partial += decoder.decode(chunk, { stream: true });
        const parts = partial.split("\n");
        partial = parts.pop()!;
        this.lines.push(...parts);
        this.wake();
      }
    };
    const errors = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of proc.stderr) {
        this.stderr += decoder.decode(chunk, { stream: true });
        this.wake();
      }
    })();
    this.done = Promise.all([pump(), errors, proc.exited]).then(([, , code]) => {
      this.finished = true;
      this.wake();
      return code;
    });
  }

  private wake(): void {
    this.events.wake();
  }

  /** The first line matching `check`, waiting for output; rejects after `ms`, or at once if the process exited without it. */
  line(check: (line: string) => boolean, ms = 10_000): Promise<string> {
    const describe = () => `a line; stdout: ${JSON.stringify(this.lines)}; stderr: ${this.stderr}`;
    return this.events.until(
      () => {
        const found = this.lines.find(check);
        if (found === undefined && this.finished) throw new Error(`exited without ${describe()}`);
        return found;
      },
      ms,
      describe,
    );
  }

  /** Waits until stderr contains `text`; rejects after `ms`, or at once if the process exited without it. */
  errContains(text: string, ms = 10_000): Promise<true> {
    return this.events.until(
      () => {
        if (this.stderr.includes(text)) return true;
        if (this.finished) throw new Error(`exited without ${JSON.stringify(text)} on stderr; stderr: ${this.stderr}`);
        return undefined;
      },
      ms,
      () => `stderr containing ${JSON.stringify(text)}; stderr: ${this.stderr}`,
    );
  }

  /** The child's first line: its pid and LOCKD_* environment. */
  async child(): Promise<{ pid: number; token: string | null; lock: string | null; slot: string | null }> {
    return JSON.parse(await this.line((l) => l.startsWith("{")));
  }

  async exit(ms = 15_000): Promise<number> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const limit = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`did not exit in ${ms} ms; stderr: ${this.stderr}`)), ms)));
    try {
      return await Promise.race([this.done, limit]);
    } finally {
      clearTimeout(timer);
    }
  }
}

const started: Proc[] = [];
const childPids: number[] = [];

afterEach(() => {
  for (const p of started.splice(0)) p.proc.kill("SIGKILL");
  for (const pid of childPids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
});

function lockdRun(port: number | string, args: string[], env: Record<string, string> = {}): Proc {
  const server = typeof port === "number" ? `127.0.0.1:${port}` : port;
  const proc = Bun.spawn([process.execPath, MAIN, "run", "--server", server, ...args], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, ...env },
  });
  const p = new Proc(proc);
  started.push(p);
  return p;
}

function child(...args: string[]): string[] {
  return ["--", process.execPath, CHILD, ...args];
}

test("the child sees LOCKD_TOKEN and LOCKD_LOCK, and its exit code is lockd run's", async () => {
  await using server = startServer();
  const run = lockdRun(server.port, ["jobs/env", ...child("exit", "7")]);
  const seen = await run.child();
  expect(seen.token).toMatch(/^[1-9]\d*$/);
  expect(seen.lock).toBe("jobs/env");
  expect(await run.exit()).toBe(7);
  const ok = lockdRun(server.port, ["jobs/env", ...child("exit", "0")]);
  expect(BigInt((await ok.child()).token!)).toBeGreaterThan(BigInt(seen.token!));
  expect(await ok.exit()).toBe(0);
  expect(engineOf(server).sessions.size).toBe(0);
});

test("the server comes from LOCKD_SERVER when --server is not given", async () => {
  await using server = startServer();
  const proc = Bun.spawn([process.execPath, MAIN, "run", "jobs/env-server", ...child("exit", "3")], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, LOCKD_SERVER: `127.0.0.1:${server.port}` },
  });
  const run = new Proc(proc);
  started.push(run);
  expect((await run.child()).lock).toBe("jobs/env-server");
  expect(await run.exit()).toBe(3);
});

test("a second run with --try exits with the busy code (1, or -E N); -w gives up with 75", async () => {
  await using server = startServer();
  const holder = lockdRun(server.port, ["jobs/busy", ...child("hold")]);
  const held = await holder.child();
  childPids.push(held.pid);
  const busy = lockdRun(server.port, ["--try", "jobs/busy", ...child("exit", "0")]);
  expect(await busy.exit()).toBe(1);
  expect(busy.lines).toEqual([]); // the command never ran
  expect(busy.stderr).toContain("is held");
  const busyE = lockdRun(server.port, ["-n", "-E", "3", "jobs/busy", ...child("exit", "0")]);
  expect(await busyE.exit()).toBe(3);
  const timedOut = lockdRun(server.port, ["-w", "300ms", "jobs/busy", ...child("exit", "0")]);
  expect(await timedOut.exit()).toBe(75);
  expect(timedOut.lines).toEqual([]);
  holder.proc.kill("SIGTERM"); // forwarded: the child prints SIGTERM and exits 42
  await holder.line((l) => l === "SIGTERM");
  expect(await holder.exit()).toBe(42);
});

test("--try on a name held back by a lock-delay exits with the busy code (1, or -E N) and one line saying so, with the server's remaining time", async () => {
  // A server inside a lock-delay (after a failover or restart): TRY gets LOCK_DELAYED, a claim without TRY would queue.
  using server = new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE && (frame.body[1]! & OPTION_TRY) !== 0) {
      conn.socket.end(encodeError(ErrorCode.LOCK_DELAYED, "lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another 1800 ms"));
    } else {
      conn.socket.write(WAITING_REPLY_FRAME);
    }
  });
  const delayed = lockdRun(server.port, ["--try", "jobs/delayed", ...child("exit", "0")]);
  expect(await delayed.exit()).toBe(1);
  expect(delayed.lines).toEqual([]); // the command never ran
  expect(delayed.stderr).toBe(
    'lockd run: lock "jobs/delayed" is held back by a lock-delay after a failover or restart of the lock server (a holder an earlier server granted may still believe it holds it); no grant for another 1800 ms, the server says: it can be retried then\n',
  );
  const delayedE = lockdRun(server.port, ["-n", "-E", "3", "jobs/delayed", ...child("exit", "0")]);
  expect(await delayedE.exit()).toBe(3);
  expect(delayedE.lines).toEqual([]);
  expect(server.conns).toHaveLength(2); // one claim each, not retried
});

test("the lock-delay line quotes a server message without a number of ms whole, and says retry later", () => {
  const start = 'lock "x" is held back by a lock-delay after a failover or restart of the lock server (a holder an earlier server granted may still believe it holds it); ';
  expect(delayedLine(new LockDelayedError("x", "lock-delay: wait a little"))).toBe(`${start}the server says: lock-delay: wait a little; it can be retried later`);
  expect(delayedLine(new LockDelayedError("x", ""))).toBe(`${start}it can be retried later`);
  expect(delayedLine(new LockDelayedError("x", "no grant for another 12345 ms"))).toBe(`${start}no grant for another 12345 ms, the server says: it can be retried then`);
});

test("a waiting run gets the lock when the holder's command ends", async () => {
  await using server = startServer();
  const holder = lockdRun(server.port, ["jobs/queue", ...child("hold")]);
  childPids.push((await holder.child()).pid);
  const waiter = lockdRun(server.port, ["--wait", "20s", "jobs/queue", ...child("exit", "5")]);
  // The waiter is queued once the server has two sessions.
  const deadline = performance.now() + 10_000;
  while (engineOf(server).sessions.size < 2 && performance.now() < deadline) await Bun.sleep(10);
  expect(engineOf(server).sessions.size).toBe(2);
  expect(waiter.lines).toEqual([]);
  holder.proc.kill("SIGINT"); // forwarded; the fixture does not handle SIGINT, so it dies of it
  expect(await holder.exit()).toBe(130);
  expect((await waiter.child()).lock).toBe("jobs/queue");
  expect(await waiter.exit()).toBe(5);
});

test("stopping the server: the child gets SIGTERM and lockd run exits 76 (lock lost)", async () => {
  const server = startServer();
  try {
    const run = lockdRun(server.port, ["--lease", "2s", "jobs/lost", ...child("hold")]);
    childPids.push((await run.child()).pid);
    await server.stop();
    await run.line((l) => l === "SIGTERM");
    expect(await run.exit()).toBe(76);
    expect(run.stderr).toContain("SHUTTING_DOWN");
  } finally {
    await server.stop();
  }
});

test("a child that ignores SIGTERM gets SIGKILL after --kill-after", async () => {
  const server = startServer();
  try {
    const run = lockdRun(server.port, ["--kill-after", "300ms", "jobs/stubborn", ...child("ignore-term")]);
    const { pid } = await run.child();
    childPids.push(pid);
    await server.stop();
    await run.line((l) => l === "SIGTERM ignored");
    expect(await run.exit()).toBe(76);
    expect(run.stderr).toContain("SIGKILL");
    expect(alive(pid)).toBe(false);
  } finally {
    await server.stop();
  }
});

/** Running: not gone and not a zombie (where PID 1 does not reap, killed orphans stay zombies). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(")") + 2));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT" && existsSync("/proc/self/stat")) return false;
    return alive(pid);
  }
}

/**
 * COMMAND as a shell with children of its own: `sleep` in the background
 * (and, with `stubborn`, one that ignores SIGTERM), their pids printed, then
 * `wait` (or `exit 0` with `leave`).
 */
function tree(options: { stubborn?: boolean; leave?: boolean } = {}): string[] {
  const script = [
    'sleep 123 & echo "grandchild $!"',
    // Ignored before the fork, so the child ignores SIGTERM from its first instruction (no race with "ready").
    options.stubborn ? 'trap "" TERM; sleep 124 & echo "grandchild $!"; trap - TERM' : "",
    "echo ready",
    options.leave ? "exit 0" : "wait",
  ].filter((part) => part !== "").join("; ");
  return ["--", "sh", "-c", script];
}

/** The grandchildren's pids, once COMMAND printed "ready" (checked running unless COMMAND may be exiting already). */
async function grandchildren(run: Proc, check = true): Promise<number[]> {
  await run.line((l) => l === "ready");
  const pids = run.lines.filter((l) => l.startsWith("grandchild ")).map((l) => Number(l.split(" ")[1]));
  childPids.push(...pids);
  if (check) for (const pid of pids) expect(running(pid)).toBe(true);
  return pids;
}

test("lock lost: SIGTERM reaches COMMAND's whole process group, grandchildren too", async () => {
  const server = startServer();
  try {
    const run = lockdRun(server.port, ["--lease", "2s", "jobs/tree-lost", ...tree()]);
    const pids = await grandchildren(run);
    await server.stop();
    expect(await run.exit()).toBe(76);
    expect(run.stderr).toMatch(/sending SIGTERM to process group \d+/);
    expect(pids.filter(running)).toEqual([]);
  } finally {
    await server.stop();
  }
});

test("SIGTERM (and SIGHUP) to lockd run reach COMMAND's grandchildren", async () => {
  await using server = startServer();
  for (const signal of ["SIGTERM", "SIGHUP"] as const) {
    const run = lockdRun(server.port, ["jobs/tree-signal", ...tree()]);
    const pids = await grandchildren(run);
    run.proc.kill(signal);
    expect(await run.exit()).toBe(128 + osConstants.signals[signal]); // sh died of the signal it was passed
    expect(pids.filter(running)).toEqual([]);
  }
  expect(engineOf(server).sessions.size).toBe(0);
});

test("--kill-after: a grandchild that ignores SIGTERM gets SIGKILL once the lock is lost", async () => {
  const server = startServer();
  try {
    const run = lockdRun(server.port, ["--lease", "2s", "--kill-after", "300ms", "jobs/tree-stubborn", ...tree({ stubborn: true })]);
    const pids = await grandchildren(run);
    await server.stop();
    expect(await run.exit()).toBe(76);
    expect(run.stderr).toMatch(/process group \d+ still running 300 ms after SIGTERM; sending SIGKILL/);
    expect(pids.filter(running)).toEqual([]);
  } finally {
    await server.stop();
  }
});

test("processes COMMAND leaves behind are stopped before the lock is released; COMMAND's exit code stands", async () => {
  await using server = startServer();
  const run = lockdRun(server.port, ["--kill-after", "300ms", "jobs/tree-leave", ...tree({ stubborn: true, leave: true })]);
  const pids = await grandchildren(run, false);
  expect(pids.length).toBe(2);
  // The next holder looks at them as soon as it gets the lock: already gone (or zombies) by then.
  const look = pids.map((pid) => `echo "${pid} $(cut -d' ' -f3 /proc/${pid}/stat 2>/dev/null || echo gone)"`).join("; ");
  const next = lockdRun(server.port, ["--wait", "20s", "jobs/tree-leave", "--", "sh", "-c", look]);
  expect(await next.exit()).toBe(0);
  for (const line of next.lines) expect(line).toMatch(/^\d+ (gone|Z|X)$/);
  expect(next.lines.length).toBe(2);
  expect(await run.exit()).toBe(0);
  expect(run.stderr).toMatch(/COMMAND exited; sending SIGTERM to the processes it left in process group \d+/);
  expect(run.stderr).toContain("sending SIGKILL");
  expect(pids.filter(running)).toEqual([]);
});

test("interactive (stdin a terminal): COMMAND stays in the terminal's job, so /dev/tty and job control work", async () => {
  await using server = startServer();
  let output = "";
  const decoder = new TextDecoder();
  const seen = new Wakeup();
  const script = 'echo "pgrp $(cut -d" " -f5 /proc/$$/stat) lockd $(cut -d" " -f5 /proc/$PPID/stat)"; (: </dev/tty) 2>/dev/null && echo "ctty ok"; echo tty-script-end';
  const proc = Bun.spawn([process.execPath, MAIN, "run", "--server", `127.0.0.1:${server.port}`, "jobs/tty", "--", "sh", "-c", script], {
    terminal: {
      data: (_terminal, data) => {
        output += decoder.decode(data, { stream: true });
        seen.wake();
      },
    },
  });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
  try {
    expect(await proc.exited).toBe(0);
    // What a process writes to its terminal reaches the other side from a kernel
    // worker, possibly after the exit is seen: wait for the last line, not the exit.
    await seen.until(() => (output.includes("tty-script-end") ? true : undefined), 10_000, () => `the last line; got ${output}`);
  } finally {
    clearTimeout(timer);
    proc.terminal?.close();
  }
  const match = /pgrp (\d+) lockd (\d+)/.exec(output);
  expect(match?.[1]).toBe(match?.[2]); // same process group as lockd run: the terminal's foreground job
  expect(output).toContain("ctty ok"); // the terminal is still COMMAND's controlling terminal
});

test("interactive: Ctrl-C reaches COMMAND once (from the terminal), not a second time from lockd run", async () => {
  await using server = startServer();
  let output = "";
  const decoder = new TextDecoder();
  const seen = new Wakeup();
  const proc = Bun.spawn([process.execPath, MAIN, "run", "--server", `127.0.0.1:${server.port}`, "jobs/tty-int", ...child("count-int")], {
    terminal: {
      data: (_terminal, data) => {
        output += decoder.decode(data, { stream: true });
        seen.wake();
      },
    },
  });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
  try {
    const pid = await seen.until(() => /"pid":(\d+)/.exec(output)?.[1], 10_000, () => `the child's line; got ${output}`);
    childPids.push(Number(pid));
    proc.terminal!.write("\x03"); // Ctrl-C: the terminal sends SIGINT to the foreground job, lockd run and COMMAND
    await seen.until(() => (output.includes("SIGINT 1") ? true : undefined), 10_000, () => `SIGINT 1; got ${output}`);
    // Any SIGINT lockd run passed on was sent before this SIGTERM, which it passes on too.
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(42);
    // The terminal's output can reach this side after the exit is seen (a kernel worker
    // hands it over): wait for COMMAND's last line, not just the exit.
    const last = await seen.until(() => /SIGTERM after \d+ SIGINT/.exec(output)?.[0], 10_000, () => `COMMAND's last line; got ${output}`);
    expect(last).toBe("SIGTERM after 1 SIGINT");
  } finally {
    clearTimeout(timer);
    proc.terminal?.close();
  }
});

test("killing the server process (SIGKILL): the lock is lost and the child gets SIGTERM", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-run-"));
  const serve = Bun.spawn([process.execPath, MAIN, "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--data-dir", dataDir], {
    stdin: "ignore",
    stdout: "ignore",
    stderr: "pipe",
  });
  try {
    // serve logs its address as JSON on stderr.
    let port = 0;
    const decoder = new TextDecoder();
    let text = "";
    for await (const chunk of serve.stderr) {
      text += decoder.decode(chunk, { stream: true });
      const match = /"listen":"127\.0\.0\.1:(\d+)"/.exec(text);
      if (match) {
        port = Number(match[1]);
        break;
      }
    }
    expect(port).toBeGreaterThan(0);
    const run = lockdRun(port, ["--lease", "2s", "jobs/killed", ...child("hold")]);
    childPids.push((await run.child()).pid);
    serve.kill("SIGKILL");
    await run.line((l) => l === "SIGTERM");
    expect(await run.exit()).toBe(76);
  } finally {
    serve.kill("SIGKILL");
    await serve.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("exit codes: unreachable server 69, bad usage 64, missing command 127, SIGINT while waiting 130", async () => {
  const deadPort = await freePort();
  // Unreachable is retried within --wait (30 s without it), then 69, not 75: the lock was never refused.
  const unreachable = lockdRun(deadPort, ["-w", "300ms", "jobs/x", ...child("exit", "0")]);
  expect(await unreachable.exit()).toBe(69);
  expect(unreachable.stderr).toContain("lock server unavailable");
  expect(unreachable.lines).toEqual([]);

  await using server = startServer();
  for (const args of [
    ["jobs/x"], // no -- COMMAND
    ["--", "true"], // no NAME
    ["--lease", "0", "jobs/x", "--", "true"],
    ["--try", "--wait", "1s", "jobs/x", "--", "true"],
    ["--bogus", "jobs/x", "--", "true"],
    ["", "--", "true"], // empty lock name
  ]) {
    const bad = lockdRun(server.port, args);
    expect({ args, code: await bad.exit() }).toEqual({ args, code: 64 });
  }
  // flock's -w counts seconds, a bare lockd duration milliseconds: a -w without a unit is refused, not guessed.
  for (const wait of ["5", "0.5"]) {
    const bare = lockdRun(server.port, ["-w", wait, "jobs/x", "--", "true"]);
    expect(await bare.exit()).toBe(64);
    expect(bare.stderr).toContain(`"${wait}" has no unit: write ${wait}s or ${wait}ms`);
  }
  const missing = lockdRun(server.port, ["jobs/x", "--", "/nonexistent/command"]);
  expect(await missing.exit()).toBe(127);

  const holder = lockdRun(server.port, ["jobs/int", ...child("hold")]);
  childPids.push((await holder.child()).pid);
  const waiter = lockdRun(server.port, ["jobs/int", ...child("exit", "0")]);
  const deadline = performance.now() + 10_000;
  while (engineOf(server).sessions.size < 2 && performance.now() < deadline) await Bun.sleep(10);
  waiter.proc.kill("SIGINT");
  expect(await waiter.exit()).toBe(130);
  expect(waiter.lines).toEqual([]);
});

test("--server takes a list: the first address refuses, the second grants", async () => {
  await using server = startServer();
  const run = lockdRun(`127.0.0.1:${await freePort()},127.0.0.1:${server.port}`, ["jobs/list", ...child("exit", "4")]);
  expect((await run.child()).lock).toBe("jobs/list");
  expect(await run.exit()).toBe(4);
  // Moving on from an address with no server (a failover standby) is the normal state: no retry line.
  expect(run.stderr).toBe("");
  const bad = lockdRun(`127.0.0.1:${server.port},nope`, ["jobs/list", ...child("exit", "0")]);
  expect(await bad.exit()).toBe(64);
  expect(bad.stderr).toContain(`element 2 of "127.0.0.1:${server.port},nope" ("nope") is not HOST:PORT`);
});

test("every address of the list dead within -w: one retry line once the claim waits, then the complete final error (with a map, naming the shard), naming each address and its 'connection refused'", async () => {
  const [p1, p2] = await freePorts(2);
  for (const [server, what] of [
    [`127.0.0.1:${p1},127.0.0.1:${p2}`, "lock server"],
    [`gen=1;alpha=127.0.0.1:${p1},127.0.0.1:${p2}`, "lock server of shard alpha"],
  ] as const) {
    const run = lockdRun(server, ["-w", "400ms", "jobs/dead", ...child("exit", "0")]);
    expect({ server, code: await run.exit() }).toEqual({ server, code: 69 });
    expect(run.lines).toEqual([]);
    const lines = run.stderr.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^lockd run: cannot connect to 127\.0\.0\.1:\d+: connection refused \(ECONNREFUSED\); retrying \(within --wait\)$/);
    expect(lines.filter((l) => l.includes("retrying"))).toHaveLength(1);
    expect(lines.at(-1)).toMatch(new RegExp(`^lockd run: lock "jobs/dead" was not granted within 400 ms \\(${what} unavailable: cannot connect to 127\\.0\\.0\\.1:${p1}: connection refused \\(ECONNREFUSED\\); cannot connect to 127\\.0\\.0\\.1:${p2}: connection refused \\(ECONNREFUSED\\)\\)$`));
  }
});

test("a server that is not up yet is retried within --wait (a cron job during a restart)", async () => {
  const port = await freePort();
  const run = lockdRun(port, ["-w", "20s", "jobs/late", ...child("exit", "6")]);
  await run.errContains("retrying"); // it has been refused at least once
  await using server = startServer({ port });
  expect((await run.child()).lock).toBe("jobs/late");
  expect(await run.exit()).toBe(6);
  expect(engineOf(server).sessions.size).toBe(0);
});

test("the clients' first-connect rule: --try, or one address without --wait, exits 69 at once; a list of two without --wait is retried", async () => {
  const [p1, p2] = await freePorts(2);
  for (const [server, flags] of [
    [`127.0.0.1:${p1}`, []],
    [`127.0.0.1:${p1},127.0.0.1:${p2}`, ["--try"]],
  ] as const) {
    const run = lockdRun(server, [...flags, "jobs/first", ...child("exit", "0")]);
    expect({ server, flags, code: await run.exit() }).toEqual({ server, flags, code: 69 });
    expect(run.lines).toEqual([]);
    expect(run.stderr).not.toContain("retrying"); // tried once: it never waited
    expect(run.stderr).toContain("lock server unavailable");
  }
  const list = lockdRun(`127.0.0.1:${p1},127.0.0.1:${p2}`, ["jobs/first", ...child("exit", "5")]);
  await list.errContains("retrying (within 30 s)"); // both refused, and waiting to try again
  await using server = startServer({ port: p2 });
  expect((await list.child()).lock).toBe("jobs/first");
  expect(await list.exit()).toBe(5);
});

test("failover: a run waiting on a server that shuts down is granted by the next server of the list", async () => {
  const first = startServer();
  try {
    await using second = startServer();
    const holder = lockdRun(first.port, ["jobs/failover", ...child("hold")]);
    childPids.push((await holder.child()).pid);
    const waiter = lockdRun(`127.0.0.1:${first.port},127.0.0.1:${second.port}`, ["-w", "20s", "jobs/failover", ...child("exit", "8")]);
    const deadline = performance.now() + 10_000;
    while (engineOf(first).sessions.size < 2 && performance.now() < deadline) await Bun.sleep(10);
    expect(engineOf(first).sessions.size).toBe(2);
    await first.stop(); // SHUTTING_DOWN to both: the holder's lock is lost (76), the waiter moves on
    expect(await holder.exit()).toBe(76);
    expect((await waiter.child()).lock).toBe("jobs/failover");
    expect(await waiter.exit()).toBe(8);
    // It moved straight on to the next address and got the lock there: nothing to report, no retry line.
    expect(waiter.stderr).toBe("");
  } finally {
    await first.stop();
  }
});

test("a waiter kicked by an operator exits 79: COMMAND never ran", async () => {
  await using server = startServer();
  const holder = lockdRun(server.port, ["jobs/kicked", ...child("hold")]);
  childPids.push((await holder.child()).pid);
  const waiter = lockdRun(server.port, ["jobs/kicked", ...child("exit", "0")]);
  const deadline = performance.now() + 10_000;
  let waiting: number | undefined;
  while (waiting === undefined && performance.now() < deadline) {
    waiting = engineOf(server).locks.get("jobs/kicked")?.head?.id;
    if (waiting === undefined) await Bun.sleep(10);
  }
  expect(engineOf(server).kick(waiting!, performance.now())).not.toBeNull();
  expect(await waiter.exit()).toBe(79);
  expect(waiter.lines).toEqual([]);
  expect(waiter.stderr).toContain("KICKED");
});

test("--help documents every exit code", async () => {
  const help = Bun.spawnSync([process.execPath, MAIN, "run", "--help"]);
  expect(help.exitCode).toBe(0);
  const text = help.stdout.toString();
  for (const code of ["1 ", "64", "69", "75", "76", "79", "127", "130"]) expect(text).toContain(`  ${code}`);
  expect(text).toContain("held back by a lock-delay"); // 1 is also --try's exit for a lock-delay
  for (const flag of ["--lease", "--wait", "-w", "-n, --try", "-E", "--conflict-exit-code", "--owner", "--kill-after", "--server", "LOCKD_SERVER"]) {
    expect(text).toContain(flag);
  }
});

/** Wait (bounded) until the server has `n` sessions: a waiter is queued once its session exists. No event for it, so polled. */
async function sessions(server: ReturnType<typeof startServer>, n: number): Promise<void> {
  const deadline = performance.now() + 10_000;
  while (engineOf(server).sessions.size < n && performance.now() < deadline) await Bun.sleep(10);
  expect(engineOf(server).sessions.size).toBe(n);
}

test("--limit 2: two runs hold at once in slots 0 and 1 (LOCKD_SLOT; LOCKD_LIMIT the env form), a third waits and gets the freed slot", async () => {
  await using server = startServer();
  const a = lockdRun(server.port, ["--limit", "2", "jobs/sem", ...child("hold")]);
  const seenA = await a.child();
  childPids.push(seenA.pid);
  const b = lockdRun(server.port, ["jobs/sem", ...child("hold")], { LOCKD_LIMIT: "2" });
  const seenB = await b.child();
  childPids.push(seenB.pid);
  expect([seenA.slot, seenB.slot]).toEqual(["0", "1"]);
  expect(BigInt(seenB.token!)).toBeGreaterThan(BigInt(seenA.token!));
  const busy = lockdRun(server.port, ["--limit", "2", "--try", "jobs/sem", ...child("exit", "0")]);
  expect(await busy.exit()).toBe(1);
  expect(busy.lines).toEqual([]);
  const third = lockdRun(server.port, ["--limit", "2", "--wait", "20s", "jobs/sem", ...child("exit", "5")]);
  await sessions(server, 3);
  expect(third.lines).toEqual([]);
  a.proc.kill("SIGTERM"); // forwarded: the child prints SIGTERM and exits 42
  expect(await a.exit()).toBe(42);
  const seenThird = await third.child();
  expect(seenThird.slot).toBe("0");
  expect(BigInt(seenThird.token!)).toBeGreaterThan(BigInt(seenB.token!));
  expect(await third.exit()).toBe(5);
  b.proc.kill("SIGTERM");
  expect(await b.exit()).toBe(42);
});

test("--shared: two runs hold at once, without LOCKD_SLOT; an exclusive run waits for both", async () => {
  await using server = startServer();
  const r1 = lockdRun(server.port, ["--shared", "jobs/rw", ...child("hold")]);
  const seen1 = await r1.child();
  childPids.push(seen1.pid);
  const r2 = lockdRun(server.port, ["--shared", "jobs/rw", ...child("hold")]);
  const seen2 = await r2.child();
  childPids.push(seen2.pid);
  expect([seen1.slot, seen2.slot]).toEqual([null, null]);
  const busy = lockdRun(server.port, ["--try", "jobs/rw", ...child("exit", "0")]);
  expect(await busy.exit()).toBe(1);
  const writer = lockdRun(server.port, ["--wait", "20s", "jobs/rw", ...child("exit", "6")]);
  await sessions(server, 3);
  r1.proc.kill("SIGTERM");
  expect(await r1.exit()).toBe(42);
  expect(writer.lines).toEqual([]); // r2 still holds
  r2.proc.kill("SIGTERM");
  expect(await r2.exit()).toBe(42);
  const seenWriter = await writer.child();
  expect(BigInt(seenWriter.token!)).toBeGreaterThan(BigInt(seen2.token!));
  expect(await writer.exit()).toBe(6);
});

test("LOCKD_SLOT is unset for an exclusive run, even when lockd run's own environment has one", async () => {
  await using server = startServer();
  const run = lockdRun(server.port, ["jobs/no-slot", ...child("exit", "0")], { LOCKD_SLOT: "7" });
  expect((await run.child()).slot).toBeNull();
  expect(await run.exit()).toBe(0);
});

test("a --limit other than the holders' exits 64 naming both limits; --shared with --limit 2, or --limit 0, is bad usage before any connection", async () => {
  await using server = startServer();
  const holder = lockdRun(server.port, ["--limit", "2", "jobs/mismatch", ...child("hold")]);
  childPids.push((await holder.child()).pid);
  for (const args of [["--limit", "3"], [], ["--shared"]]) {
    const run = lockdRun(server.port, [...args, "jobs/mismatch", ...child("exit", "0")]);
    expect(await run.exit()).toBe(64);
    expect(run.lines).toEqual([]); // COMMAND never ran
    expect(run.stderr).toContain("live sessions claim it with limit 2");
    expect(run.stderr).toContain(`asked for limit ${args[0] === "--limit" ? 3 : 1}`);
    expect(run.stderr).toContain('every run of "jobs/mismatch" must use the same --limit');
  }
  using never = new FakeServer(() => {});
  const shared = lockdRun(never.port, ["--shared", "--limit", "2", "jobs/x", ...child("exit", "0")]);
  expect(await shared.exit()).toBe(64);
  expect(shared.stderr).toContain("--shared is a claim of limit 1, not --limit 2");
  const zero = lockdRun(never.port, ["--limit", "0", "jobs/x", ...child("exit", "0")]);
  expect(await zero.exit()).toBe(64);
  expect(zero.stderr).toContain("--limit");
  expect(never.conns).toHaveLength(0);
  holder.proc.kill("SIGTERM");
  expect(await holder.exit()).toBe(42);
});

/**
 * A server with reclaim on (protocol.md section 14): grants token 9 flagged
 * RECLAIMABLE, answers heartbeats, grants a reclaim of token 9 (or, with
 * `refuse`, refuses it); `stop()` is its clean stop, SHUTTING_DOWN with RECLAIM.
 */
function reclaimServer(refuse = false) {
  const grant = encodeAcquired(9, FLAG_REPLY | FLAG_RECLAIMABLE);
  const reclaims: number[] = [];
  const server = new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE) {
      const decoded = decodeAcquire(frame.body, 0, frame.body.length);
      const reclaim = decoded.ok ? decoded.request.reclaim : undefined;
      if (reclaim !== undefined) reclaims.push(reclaim.token);
      if (reclaim !== undefined && (refuse || reclaim.token !== 9)) {
        conn.socket.write(encodeError(ErrorCode.RECLAIM_REFUSED, "no published grant of this name with that token"));
        conn.socket.end();
      } else conn.socket.write(grant);
    } else if (frame.type === FrameType.HEARTBEAT) conn.socket.write(grant);
  });
  const stop = () => {
    const frame = encodeError(ErrorCode.SHUTTING_DOWN, "server is shutting down cleanly");
    frame[1] = FLAG_RECLAIM;
    server.conns[0]!.socket.write(frame);
    server.conns[0]!.socket.end();
  };
  return { server, reclaims, stop };
}

test("a clean stop that lets holders reclaim: COMMAND keeps running with the same LOCKD_TOKEN, one line on stderr says so", async () => {
  const { server, reclaims, stop } = reclaimServer();
  using _server = server;
  const run = lockdRun(server.port, ["--lease", "2s", "jobs/reclaim", ...child("hold")]);
  const seen = await run.child();
  childPids.push(seen.pid);
  expect(seen.token).toBe("9");
  stop();
  await run.errContains("reclaimed with the same token 9, COMMAND goes on");
  expect(reclaims).toEqual([9]);
  // Held on: heartbeats on the new connection for longer than the old deadline (0.8 x lease), COMMAND untouched.
  await server.until(() => server.conns[1]!.frames.filter((f) => f.type === FrameType.HEARTBEAT).length >= 5, 10_000, "heartbeats after the reclaim");
  expect(server.conns[1]!.frames.at(-1)!.at - server.conns[0]!.frames.at(-1)!.at).toBeGreaterThan(1600);
  expect(run.lines).not.toContain("SIGTERM");
  expect(run.stderr.trim().split("\n")).toHaveLength(1);
  // COMMAND ends as usual: its own exit status, not 76.
  run.proc.kill("SIGTERM");
  await run.line((l) => l === "SIGTERM");
  expect(await run.exit()).toBe(42);
});

test("a silent server (a HEARTBEAT unanswered for lease/4, the connection open): the lock is reclaimed on a second connection, COMMAND keeps running with the same LOCKD_TOKEN", async () => {
  const grant = encodeAcquired(9, FLAG_REPLY | FLAG_RECLAIMABLE);
  let silent: unknown = null;
  using server = new FakeServer((conn, frame) => {
    if (conn !== silent) conn.socket.write(grant); // the ACQUIRE (or the reclaim) and every HEARTBEAT
  });
  const run = lockdRun(server.port, ["--lease", "2s", "jobs/silence", ...child("hold")]);
  const seen = await run.child();
  childPids.push(seen.pid);
  expect(seen.token).toBe("9");
  silent = server.conns[0];
  await run.errContains("reclaimed with the same token 9, COMMAND goes on");
  const reclaim = decodeAcquire(server.conns[1]!.frames[0]!.body, 0, server.conns[1]!.frames[0]!.body.length);
  expect(reclaim.ok && reclaim.request.reclaim?.token).toBe(9);
  await server.until(() => server.conns[0]!.closed, 5000, "the silent connection closed");
  // Held on: heartbeats on the new connection for longer than the old deadline (0.8 x lease), COMMAND untouched.
  await server.until(() => server.conns[1]!.frames.filter((f) => f.type === FrameType.HEARTBEAT).length >= 5, 10_000, "heartbeats after the reclaim");
  expect(server.conns[1]!.frames.at(-1)!.at - server.conns[0]!.frames.at(-1)!.at).toBeGreaterThan(1600);
  expect(run.lines).not.toContain("SIGTERM");
  expect(run.stderr.trim().split("\n")).toHaveLength(1);
  run.proc.kill("SIGTERM");
  await run.line((l) => l === "SIGTERM");
  expect(await run.exit()).toBe(42);
});

test("--no-reclaim, or a refused reclaim: the lock is lost, COMMAND gets SIGTERM and lockd run exits 76", async () => {
  for (const [args, refuse, why] of [
    [["--no-reclaim"], false, "SHUTTING_DOWN"],
    [[], true, "RECLAIM_REFUSED"],
  ] as const) {
    const { server, reclaims, stop } = reclaimServer(refuse);
    using _server = server;
    const run = lockdRun(server.port, ["--lease", "2s", ...args, "jobs/no-reclaim", ...child("hold")]);
    childPids.push((await run.child()).pid);
    stop();
    await run.line((l) => l === "SIGTERM");
    expect(await run.exit()).toBe(76);
    expect(run.stderr).toContain(why);
    expect(run.stderr).not.toContain("reclaimed");
    expect(reclaims).toEqual(refuse ? [9] : []);
  }
});
