/**
 * COMMAND while `lockd run` holds the lock: how it is spawned (its own
 * process group, or the terminal's job), how signals reach it, what is
 * stopped when the lock is lost or COMMAND leaves processes behind, and its
 * exit status. Shared by the full command (run.ts) and its fast start
 * (run-fast.ts), so both run COMMAND the same way; it loads nothing of the
 * client library: the lock is anything with a token, a name, a slot and an
 * AbortSignal whose reason says why it was lost.
 */
import { createRequire } from "node:module";
import { isatty } from "../process/tty.ts";
import { ExitCode } from "./exit.ts";

/** What runHolding needs of a held lock (the client's Lock is one). */
export interface HeldLock {
  readonly name: string;
  readonly token: bigint;
  readonly slot: number | null;
  /** Aborts when the lock is lost; reason: an Error saying why (the client's LockLostError). */
  readonly signal: AbortSignal;
}

/** Signals to `lockd run` that are passed on to COMMAND's processes. */
export const FORWARDED: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP"];

/**
 * The number of a signal, for an exit status of 128+N. node:os is required
 * only then: importing it would cost every run about 0.2 ms (compiled, Bun 1.4).
 */
export function signalNumber(signal: NodeJS.Signals): number {
  return (createRequire(import.meta.url)("node:os") as typeof import("node:os")).constants.signals[signal] ?? 0;
}

/** How COMMAND is started, decided before the grant (runHolding fills in the lock's variables). */
export interface CommandSetting {
  /** COMMAND gets a process group of its own: stdin is not a terminal (see ProcessTree). */
  readonly grouped: boolean;
  /** COMMAND's environment: lockd run's, without LOCKD_SLOT (a semaphore's grant sets its own; an outer run's never leaks in). */
  readonly inherited: Record<string, string | undefined>;
}

export function commandSetting(env: Record<string, string | undefined>): CommandSetting {
  const { LOCKD_SLOT: _outer, ...inherited } = env;
  return { grouped: !isatty(0), inherited };
}

let said = false;

/** A line of lockd run's own on stderr. */
function say(line: string): void {
  said = true;
  process.stderr.write(line);
}

/** Whether runHolding has written anything (so far): if not, the process has no output of its own to drain before it exits. */
export function saidAnything(): boolean {
  return said;
}

/**
 * COMMAND and what it starts. Normally COMMAND is spawned detached (setsid:
 * a new session whose process group id is COMMAND's pid) and every signal
 * goes to the group with kill(-pgid): grandchildren stop with COMMAND, and
 * the group can be watched for processes left behind after COMMAND exits.
 *
 * When stdin is a terminal, a new session would take the terminal away from
 * COMMAND (no /dev/tty, no Ctrl-Z, no window-size signal), so COMMAND stays
 * in lockd run's process group, the terminal's job: the terminal driver
 * sends Ctrl-C and Ctrl-Z to all of it, and lockd run signals COMMAND alone
 * (SIGINT not at all: see passOn).
 */
export class ProcessTree {
  constructor(
    readonly child: ReturnType<typeof Bun.spawn>,
    /** COMMAND leads a process group of its own (its id is COMMAND's pid). */
    readonly grouped: boolean,
  ) {}

  get pid(): number {
    return this.child.pid;
  }

  /**
   * COMMAND has exited and its group is empty (or was SIGKILLed): no more
   * signals, since the group id may now be reused by an unrelated process.
   */
  finished = false;

  /**
   * A signal lockd run received. In the terminal's job a SIGINT came from the
   * terminal (Ctrl-C), which sent it to COMMAND too: a second one would look
   * like a second Ctrl-C ("force quit" to many programs), so it is not sent.
   */
  passOn(signal: NodeJS.Signals): void {
    if (signal === "SIGINT" && !this.grouped) return;
    this.signal(signal);
  }

  signal(signal: NodeJS.Signals): void {
    if (this.finished) return;
    if (!this.grouped) {
      this.child.kill(signal);
      return;
    }
    try {
      process.kill(-this.child.pid, signal);
    } catch {
      // ESRCH: the group is empty
    }
  }

  /** Whether any process of the group is still running (zombies, already dead, do not count). */
  running(): boolean {
    if (!this.grouped) return false;
    return process.platform === "linux" ? groupRunsLinux(this.child.pid) : groupExists(this.child.pid);
  }
}

function groupExists(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Linux: a group member that is not a zombie, from /proc. kill(-pgid, 0)
 * alone would count zombies, and where PID 1 does not reap orphans (some
 * containers) those stay forever.
 */
function groupRunsLinux(pgid: number): boolean {
  if (!groupExists(pgid)) return false;
  let pids: string[];
  try {
    pids = fs().readdirSync("/proc");
  } catch {
    return true;
  }
  for (const pid of pids) {
    if (pid.charCodeAt(0) < 48 || pid.charCodeAt(0) > 57) continue;
    let stat: string;
    try {
      stat = fs().readFileSync(`/proc/${pid}/stat`, "latin1");
    } catch {
      continue; // exited meanwhile
    }
    // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) === pgid && fields[0] !== "Z" && fields[0] !== "X") return true;
  }
  return false;
}

/** node:fs, required when a group is searched in /proc: importing it would cost every run about 0.6 ms (compiled, Bun 1.4). */
const fs = (): typeof import("node:fs") => createRequire(import.meta.url)("node:fs");

/** How often the group is checked for leftovers after COMMAND exited (no event exists for "group empty"). */
const GROUP_POLL_MS = 50;
/** After SIGKILL, how long to wait for the group to be gone before releasing anyway. */
const AFTER_KILL_MS = 2000;

/** Run the command while `lock` is held; its exit status, or LOCK_LOST. */
export async function runHolding(
  lock: HeldLock,
  command: readonly string[],
  setting: CommandSetting,
  killAfterMs: number,
  started: (tree: ProcessTree) => void,
): Promise<number> {
  const { grouped, inherited } = setting;
  let child: ReturnType<typeof Bun.spawn>;
  try {
    inherited.LOCKD_TOKEN = lock.token.toString();
    inherited.LOCKD_LOCK = lock.name;
    if (lock.slot !== null) inherited.LOCKD_SLOT = String(lock.slot);
    child = Bun.spawn([...command], { stdio: ["inherit", "inherit", "inherit"], env: inherited, detached: grouped });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    say(`lockd run: cannot run ${JSON.stringify(command[0])}: ${(error as Error).message}\n`);
    return code === "ENOENT" ? ExitCode.COMMAND_NOT_FOUND : ExitCode.CANNOT_EXECUTE;
  }
  const tree = new ProcessTree(child, grouped);
  started(tree);
  const what = grouped ? `process group ${tree.pid}` : `${tree.pid}`;
  let lost: Error | null = null;
  let killTimer: ReturnType<typeof setTimeout> | null = null;
  let killed = false;
  /** SIGTERM now, SIGKILL after --kill-after; once. */
  const terminate = (): void => {
    if (killTimer !== null || killed) return;
    tree.signal("SIGTERM");
    killTimer = setTimeout(() => {
      killed = true;
      say(`lockd run: ${what} still running ${killAfterMs} ms after SIGTERM; sending SIGKILL\n`);
      tree.signal("SIGKILL");
    }, killAfterMs);
  };
  const onLost = (): void => {
    lost = lock.signal.reason as Error;
    say(`lockd run: ${lost.message}; sending SIGTERM to ${what}\n`);
    terminate();
  };
  lock.signal.addEventListener("abort", onLost, { once: true });
  if (lock.signal.aborted) onLost(); // lost between the grant and the spawn
  try {
    await child.exited;
    // What COMMAND left in its group would run on unguarded once the lock is released: stop it first.
    if (tree.running()) {
      if (killTimer === null) say(`lockd run: COMMAND exited; sending SIGTERM to the processes it left in ${what}\n`);
      terminate();
      let afterKill = 0;
      while (tree.running() && afterKill < AFTER_KILL_MS) {
        await Bun.sleep(GROUP_POLL_MS);
        if (killed) afterKill += GROUP_POLL_MS;
      }
    }
  } finally {
    tree.finished = true;
    lock.signal.removeEventListener("abort", onLost);
    if (killTimer !== null) clearTimeout(killTimer);
  }
  if (lost !== null) return ExitCode.LOCK_LOST;
  if (child.signalCode !== null) return 128 + signalNumber(child.signalCode as NodeJS.Signals);
  return child.exitCode ?? ExitCode.FAILURE;
}
