/**
 * bench:shards-load: more live, heartbeating sessions over several shard
 * processes than one process can hold. Every `lockd serve` here runs with
 * the same low open-file limit (`ulimit -n`, default 1024: a process's
 * limit is its own, so N processes hold N times the sessions); a baseline
 * run gives the same sessions to one process with that limit, which holds
 * what its limit allows (--max-sessions auto = limit - 256) and refuses
 * the rest with OVERLOADED.
 *
 *     bun bench/shards-load.ts [--shards 4] [--sessions 2400] [--ulimit 1024]
 *                              [--lease 2s] [--hold 20s]
 *
 * Sessions are LockClient claims (one connection each, heartbeating on the
 * protocol's schedule) on distinct names, spread by the server map
 * `s0=...;s1=...`. It reports, per process and in total: sessions held at
 * the end of the hold, and the locks lost that the clients did not cause
 * (lost for any reason but release: must be 0), with each server's own
 * lease-expiry count from /metrics.
 */
import { LockClient } from "../src/client/client.ts";
import { ServerUnavailableError } from "../src/client/errors.ts";
import type { Lock } from "../src/client/lock.ts";
import { LockdServe, stopAllServers } from "./lib/lockd-serve.ts";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const SHARDS = Number(args.get("shards") ?? 4);
const SESSIONS = Number(args.get("sessions") ?? 2400);
const ULIMIT = Number(args.get("ulimit") ?? 1024);
const LEASE_MS = seconds(args.get("lease") ?? "2s") * 1000;
const HOLD_MS = seconds(args.get("hold") ?? "20s") * 1000;

function seconds(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s)$/.exec(text);
  if (m === null) throw new Error(`bad duration ${text} (2s, 500ms)`);
  return m[2] === "ms" ? Number(m[1]) / 1000 : Number(m[1]);
}

interface Row {
  readonly label: string;
  readonly held: number;
  readonly lostUncaused: number;
  readonly refused: number;
  readonly leaseExpired: number;
  readonly rss: number;
}

async function metric(opsPort: number, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${opsPort}/metrics`)).text();
  const m = pattern.exec(text);
  return m === null ? 0 : Number(m[1]);
}

/** Start `shards` servers (one unnamed when 1), claim SESSIONS names, hold for HOLD_MS, count. */
async function run(shards: number): Promise<Row[]> {
  const names = Array.from({ length: shards }, (_, i) => `s${i}`);
  const servers: { server: LockdServe; port: number; opsPort: number }[] = [];
  for (const name of names) {
    const shardArgs = shards === 1 ? [] : ["--shard", name, "--shards", names.join(",")];
    servers.push(await LockdServe.start({ args: ["--shutdown-grace", "0s", ...shardArgs], ulimit: ULIMIT }));
  }
  const map = shards === 1 ? `127.0.0.1:${servers[0]!.port}` : names.map((n, i) => `${n}=127.0.0.1:${servers[i]!.port}`).join(";");
  const client = new LockClient({ servers: map, reconnectMs: 2000 });
  const locks: Lock[] = [];
  let refused = 0;
  const lost = new Map<string, number>();
  const claims: Promise<void>[] = [];
  for (let i = 0; i < SESSIONS; i++) {
    const name = `load/${i}`;
    claims.push(
      client.acquire(name, { lease: LEASE_MS }).then(
        (lock) => {
          locks.push(lock);
          lock.signal.addEventListener("abort", () => {
            const why = (lock.signal.reason as { why?: string }).why ?? "?";
            if (why !== "released") lost.set(client.shardOf(name), (lost.get(client.shardOf(name)) ?? 0) + 1);
          });
        },
        (error) => {
          if (!(error instanceof ServerUnavailableError)) throw error;
          refused++;
        },
      ),
    );
    if (i % 200 === 199) await Promise.all(claims.slice(-200)); // open in batches: no connect storm
  }
  await Promise.all(claims);
  await Bun.sleep(HOLD_MS); // the measured hold: sessions heartbeat on their own schedule
  const rows: Row[] = [];
  for (let i = 0; i < shards; i++) {
    const s = servers[i]!;
    const shard = shards === 1 ? "" : names[i]!;
    rows.push({
      label: shards === 1 ? "one process" : `shard ${shard}`,
      held: locks.filter((l) => client.shardOf(l.name) === shard && l.signal.aborted === false).length,
      lostUncaused: lost.get(shard) ?? 0,
      refused: shards === 1 ? refused : 0,
      leaseExpired: await metric(s.opsPort, /lockd_session_ends_total\{reason="lease_expired"\} (\d+)/),
      rss: s.server.rss(),
    });
  }
  await Promise.all(locks.map((l) => l.release()));
  await stopAllServers();
  return rows;
}

function print(title: string, rows: Row[]): void {
  console.log(`\n${title}`);
  console.log("| process | sessions held | lost, not by the client | refused (OVERLOADED, retried for 2 s) | lease expiries (server) | RSS |");
  console.log("|---|---|---|---|---|---|");
  const mib = (b: number) => `${(b / 1024 / 1024).toFixed(0)} MiB`;
  for (const r of rows) console.log(`| ${r.label} | ${r.held} | ${r.lostUncaused} | ${r.refused} | ${r.leaseExpired} | ${mib(r.rss)} |`);
  if (rows.length > 1) {
    const sum = (f: (r: Row) => number) => rows.reduce((n, r) => n + f(r), 0);
    console.log(`| total | ${sum((r) => r.held)} | ${sum((r) => r.lostUncaused)} | ${sum((r) => r.refused)} | ${sum((r) => r.leaseExpired)} | ${mib(sum((r) => r.rss))} |`);
  }
}

try {
  console.log(`${SESSIONS} sessions (distinct names), lease ${LEASE_MS} ms, held ${HOLD_MS} ms; every lockd serve under ulimit -n ${ULIMIT}`);
  print("baseline: one process", await run(1));
  print(`${SHARDS} shard processes`, await run(SHARDS));
} finally {
  await stopAllServers();
}
