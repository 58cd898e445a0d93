/**
 * `lockd run`'s fast start: the common run (`lockd run [--server HOST:PORT]
 * NAME -- COMMAND...`, every other option at its default) claims the lock
 * before the client library, the option tables and the help are loaded.
 * It connects, sends the claim's ACQUIRE, and when the server grants at
 * once, starts COMMAND at once (run-holding.ts, as every run does). The
 * full command (run.ts, the client's ClaimMachine) is loaded only when the
 * claim needs its rules, and it takes the connection over with everything
 * that happened on it and when (src/client/opened.ts), so it decides as if
 * it had opened it:
 *
 * - before the grant: any other answer (WAITING, an ERROR), a failed
 *   connect, a closed connection, or a stop signal: run.ts runs the whole
 *   command from there (its messages, retries and exit codes);
 * - while COMMAND runs: anything from the server or the end of the
 *   connection, or halfway to the first heartbeat (the client's schedule,
 *   from the grant's round trip; at most lease/20 after the grant):
 *   adoptHeld keeps the lock from then on (that heartbeat goes out on
 *   time), and a loss reaches COMMAND as in every run.
 *
 * A run whose COMMAND exits before that never loads the client: measured
 * with the compiled binary (Bun 1.4), loading run.ts and what it imports
 * costs about 1 ms, parsing its options 0.3 ms, and a claim through the
 * client's machine 0.4 ms more than this one (docs/performance.md,
 * Start-up). Anything this file does not recognize as such a run goes to
 * run.ts unchanged: it decides only which way to go, never what an
 * argument means. test/cli/run-fast.test.ts holds its constants, address
 * grammar and ACQUIRE to run.ts's and the client's.
 */
import { hostname } from "node:os";
import { OpenedConnection, type OpenedEvent } from "../client/opened.ts";
import type { Lock } from "../client/lock.ts";
import { heartbeatInterval } from "../client/schedule.ts";
import { commandSetting, FORWARDED, runHolding, saidAnything, type CommandSetting, type HeldLock, type ProcessTree } from "./run-holding.ts";

/** RUN_OPTIONS' defaults (src/cli/options/run-options.ts) that the fast start claims with. */
export const FAST_DEFAULTS = { server: "127.0.0.1:7700", leaseMs: 5000, killAfterMs: 10_000 } as const;

/** RUN_OPTIONS' environment variables other than LOCKD_SERVER: set (non-empty), the run takes the full way. */
export const FAST_BLOCKING_ENV = ["LOCKD_LEASE", "LOCKD_LIMIT", "LOCKD_OWNER", "LOCKD_TLS_CA", "LOCKD_CLIENT_TLS_CERT", "LOCKD_CLIENT_TLS_KEY"] as const;

/** protocol.md's MAX_NAME_LENGTH and MAX_OWNER_LENGTH (src/protocol/constants.ts). */
const MAX_NAME_BYTES = 512;
const MAX_OWNER_BYTES = 256;

/** A run the fast start takes: one plain address, a lock name, a command. */
export interface FastPlan {
  readonly host: string;
  readonly port: number;
  readonly name: string;
  readonly command: readonly string[];
}

/**
 * HOST:PORT as the fast start takes it: a dotted-quad IPv4 address, or a
 * host name whose first label starts with a letter (letters, digits and
 * inner hyphens, labels of 1..63, at most 253 in all), and a port 1..65535
 * of at most five digits. A strict part of the grammar of
 * src/net/address.ts, which decides everything else (IPv6, lists, maps,
 * spaces, other names). By hand: a regular expression costs a run about
 * 0.06 ms to compile.
 */
export function plainAddress(text: string): { host: string; port: number } | null {
  const colon = text.indexOf(":");
  if (colon < 1 || colon > 253 || text.length - colon - 1 < 1 || text.length - colon - 1 > 5) return null;
  let port = 0;
  for (let i = colon + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 48 || c > 57) return null;
    port = port * 10 + (c - 48);
  }
  if (port < 1 || port > 65535) return null;
  const host = text.slice(0, colon);
  return isDottedQuad(host) || isPlainHostName(host) ? { host, port } : null;
}

function isDottedQuad(host: string): boolean {
  const parts = host.split(".");
  if (parts.length !== 4) return false;
  for (const part of parts) {
    if (part.length < 1 || part.length > 3 || (part.length > 1 && part.charCodeAt(0) === 48)) return false;
    let value = 0;
    for (let i = 0; i < part.length; i++) {
      const c = part.charCodeAt(i);
      if (c < 48 || c > 57) return false;
      value = value * 10 + (c - 48);
    }
    if (value > 255) return false;
  }
  return true;
}

function isPlainHostName(host: string): boolean {
  const first = host.charCodeAt(0) | 0x20;
  if (first < 97 || first > 122) return false;
  let label = 0;
  for (let i = 0; i < host.length; i++) {
    const c = host.charCodeAt(i);
    if (c === 46) {
      // a dot ends a label, which may not be empty or end in a hyphen
      if (label === 0 || host.charCodeAt(i - 1) === 45) return false;
      label = 0;
      continue;
    }
    const letter = (c | 0x20) >= 97 && (c | 0x20) <= 122;
    const digit = c >= 48 && c <= 57;
    if (!letter && !digit && !(c === 45 && label > 0)) return false;
    if (++label > 63) return false;
  }
  return label > 0 && host.charCodeAt(host.length - 1) !== 45;
}

/** The run, if the fast start takes it: `[--server ADDRESS | --server=ADDRESS] NAME -- COMMAND...` and no other option. */
export function fastPlan(argv: readonly string[], env: Record<string, string | undefined>): FastPlan | null {
  const split = argv.indexOf("--");
  if (split < 0 || split === argv.length - 1) return null;
  for (const variable of FAST_BLOCKING_ENV) if (env[variable] !== undefined && env[variable] !== "") return null;
  let server: string | undefined;
  let name: string | undefined;
  for (let i = 0; i < split; i++) {
    const arg = argv[i]!;
    if (arg === "--server" && server === undefined && i + 1 < split) server = argv[++i]!;
    else if (arg.startsWith("--server=") && server === undefined) server = arg.slice("--server=".length);
    else if (name === undefined && !arg.startsWith("-")) name = arg;
    else return null;
  }
  if (name === undefined) return null;
  const fromEnv = env.LOCKD_SERVER;
  const address = plainAddress(server ?? (fromEnv !== undefined && fromEnv !== "" ? fromEnv : FAST_DEFAULTS.server));
  return address === null ? null : { ...address, name, command: argv.slice(split + 1) };
}

/** UTF-8 of `text`; ASCII by hand (TextEncoder's first use costs a run about 0.03 ms). */
function utf8(text: string): Uint8Array {
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x7f) return new TextEncoder().encode(text);
    bytes[i] = c;
  }
  return bytes;
}

/**
 * ACQUIRE (protocol.md section 5) of a plain claim: version 1, no options
 * (not TRY, not shared, limit 1, no reclaim), the lease, the name, the
 * owner. What encodeAcquire (src/protocol/frames.ts) writes for the same
 * claim, byte for byte; null when a length is out of range (run.ts says why).
 */
export function plainAcquire(name: string, owner: string, leaseMs: number): Uint8Array | null {
  const nameBytes = utf8(name);
  const ownerBytes = utf8(owner);
  if (nameBytes.length < 1 || nameBytes.length > MAX_NAME_BYTES || ownerBytes.length > MAX_OWNER_BYTES) return null;
  const body = 8 + nameBytes.length + ownerBytes.length;
  const frame = new Uint8Array(4 + body);
  const view = new DataView(frame.buffer);
  frame[0] = 0x01; // ACQUIRE
  view.setUint16(2, body);
  frame[4] = 1; // protocol version
  view.setUint32(6, leaseMs);
  view.setUint16(10, nameBytes.length);
  frame.set(nameBytes, 12);
  frame.set(ownerBytes, 12 + nameBytes.length);
  return frame;
}

/**
 * The token of a chunk that is exactly one ACQUIRED answering the ACQUIRE
 * (REPLY, maybe RECLAIMABLE, no slot, an 8-byte body, a token above 0), or
 * 0n: anything else is for the client's machine to read.
 */
export function immediateGrant(chunk: Uint8Array): bigint {
  if (chunk.length !== 12 || chunk[0] !== 0x81 || (chunk[1]! & ~0x04) !== 0x01 || chunk[2] !== 0 || chunk[3] !== 8) return 0n;
  return new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength).getBigUint64(4);
}

/** The client's default owner, "HOST/pid-PID" (src/client/client.ts). */
function defaultOwner(): string {
  return `${hostname()}/pid-${process.pid}`;
}

const run = async (): Promise<typeof import("./run.ts")> => import("./run.ts");

/** `lockd run ARGV`: the fast start when it takes the run, else run.ts. */
export async function runFast(argv: readonly string[], env: Record<string, string | undefined>): Promise<number> {
  const plan = fastPlan(argv, env);
  const frame = plan === null ? null : plainAcquire(plan.name, defaultOwner(), FAST_DEFAULTS.leaseMs);
  if (plan === null || frame === null) return (await run()).run(argv, env);

  // Signals as in run.ts: before the grant they end the claim (run.ts says so and exits 128+N), once COMMAND runs they go to it.
  let tree: ProcessTree | null = null;
  let caught: NodeJS.Signals | null = null;
  let interrupt: (() => void) | null = null;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (tree !== null) tree.passOn(signal);
    else if (caught === null) {
      caught = signal;
      interrupt?.();
    }
  };
  for (const signal of FORWARDED) process.on(signal, onSignal);
  let handedOver = false;
  try {
    const opened = OpenedConnection.open({ host: plan.host, port: plan.port }, frame);
    let openedAt = -1;
    let setting: CommandSetting | null = null;
    const held = await new Promise<Promise<Outcome> | null>((resolve) => {
      // Once. After a hand-over, what follows (say a grant after WAITING, while run.ts loads) is recorded for the client, never acted on here.
      const handOver = (): void => {
        opened.onEvent = () => {};
        interrupt = null;
        resolve(null);
      };
      interrupt = handOver;
      opened.onEvent = (event: OpenedEvent) => {
        if (event.kind === "open") {
          openedAt = event.at;
          // While the server answers: what COMMAND is started with.
          setting = commandSetting(env);
          return;
        }
        // A grant read late (past half the lease: the process was paused) is the machine's to judge, too.
        const token = event.kind === "data" && event.at - openedAt < FAST_DEFAULTS.leaseMs / 2 ? immediateGrant(event.bytes) : 0n;
        // Granted: COMMAND starts here and now, in the socket's callback.
        if (token === 0n || setting === null) {
          handOver();
          return;
        }
        interrupt = null;
        // The machine's first HEARTBEAT is due heartbeatInterval after this answer, from its round trip (the first RTT sample).
        const takeOverMs = Math.min(FAST_DEFAULTS.leaseMs / 20, heartbeatInterval(FAST_DEFAULTS.leaseMs, event.at - openedAt) / 2);
        resolve(holdFast(argv, env, plan, opened, token, setting, takeOverMs, (spawned) => (tree = spawned))); // holdFast watches the connection from here
      };
      if (caught !== null) handOver();
    });
    if (held === null) {
      // Anything but an immediate grant: the whole command goes on from here, on this connection.
      handedOver = true;
      return await (
        await run()
      ).run(argv, env, {
        opened,
        takeSignals: () => {
          for (const signal of FORWARDED) process.off(signal, onSignal);
          return caught;
        },
      });
    }
    const { code, quiet } = await held;
    if (quiet) {
      // Nothing of ours to drain (no line written), COMMAND reaped, the client never took over: end now,
      // rather than at the end of the event loop with exitWhenDrained (about 0.1 ms more, compiled, Bun
      // 1.4). The exit closes the connection, which releases the lock (the server hands it on).
      process.exit(code);
    }
    return code;
  } finally {
    if (!handedOver) for (const signal of FORWARDED) process.off(signal, onSignal);
  }
}

/** How a run under the fast start's grant ended: COMMAND's status, and whether the process may exit at once. */
interface Outcome {
  readonly code: number;
  /**
   * Nothing was written and the client never took over: the release is the
   * connection's close alone, which the process's exit does (the kernel
   * closes the socket, and the server hands the lock on).
   */
  readonly quiet: boolean;
}

/**
 * COMMAND under the fast start's grant, started at once (the spawn happens
 * before this returns), with the client taking the lock over when it needs
 * to (adoptHeld); then the release, unless the outcome is quiet.
 */
function holdFast(
  argv: readonly string[],
  env: Record<string, string | undefined>,
  plan: FastPlan,
  opened: OpenedConnection,
  token: bigint,
  setting: CommandSetting,
  takeOverMs: number,
  started: (tree: ProcessTree) => void,
): Promise<Outcome> {
  const lost = new AbortController();
  const lock: HeldLock = { name: plan.name, token, slot: null, signal: lost.signal };
  const holding = runHolding(lock, plan.command, setting, FAST_DEFAULTS.killAfterMs, started);
  let adopted: Promise<Lock | null> | null = null;
  const takeOver = (): void => {
    if (adopted !== null) return;
    clearTimeout(timer);
    opened.onEvent = () => {};
    adopted = run()
      .then(({ adoptHeld }) => adoptHeld(argv, env, opened))
      .then(
        (lock) => {
          if (lock.signal.aborted) lost.abort(lock.signal.reason);
          else lock.signal.addEventListener("abort", () => lost.abort(lock.signal.reason), { once: true });
          return lock;
        },
        (error: unknown) => {
          lost.abort(error);
          return null;
        },
      );
  };
  const timer = setTimeout(takeOver, takeOverMs);
  opened.onEvent = takeOver;
  /** Release; true when it is left to the exit (`exiting`, and nothing said, and the client never took over). */
  const release = async (exiting: boolean): Promise<boolean> => {
    clearTimeout(timer);
    opened.onEvent = () => {};
    // The client's lock if it took over, else the connection (the server hands the lock on when it closes).
    const taken = adopted === null ? null : await (adopted as Promise<Lock | null>);
    if (taken !== null) await taken.release();
    else if (exiting && adopted === null && !saidAnything()) return true;
    else await opened.transport?.close();
    return false;
  };
  return holding.then(
    async (code) => ({ code, quiet: await release(true) }),
    async (error: unknown) => {
      await release(false);
      throw error;
    },
  );
}
