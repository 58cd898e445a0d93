/**
 * `lockd run NAME -- cmd args...`: hold a lock while a command runs, like
 * flock(1) across machines, with flock's letters where they mean the same
 * (-w wait, -n try, -E conflict exit code).
 *
 * The lock is held by this process (it heartbeats); the child only gets the
 * fencing token and the lock name in its environment. COMMAND runs in a
 * process group of its own (a new session), so everything it starts can be
 * stopped with it: losing the lock sends the group SIGTERM, then SIGKILL
 * after --kill-after; SIGINT, SIGTERM and SIGHUP to `lockd run` go to the
 * group while COMMAND runs (and cancel the claim while it waits); processes
 * COMMAND leaves behind in its group are stopped the same way before the
 * lock is released. Interactive use (stdin a terminal) keeps COMMAND in the
 * terminal's job instead, so job control works: see ProcessTree.
 */
import { createRequire } from "node:module";
import { constants as osConstants } from "node:os";
import { isatty } from "../process/tty.ts";
import { DEFAULT_RECONNECT_MS, LockClient } from "../client/client.ts";
import {
  LockAbortedError,
  LockBusyError,
  LockDelayedError,
  LimitMismatchError,
  LockError,
  LockLostError,
  LockRequestError,
  ServerUnavailableError,
  WaitTimeoutError,
} from "../client/errors.ts";
import type { Lock } from "../client/lock.ts";
import type { TlsSettings } from "../client/transport.ts";
import { parseOptions } from "./options/argv.ts";
import { helpRow, optionsHelp } from "./options/help.ts";
import { RUN_OPTIONS } from "./options/run-options.ts";
import { pairOf, readOptionFile } from "./files.ts";
import { ExitCode } from "./exit.ts";

export const RUN_HELP = `Usage: lockd run [options] NAME -- COMMAND [ARGS...]

Takes the lock NAME on the lock server, runs COMMAND while holding it, and
releases it when COMMAND exits. COMMAND gets LOCKD_TOKEN (the fencing token:
pass it to anything the lock guards) and LOCKD_LOCK (NAME) in its
environment, and with --limit above 1 LOCKD_SLOT (its slot, 0..N-1; unset
otherwise, even if lockd run's own environment has it). If the lock is lost
while COMMAND runs (the server stops, is unreachable, or does not answer
within 0.8 x lease), COMMAND and every process it started get SIGTERM, then
SIGKILL after --kill-after.

With --limit N, NAME is a semaphore: up to N runs hold it at once, each in
the lowest free slot, and the next waits in FIFO order. With --shared, runs
that all say --shared hold NAME together, and one without it holds alone (a
shared run queued behind a waiting exclusive one waits for it). Every run of
a NAME must agree: a --limit other than that of the name's live holders and
waiters (--shared and an exclusive run count as 1) is refused, exit 64.

COMMAND runs in a process group of its own (a new session), and signals
reach the whole group: SIGTERM (then SIGKILL) on lock loss, and SIGINT,
SIGTERM and SIGHUP sent to lockd run, which are passed on. Processes that
COMMAND leaves running in its group when it exits get SIGTERM (SIGKILL
after --kill-after) before the lock is released. A process that leaves the
group (setsid, a daemon) escapes this, and a SIGKILL of lockd run itself
cannot be passed on.

When stdin is a terminal, COMMAND stays in the terminal's job instead, so
an editor, Ctrl-C and Ctrl-Z work as usual (the terminal signals the whole
job itself, and lockd run does not repeat a SIGINT); then lock loss,
SIGTERM and SIGHUP reach COMMAND alone, not its children.

Before the grant, an unreachable or restarting server is retried when the
claim may wait: with --wait (for as long as it allows), or with a --server
list of two or more addresses (for 30 s without --wait): the next address
of the list at once, then with backoff (50 ms doubling to 2 s). One line on
stderr says so the first time every address has failed and it waits
(moving on to the next address is silent). With --try, or one address and
no --wait, each address is tried once and an unreachable server exits 69
at once. Once a server has answered the claim (it then restarts, or says it
is shutting down), trouble is retried in every case, within --wait or
30 s. A lock lost while COMMAND runs is never taken again.

When the server stops cleanly and lets its holders reclaim (a server run
with reclaim on, restarted on its data directory: a rolling upgrade), the
lock is reclaimed from the server's next run with its token, and COMMAND
keeps running: LOCKD_TOKEN stays valid, and one line on stderr says so.
If the reclaim is not granted within 0.8 x lease of the last answer, the
lock is lost as above. --no-reclaim turns this off: such a stop loses the
lock and stops COMMAND.

Options (flag, then environment, then default):
${optionsHelp(RUN_OPTIONS)}
${aliases([
  ["-w DURATION", "same as --wait"],
  ["-n, --try", "do not wait: exit at once if the lock is held (or held back by a lock-delay)"],
  ["--shared", "a shared (read) claim: shared runs of NAME hold together, an exclusive one alone (limit 1 only)"],
  ["--no-reclaim", "a clean stop of the server (one that lets holders reclaim) loses the lock: COMMAND is stopped"],
  ["-E N", "same as --conflict-exit-code"],
  ["--tls", "connect with TLS, trusting the system CAs (implied by --tls-ca and --tls-cert)"],
  ["-h, --help", "this text"],
])}

Exit status:
  COMMAND's own   COMMAND ran and exited (128+N if it died of signal N)
  1               --try and the lock is held, or held back by a lock-delay after
                  a failover or restart of the server (change with -E)
  64              bad usage: options, lock name, owner, lease, --shared with
                  --limit above 1; or WRONG_SHARD: the --server map is not the
                  servers' map; or LIMIT_MISMATCH: NAME's live claims use
                  another --limit (or --shared against a semaphore)
  66              a file an option names (certificate, key) cannot be read
  69              the lock server stayed unreachable or unavailable (for --wait,
                  or 30 s without --wait; at once with --try, or with one
                  address that never answered and no --wait), or TLS is set
                  up on one end only
  75              --wait passed without getting the lock
  76              the lock was lost while COMMAND ran (COMMAND was stopped)
  79              the claim was ended while waiting (an operator's kick):
                  COMMAND never ran
  126             COMMAND could not be run (not executable)
  127             COMMAND was not found
  130             SIGINT while waiting for the lock (143 for SIGTERM)
`;

function aliases(rows: [string, string][]): string {
  return rows.map(([left, help]) => helpRow(left, help)).join("\n");
}

/** Without --wait, how long `lockd run` retries a server it cannot reach before exiting 69. */
export const UNAVAILABLE_WITHOUT_WAIT_MS = DEFAULT_RECONNECT_MS;

/** flock(1)'s short options, as this command's long ones. */
const SHORT_FLAGS: Record<string, string> = { "-w": "--wait", "-E": "--conflict-exit-code" };
const SWITCHES: Record<string, string> = { "-n": "try", "--try": "try", "--nonblock": "try", "--tls": "tls", "--shared": "shared", "--no-reclaim": "no-reclaim" };

export async function run(argv: readonly string[], env: Record<string, string | undefined>): Promise<number> {
  const split = argv.indexOf("--");
  const head = (split < 0 ? argv : argv.slice(0, split)).map((arg) => SHORT_FLAGS[arg] ?? arg);
  const command = split < 0 ? [] : argv.slice(split + 1);
  const parsed = parseOptions(RUN_OPTIONS, head, env, SWITCHES);
  if (parsed.help) {
    process.stdout.write(RUN_HELP);
    return ExitCode.OK;
  }
  const usage = (problem: string): number => {
    process.stderr.write(`lockd run: ${problem}\nUsage: lockd run [options] NAME -- COMMAND [ARGS...] (lockd run --help)\n`);
    return ExitCode.USAGE;
  };
  if (parsed.positionals.length !== 1) {
    return usage(parsed.positionals.length === 0 ? "missing the lock NAME" : `one lock NAME expected before --, got ${parsed.positionals.length} arguments`);
  }
  if (command.length === 0) return usage(split < 0 ? "missing -- COMMAND" : "missing COMMAND after --");
  const name = parsed.positionals[0]!;
  const { server, lease, wait, conflictExitCode, owner, killAfter, limit } = parsed.options;
  const tryOnly = parsed.switches.has("try");
  const shared = parsed.switches.has("shared");
  const reclaim = !parsed.switches.has("no-reclaim");
  if (tryOnly && wait !== undefined) return usage("--try and --wait exclude each other");
  if (shared && limit !== 1) return usage(`--shared is a claim of limit 1, not --limit ${limit}: a name is a read/write lock or a semaphore, not both`);

  // Signals: cancel the claim while waiting, go to COMMAND's processes once it runs.
  let tree: ProcessTree | null = null;
  let interrupted: NodeJS.Signals | null = null;
  const waitCancel = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    if (tree !== null) {
      tree.passOn(signal);
    } else if (interrupted === null) {
      interrupted = signal;
      waitCancel.abort(new Error(`interrupted by ${signal}`));
    }
  };
  for (const signal of FORWARDED) process.on(signal, onSignal);
  try {
    const tls = tlsSettings(parsed.options, parsed.switches.has("tls"));
    const client = new LockClient({
      servers: server, // parsed once, by the option's schema
      // retryFirstConnect left to the clients' shared rule (docs/clients.md): a server that is
      // restarting or failing over is waited out with --wait (within it) or a --server list of
      // two or more (within 30 s); --try, or one address without --wait, exits 69 at once.
      reconnectMs: wait ?? UNAVAILABLE_WITHOUT_WAIT_MS,
      ...(owner !== undefined ? { owner } : {}),
      ...(tls !== undefined ? { tls } : {}),
    });
    let lock: Lock;
    let retrying = false;
    // The last trouble of each address (its detail names it), for the final error of a --server list.
    const met = new Map<string, string>();
    try {
      lock = await client.acquire(name, {
        lease,
        try: tryOnly,
        limit,
        shared,
        reclaim,
        // COMMAND goes on through a reclaim (a clean stop, or a silent server); a line in its log says so.
        onReclaim: (held) =>
          process.stderr.write(`lockd run: the lock server stopped cleanly or went silent; lock ${JSON.stringify(held.name)} reclaimed with the same token ${held.token}, COMMAND goes on\n`),
        signal: waitCancel.signal,
        onRetry: (detail, _delayMs, backoff) => {
          // Only when the claim is going to wait: every address of the list
          // failed and a backoff follows. A first address that fails while the
          // next one may answer (a standby of a failover service, with no
          // listener) is the normal state, not worth a line. And one line per
          // run, so a cron log shows why it waited; not one per attempt.
          const at = ADDRESS_IN_DETAIL.exec(detail);
          if (at !== null) met.set(at[0], detail);
          if (!backoff || retrying) return;
          retrying = true;
          const budget = wait === undefined ? `${UNAVAILABLE_WITHOUT_WAIT_MS / 1000} s` : "--wait";
          process.stderr.write(`lockd run: ${detail}; retrying (within ${budget})\n`);
        },
        ...(wait !== undefined ? { wait } : {}),
      });
    } catch (error) {
      return claimFailed(error, conflictExitCode, interrupted, met);
    }
    try {
      return await runHolding(lock, command, env, killAfter, (spawned) => (tree = spawned));
    } finally {
      await lock.release();
    }
  } finally {
    for (const signal of FORWARDED) process.off(signal, onSignal);
  }
}

/**
 * An unavailable claim's message with what each address of a --server list
 * met: the client's message names the last trouble only (one address), so
 * that detail is replaced by every address's last one.
 */
function withEachAddress(error: LockError, met: ReadonlyMap<string, string>): string {
  const unavailable = error instanceof ServerUnavailableError || (error instanceof WaitTimeoutError && error.unavailable !== undefined);
  if (!unavailable || met.size < 2) return error.message;
  const each = [...met.values()];
  const last = each.find((detail) => error.message.includes(detail));
  return last === undefined ? `${error.message}; each address met: ${each.join("; ")}` : error.message.replace(last, each.join("; "));
}

/** The first HOST:PORT (or [v6]:PORT) in a retry's detail: the address it is about. */
const ADDRESS_IN_DETAIL = /\[[0-9A-Fa-f:.]+\]:\d+|[^\s\[\]:"()]+:\d+/;

/** Signals to `lockd run` that are passed on to COMMAND's processes. */
const FORWARDED: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP"];

/** TLS for the claim: on with --tls (system CAs), --tls-ca, or a client certificate. */
function tlsSettings(options: { tlsCa?: string; tlsCert?: string; tlsKey?: string }, on: boolean): TlsSettings | undefined {
  const pair = pairOf(options.tlsCert, options.tlsKey, "--tls-cert", "--tls-key");
  if (!on && options.tlsCa === undefined && pair === undefined) return undefined;
  return {
    ...(options.tlsCa !== undefined ? { ca: readOptionFile(options.tlsCa, "--tls-ca") } : {}),
    ...(pair ?? {}),
  };
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
class ProcessTree {
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
async function runHolding(
  lock: Lock,
  command: readonly string[],
  env: Record<string, string | undefined>,
  killAfterMs: number,
  started: (tree: ProcessTree) => void,
): Promise<number> {
  const grouped = !isatty(0);
  let child: ReturnType<typeof Bun.spawn>;
  try {
    // LOCKD_SLOT only for a semaphore's grant; unset otherwise, so an outer run's slot never leaks in.
    const { LOCKD_SLOT: _outer, ...inherited } = env;
    child = Bun.spawn([...command], {
      stdio: ["inherit", "inherit", "inherit"],
      env: { ...inherited, LOCKD_TOKEN: lock.token.toString(), LOCKD_LOCK: lock.name, ...(lock.slot !== null ? { LOCKD_SLOT: String(lock.slot) } : {}) },
      detached: grouped,
    });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    process.stderr.write(`lockd run: cannot run ${JSON.stringify(command[0])}: ${(error as Error).message}\n`);
    return code === "ENOENT" ? ExitCode.COMMAND_NOT_FOUND : ExitCode.CANNOT_EXECUTE;
  }
  const tree = new ProcessTree(child, grouped);
  started(tree);
  const what = grouped ? `process group ${tree.pid}` : `${tree.pid}`;
  let lost: LockLostError | null = null;
  let killTimer: ReturnType<typeof setTimeout> | null = null;
  let killed = false;
  /** SIGTERM now, SIGKILL after --kill-after; once. */
  const terminate = (): void => {
    if (killTimer !== null || killed) return;
    tree.signal("SIGTERM");
    killTimer = setTimeout(() => {
      killed = true;
      process.stderr.write(`lockd run: ${what} still running ${killAfterMs} ms after SIGTERM; sending SIGKILL\n`);
      tree.signal("SIGKILL");
    }, killAfterMs);
  };
  const onLost = (): void => {
    lost = lock.signal.reason as LockLostError;
    process.stderr.write(`lockd run: ${lost.message}; sending SIGTERM to ${what}\n`);
    terminate();
  };
  lock.signal.addEventListener("abort", onLost, { once: true });
  if (lock.signal.aborted) onLost(); // lost between the grant and the spawn
  try {
    await child.exited;
    // What COMMAND left in its group would run on unguarded once the lock is released: stop it first.
    if (tree.running()) {
      if (killTimer === null) process.stderr.write(`lockd run: COMMAND exited; sending SIGTERM to the processes it left in ${what}\n`);
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
  if (child.signalCode !== null) return 128 + (osConstants.signals[child.signalCode as NodeJS.Signals] ?? 0);
  return child.exitCode ?? ExitCode.FAILURE;
}

/** The exit status and message for a claim that did not get the lock. */
function claimFailed(error: unknown, conflictExitCode: number, interrupted: NodeJS.Signals | null, met: ReadonlyMap<string, string>): number {
  if (!(error instanceof LockError)) throw error;
  if (error instanceof ServerUnavailableError && error.tls !== undefined) {
    process.stderr.write(`lockd run: ${error.tls.what}: ${TLS_FIX[error.tls.kind]}\n`);
    return ExitCode.UNAVAILABLE;
  }
  if (error instanceof LockDelayedError) {
    process.stderr.write(`lockd run: ${delayedLine(error)}\n`);
    return conflictExitCode;
  }
  process.stderr.write(`lockd run: ${withEachAddress(error, met)}\n`);
  if (error instanceof LockBusyError) return conflictExitCode;
  if (error instanceof WaitTimeoutError) return error.unavailable === undefined ? ExitCode.TEMPFAIL : ExitCode.UNAVAILABLE;
  if (error instanceof ServerUnavailableError) return ExitCode.UNAVAILABLE;
  if (error instanceof LockAbortedError) return 128 + (interrupted === null ? 0 : (osConstants.signals[interrupted] ?? 0));
  if (error instanceof LimitMismatchError) {
    process.stderr.write(`lockd run: every run of ${JSON.stringify(error.lock)} must use the same --limit while any of them holds or waits (--shared, and a run without --limit, count as --limit 1)\n`);
    return ExitCode.USAGE;
  }
  if (error instanceof LockRequestError) {
    if (error.code === "PROTOCOL_VIOLATION") return ExitCode.UNAVAILABLE;
    // The server ended the claim under the lock rules (an operator's KICK) before the grant: COMMAND never ran.
    return error.class === "lock" ? ExitCode.CLAIM_ENDED : ExitCode.USAGE;
  }
  return ExitCode.FAILURE;
}

/**
 * `--try` on a name the server holds back by a lock-delay: what it is, how
 * long the server says it still runs (the "N ms" of its message; the whole
 * message when it has no such number), and that a later run can get it.
 */
export function delayedLine(error: LockDelayedError): string {
  const remaining = /(\d+) ?ms\b/.exec(error.serverMessage);
  const when =
    remaining !== null
      ? `no grant for another ${remaining[1]} ms, the server says: it can be retried then`
      : `${error.serverMessage !== "" ? `the server says: ${error.serverMessage}; ` : ""}it can be retried later`;
  return `lock ${JSON.stringify(error.lock)} is held back by a lock-delay after a failover or restart of the lock server (a holder an earlier server granted may still believe it holds it); ${when}`;
}

/** The flags that fix each TLS set-up problem. */
const TLS_FIX = {
  "server-speaks-tls": "use --tls (system CAs) or --tls-ca FILE (env LOCKD_TLS_CA)",
  "server-plaintext": "drop --tls and --tls-ca (and LOCKD_TLS_CA), or start the server with --tls-cert",
  untrusted: "give the CA that signed its certificate with --tls-ca FILE (env LOCKD_TLS_CA)",
  "client-certificate": "give a client certificate signed by the CA the server trusts with --tls-cert FILE --tls-key FILE (env LOCKD_CLIENT_TLS_CERT, LOCKD_CLIENT_TLS_KEY)",
} as const;
