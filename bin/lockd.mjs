#!/usr/bin/env node
/**
 * The `lockd` bin of the npm package. The command is written for Bun
 * (src/cli/main.ts); this shim lets it start from a Node.js project too:
 *
 * - under Bun it runs src/cli/main.ts in this process;
 * - under Node.js it finds a `bun` binary (the `bun` npm package installed
 *   beside this one, else `bun` on PATH) and runs it as a child: the exit
 *   code (or the signal) of the child is this process's, and SIGTERM,
 *   SIGHUP, SIGINT and SIGQUIT sent to this process are relayed to the
 *   child. While this process is in the foreground of its terminal, SIGINT
 *   and SIGQUIT are not relayed: the terminal sends Ctrl-C and Ctrl-\ to the
 *   whole process group, child included, and `lockd run` would pass a
 *   second Ctrl-C on to its COMMAND (`lockd serve` takes the same signal
 *   again within 1 s as the same stop, so a group signal sent without a
 *   terminal, which reaches it directly and relayed, stops it once). (Not
 *   process.execve, Node.js >= 22.15: a launcher such as npm relays SIGINT
 *   to its child too, and bun in place of this process would get Ctrl-C
 *   twice.)
 * - without Bun it says so in one line and exits 69.
 *
 * Production servers should run the single binary (`npm run build`), which
 * needs neither Node.js nor Bun; see docs/operations.md.
 */
import { spawn } from "node:child_process";
import { accessSync, constants, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const MAIN = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url));
const args = process.argv.slice(2);

if (process.versions.bun !== undefined) {
  const { main, exitWhenDrained } = await import(MAIN);
  // Not process.exit(): it would drop log lines a slow reader has not taken yet (src/cli/exit.ts).
  // exitWhenDrained returns, so the Node.js part below must not run: it would run the command again.
  exitWhenDrained(await main(args, process.env));
} else {
  runUnderNode();
}

/** An executable regular file of real size (the `bun` package's bin/bun.exe is a placeholder until its postinstall ran). */
function usable(file) {
  try {
    accessSync(file, constants.X_OK);
    const stat = statSync(file);
    return stat.isFile() && stat.size > 1_000_000;
  } catch {
    return false;
  }
}

function findBun() {
  try {
    const pkg = createRequire(import.meta.url).resolve("bun/package.json");
    const file = join(dirname(pkg), "bin", "bun.exe");
    if (usable(file)) return file;
  } catch {
    // not installed: try PATH
  }
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir === "") continue;
    const file = join(dir, process.platform === "win32" ? "bun.exe" : "bun");
    if (usable(file)) return file;
  }
  return undefined;
}

/** Node.js: run the command under a `bun` child, relaying signals and passing its exit on. */
function runUnderNode() {
  const bun = findBun();
  if (bun === undefined) {
    process.stderr.write("lockd: needs Bun to run: `npm install bun` in this project (or put `bun` on PATH), or use the single binary built by `npm run build` in the lockd repository\n");
    process.exit(69);
  }

  /** True when this process is in the foreground process group of its terminal (Linux: /proc/self/stat). */
  function terminalForeground() {
    try {
      const stat = readFileSync("/proc/self/stat", "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const pgrp = Number(fields[2]);
      const tpgid = Number(fields[5]);
      return tpgid > 0 && tpgid === pgrp;
    } catch {
      return process.stdin.isTTY === true;
    }
  }

  const child = spawn(bun, [MAIN, ...args], { stdio: "inherit" });
  const relay = (signal) => {
    if ((signal === "SIGINT" || signal === "SIGQUIT") && terminalForeground()) return;
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  const SIGNALS = ["SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT"];
  for (const signal of SIGNALS) process.on(signal, relay);
  child.on("error", (error) => {
    process.stderr.write(`lockd: cannot start ${bun}: ${error.message}\n`);
    process.exit(69);
  });
  child.on("exit", (code, signal) => {
    if (signal !== null) {
      for (const s of SIGNALS) process.off(s, relay);
      process.kill(process.pid, signal);
      return;
    }
    process.exit(code ?? 1);
  });
}
