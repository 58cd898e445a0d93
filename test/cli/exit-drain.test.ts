/**
 * The CLI exits without losing what it wrote last (src/cli/exit.ts): Bun
 * keeps what a full pipe cannot take yet in memory, and process.exit()
 * dropped it. A server whose log reader lags lost its last line (shutdown.stopped).
 */
import { expect, test } from "bun:test";
import { closeSync, constants, mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePorts, refusedConnection } from "../helpers/ports.ts";

const ROOT = resolve(import.meta.dir, "../..");
const MAIN = resolve(ROOT, "src/cli/main.ts");
const EXIT = resolve(ROOT, "src/cli/exit.ts");

/** A Bun program that writes `lines` lines to stderr, says "written" on stdout, then ends with `end`. */
function writer(lines: number, end: string): string[] {
  const source = `
    import { exitWhenDrained } from ${JSON.stringify(EXIT)};
    for (let i = 0; i < ${lines}; i++) process.stderr.write("line " + i + " " + "x".repeat(100) + "\\n");
    process.stderr.write("LAST\\n");
    process.stdout.write("written\\n");
    ${end}
  `;
  return [process.execPath, "-e", source];
}

/**
 * A log that is read late: a FIFO with a reader open that never reads (so
 * writes neither fail nor drain, unlike a pipe of Bun.spawn, which the
 * parent drains in the background). `read()` reads it whole, from that
 * reader, until every writer has exited.
 */
function lateLog(): { fd: number; read(): Promise<string>; close(): void } {
  const dir = mkdtempSync(join(tmpdir(), "lockd-drain-"));
  const fifo = join(dir, "log.fifo");
  expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
  const idle = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  const fd = openSync(fifo, constants.O_WRONLY);
  return {
    fd,
    read: () => new Response(Bun.file(idle).stream()).text(),
    close() {
      try {
        closeSync(idle);
      } catch {
        // closed with its stream
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Until `line` has come on `stdout` (or it ended). */
async function said(stdout: ReadableStream<Uint8Array>, line: string): Promise<void> {
  const out = stdout.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!text.includes(`${line}\n`)) {
    const { value, done } = await out.read();
    if (done) return;
    text += decoder.decode(value, { stream: true });
  }
}

/** Run `argv` with its stderr unread until it says "written" on stdout; then read stderr whole. */
async function lateReader(argv: string[]): Promise<{ code: number; lines: string[] }> {
  const log = lateLog();
  const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "pipe", stderr: log.fd });
  closeSync(log.fd);
  const guard = setTimeout(() => proc.kill("SIGKILL"), 20_000);
  try {
    await said(proc.stdout, "written");
    const text = await log.read();
    return { code: await proc.exited, lines: text.split("\n").filter((line) => line !== "") };
  } finally {
    clearTimeout(guard);
    log.close();
  }
}

test("5,001 lines to a log read late: all arrive and the exit code stands", async () => {
  // Why exitWhenDrained exists: the pipe holds 64 KiB, the rest waits in Bun's memory, and
  // process.exit() there delivered about 590 of these lines when measured. That is Bun's
  // behaviour, not ours, and not every run shows it (a loaded run once got all 5,001), so it
  // is not asserted here; the lockd serve test below failed on the old exit.
  const drained = await lateReader(writer(5000, "exitWhenDrained(3);"));
  expect({ code: drained.code, count: drained.lines.length, last: drained.lines.at(-1) }).toEqual({ code: 3, count: 5001, last: "LAST" });
}, 30_000);

test("the bound: a handle left open, or a reader that never reads, does not hold the exit", async () => {
  const open = Bun.spawn(writer(0, "setInterval(() => {}, 1000); exitWhenDrained(5, 200);"), { stdin: "ignore", stdout: "ignore", stderr: "ignore" });
  expect(await open.exited).toBe(5);
  // 5,001 lines into a log nobody reads cannot all leave; the process still exits, with its code.
  const log = lateLog();
  try {
    const stuck = Bun.spawn(writer(5000, "exitWhenDrained(6, 200);"), { stdin: "ignore", stdout: "ignore", stderr: log.fd });
    closeSync(log.fd);
    expect(await stuck.exited).toBe(6);
  } finally {
    log.close();
  }
}, 30_000);

test('lockd serve whose log reader lags: the log ends with shutdown.stopped, nothing lost', async () => {
  // Nobody reads the log while the server runs: the debug lines of 600 sessions
  // fill the pipe (64 KiB) and the rest waits in the server's memory.
  const log = lateLog();
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-drain-data-"));
  const [port, opsPort] = await freePorts(2);
  const serve = Bun.spawn(
    [process.execPath, MAIN, "serve", "--listen", `127.0.0.1:${port}`, "--ops", `127.0.0.1:${opsPort}`, "--data-dir", dataDir, "--log-level", "debug", "--shutdown-grace", "0s"],
    { stdin: "ignore", stdout: "ignore", stderr: log.fd },
  );
  closeSync(log.fd);
  const guard = setTimeout(() => serve.kill("SIGKILL"), 25_000);
  try {
    // The log, which says when it listens, is not read yet: wait for the port.
    for (let attempt = 0; await refusedConnection(port!); attempt++) {
      if (attempt >= 400 || serve.exitCode !== null) throw new Error(`lockd serve did not listen on ${port} (exit ${serve.exitCode})`);
      await Bun.sleep(25);
    }
    const SESSIONS = 600;
    for (let i = 0; i < SESSIONS; i += 50) {
      await Promise.all(
        Array.from({ length: 50 }, async () => {
          const socket = await Bun.connect({ hostname: "127.0.0.1", port: port!, socket: { data() {} } });
          socket.end();
        }),
      );
    }
    serve.kill("SIGTERM");
    // Read only once the ops listener has closed, the server's last step before
    // it logs shutdown.stopped and ends: a process.exit() there lost the log's tail.
    for (let attempt = 0; !(await refusedConnection(opsPort!)); attempt++) {
      if (attempt >= 400) throw new Error(`lockd serve did not close its ops listener on ${opsPort}`);
      await Bun.sleep(25);
    }
    const text = await log.read(); // until the server, the only writer, has exited
    const code = await serve.exited;
    const events = text
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => (JSON.parse(line) as { event: string }).event);
    expect(text.length).toBeGreaterThan(65_536); // the pipe was full: the test tests something
    const opened = events.filter((e) => e === "session.opened").length;
    const ended = events.filter((e) => e === "session.ended").length;
    // Every session opened was ended, and both lines arrived. (Connections still in
    // the accept queue at the SIGTERM never became sessions: fewer than SESSIONS.)
    expect({ code, last: events.at(-1), sessions: opened > 0, allEnded: ended === opened }).toEqual({ code: 0, last: "shutdown.stopped", sessions: true, allEnded: true });
  } finally {
    clearTimeout(guard);
    serve.kill("SIGKILL");
    log.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 30_000);

test("a stop signal while the output drains ends the wait with the command's exit code, not the signal's", async () => {
  const log = lateLog();
  try {
    // 5,001 lines into a log nobody reads: the process waits for the drain (bound 20 s here).
    // "armed" comes after exitWhenDrained has returned, so the signal cannot come before its handlers.
    const proc = Bun.spawn(writer(5000, 'exitWhenDrained(7, 20_000); process.stdout.write("armed\\n");'), { stdin: "ignore", stdout: "pipe", stderr: log.fd });
    closeSync(log.fd);
    await said(proc.stdout, "armed");
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(7);
  } finally {
    log.close();
  }
}, 30_000);
