/** Command line of bench/abuse.ts: parsed and checked here, so a test can hold it to its word. */
import { parseDuration } from "../../src/cli/options/values.ts";

export const ATTACKS = {
  a: "pipelined heartbeats, reading the replies (1 connection)",
  b: "pipelined heartbeats, not reading (1 connection)",
  c: "pipelined heartbeats, not reading, reconnecting in a loop",
  d: "concurrent GET /metrics with many sessions open",
  e: "concurrent GET /v1/locks?limit=100000, many 512-byte names",
  f: "idle connections flooding the ops port",
  g: "idle connections flooding the lock port",
  h: "new connections: connect, ACQUIRE, close, in a loop",
  i: "concurrent GET /v1/locks paging the whole table (limit=1000 and the cursor), many 512-byte names",
  j: "pipelined heartbeats in 1 MiB writes, reading, each connection reopened as soon as it is cut",
  k: "half-sent request heads flooding the ops port",
  l: "pipelined GET /livez on keep-alive ops connections, reading the answers",
  m: "GET /v1/locks?limit=1000 on many ops connections that never read the answer, many 512-byte names",
  n: "the biggest views of a lock with 1,000 waiters (256-byte owners): GET and pipelined HEAD ?limit=1000",
  o: "keep-alive ops connections, one GET each every 4 s, while /readyz is probed",
  p: "a crowd of sessions whose leases all end in the same millisecond",
} as const;
export type AttackId = keyof typeof ATTACKS;
/** The one lock of the crowd of waiters in attack n (bench/abuse-crowd.ts with `queue`). */
export const QUEUE_NAME = "abuse/crowd/queue";
export const ATTACK_IDS = Object.keys(ATTACKS) as AttackId[];

export interface AbuseOptions {
  readonly only: readonly AttackId[];
  readonly durationMs: number;
  readonly restMs: number;
  readonly afterMs: number;
  readonly leasesMs: readonly number[];
  readonly probeRate: number;
  readonly probeTimeoutMs: number;
  /** Crowd sessions for d (short names) and locks for e (512-byte names). */
  readonly sessions: number;
  readonly locks: number;
  readonly scrapers: number;
  readonly listers: number;
  readonly flood: number;
  readonly churners: number;
  /** Concurrent reconnecting pipeliners (j). */
  readonly pipeliners: number;
  /** Open-file limit for the server in the descriptor floods (f, g, k); 0 = inherit. */
  readonly ulimit: number;
  /** Its hard limit when above `ulimit` (--ulimit SOFT/HARD; 0 = the same as the soft one). */
  readonly ulimitHard: number;
  /** Ops connections left with an unread answer (m). */
  readonly stuck: number;
  /** Waiters on the one lock whose views n asks for. */
  readonly waiters: number;
  /** Ops connections asking for those views (n). */
  readonly viewers: number;
  /** Keep-alive ops connections (o). */
  readonly keepalive: number;
  /** Sessions whose leases end at once (p). */
  readonly expirers: number;
  readonly perSource: number;
  /** Options for `lockd serve`, everything after `--`. */
  readonly serverArgs: readonly string[];
}

export const USAGE = `Usage: npm run bench:abuse -- [options] [-- lockd serve options]

Runs each attack against a fresh \`lockd serve\` child on 127.0.0.1 while
holders (real client library) keep locks on schedule and a prober times
fresh ACQUIREs and GET /readyz; prints one markdown table row per attack.

Options:
  --only a,c,h          attacks to run (default all: ${ATTACK_IDS.join(",")})
  --duration 10s        length of each attack
  --rest 5s             prober baseline before each attack (same server, same setup)
  --after 3s            time after each attack in which losses still count
  --leases 1s,1s,5s,5s  one legitimate holder per lease
  --probe-rate 20       probes per second (each: one fresh ACQUIRE and one /readyz)
  --probe-timeout 10s   a probe with no answer by then fails
  --sessions 10000      open sessions during d
  --locks 10000         held locks with 512-byte names during e
  --scrapers 2000       concurrent /metrics requests (d)
  --listers 50          concurrent /v1/locks requests (e) or pagers (i)
  --flood 4500          idle connections (f, g), half-sent heads (k)
  --churners 64         concurrent connect-ACQUIRE-close loops (h)
  --pipeliners 8        concurrent pipelining connections, each reopened when cut (j, l)
  --stuck 500           ops connections whose answer is never read (m)
  --waiters 1000        waiters (256-byte owners) on the one lock whose views n asks for
  --viewers 64          ops connections asking for that lock's views (n)
  --keepalive 64        keep-alive ops connections, one GET each every 4 s (o)
  --expirers 15360      sessions whose leases end in the same millisecond (p)
  --ulimit 4096         server's open-file limit in f, g and k, soft and hard (0: inherit;
                        SOFT/HARD: a soft limit under the hard one, which the server may raise)
  --per-source 32       crowd sessions per source address (127.0.1.x)
  -h, --help            this text

Options after \`--\` go to \`lockd serve\` in every attack, e.g.
  npm run bench:abuse -- --only g,h -- --max-sessions-per-source 64
A server that does not know an option is started without it, and the
report says so.`;

export class UsageError extends Error {}

function positive(flag: string, text: string, integer = true): number {
  const n = Number(text);
  if (!(Number.isFinite(n) && n > 0 && (!integer || Number.isInteger(n)))) throw new UsageError(`${flag}: "${text}" is not a positive ${integer ? "whole " : ""}number`);
  return n;
}

function durationOf(flag: string, text: string, min = 1): number {
  const ms = parseDuration(text);
  if (!(ms >= min)) throw new UsageError(`${flag}: "${text}" is not a duration of at least ${min} ms (examples: 500ms, 10s, 2m)`);
  return ms;
}

/** Parse argv (without the program name); throws UsageError with a message naming the flag. Returns null for --help. */
export function parseAbuseArgs(argv: readonly string[]): AbuseOptions | null {
  const split = argv.indexOf("--");
  const own = split < 0 ? argv : argv.slice(0, split);
  const serverArgs = split < 0 ? [] : argv.slice(split + 1);
  const values = new Map<string, string>();
  for (let i = 0; i < own.length; i++) {
    const arg = own[i]!;
    if (arg === "-h" || arg === "--help") return null;
    if (!arg.startsWith("--")) throw new UsageError(`unexpected argument ${JSON.stringify(arg)} (server options go after --)`);
    const eq = arg.indexOf("=");
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const value = eq > 0 ? arg.slice(eq + 1) : own[++i];
    if (value === undefined) throw new UsageError(`${flag} needs a value`);
    values.set(flag, value);
  }
  const known = ["--only", "--duration", "--rest", "--after", "--leases", "--probe-rate", "--probe-timeout", "--sessions", "--locks", "--scrapers", "--listers", "--flood", "--churners", "--pipeliners", "--stuck", "--waiters", "--viewers", "--keepalive", "--expirers", "--ulimit", "--per-source"];
  for (const flag of values.keys()) if (!known.includes(flag)) throw new UsageError(`unknown option ${flag} (lockd serve options go after --)`);
  const get = (flag: string, fallback: string) => values.get(flag) ?? fallback;

  const only = get("--only", ATTACK_IDS.join(","))
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  for (const id of only) if (!(id in ATTACKS)) throw new UsageError(`--only: unknown attack ${JSON.stringify(id)} (known: ${ATTACK_IDS.join(",")})`);
  if (only.length === 0) throw new UsageError("--only: name at least one attack");
  const [softText = "", hardText] = get("--ulimit", "4096").split("/");
  const ulimit = softText === "0" && hardText === undefined ? 0 : positive("--ulimit", softText);
  const ulimitHard = hardText === undefined ? 0 : positive("--ulimit", hardText);
  if (ulimitHard !== 0 && ulimitHard < ulimit) throw new UsageError(`--ulimit: the hard limit ${ulimitHard} is below the soft limit ${ulimit}`);
  return {
    only: ATTACK_IDS.filter((id) => only.includes(id)),
    durationMs: durationOf("--duration", get("--duration", "10s"), 100),
    restMs: durationOf("--rest", get("--rest", "5s"), 100),
    afterMs: durationOf("--after", get("--after", "3s"), 0),
    leasesMs: get("--leases", "1s,1s,5s,5s")
      .split(",")
      .filter((s) => s !== "")
      .map((s) => durationOf("--leases", s, 100)),
    probeRate: positive("--probe-rate", get("--probe-rate", "20"), false),
    probeTimeoutMs: durationOf("--probe-timeout", get("--probe-timeout", "10s"), 100),
    sessions: positive("--sessions", get("--sessions", "10000")),
    locks: positive("--locks", get("--locks", "10000")),
    scrapers: positive("--scrapers", get("--scrapers", "2000")),
    listers: positive("--listers", get("--listers", "50")),
    flood: positive("--flood", get("--flood", "4500")),
    churners: positive("--churners", get("--churners", "64")),
    pipeliners: positive("--pipeliners", get("--pipeliners", "8")),
    stuck: positive("--stuck", get("--stuck", "500")),
    waiters: positive("--waiters", get("--waiters", "1000")),
    viewers: positive("--viewers", get("--viewers", "64")),
    keepalive: positive("--keepalive", get("--keepalive", "64")),
    expirers: positive("--expirers", get("--expirers", "15360")),
    ulimit,
    ulimitHard,
    perSource: positive("--per-source", get("--per-source", "32")),
    serverArgs,
  };
}
