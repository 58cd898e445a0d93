/** `lockd status [NAME]`: who holds and who waits, as a table (or --json), from the ops server. */
import { readOptionFile } from "./files.ts";
import { parseOptions } from "./options/argv.ts";
import { helpRow, optionsHelp } from "./options/help.ts";
import { STATUS_OPTIONS } from "../config.ts";
import type { HolderView, LockView, LocksView, WaiterView } from "../server/views.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";
import { expectOk, humanMs, lockQuery, type OpsAnswer, opsRequest } from "./ops-client.ts";
import type { Address } from "../address.ts";
import { describeShards, placementOf } from "../shard.ts";

export const STATUS_HELP = `Usage: lockd status [options] [NAME]

Shows every lock that has a holder or waiters (or only NAME): the holder's
session id, owner label, address, fencing token, how long it has held the
lock, its lease and how long it has been silent; then the waiters in queue
order. Asks the ops server of a running lockd serve, one page of 1000 locks
at a time, in name order; it stops after 10 pages (10,000 locks) and says so.

Options (flag, then environment, then default):
${optionsHelp(STATUS_OPTIONS)}
${helpRow("--json", "print the ops server's JSON instead of a table")}
${helpRow("-h, --help", "this text")}

With shards, --ops (or LOCKD_OPS) names each shard's ops servers in the
map syntax of LOCKD_SERVER (alpha=HOST:PORT,...;beta=HOST:PORT): NAME is
looked up on its shard only (the same placement the clients use), and
without NAME every shard is shown, one section per shard.

Exit codes: 0 shown (also for a free lock); 64 bad options; 69 ops server
(of any shard) unreachable.
`;

export async function status(argv: readonly string[], env: Record<string, string | undefined>, out = process.stdout): Promise<number> {
  const parsed = parseOptions(STATUS_OPTIONS, argv, env, { "--json": "json" });
  if (parsed.help) {
    out.write(STATUS_HELP);
    return ExitCode.OK;
  }
  if (parsed.positionals.length > 1) throw new CliError(`one lock name at most (got ${parsed.positionals.length})`, ExitCode.USAGE);
  const { ops: map, timeout, opsCa } = parsed.options;
  const json = parsed.switches.has("json");
  const name = parsed.positionals[0];
  const ca = opsCa !== undefined ? { ca: readOptionFile(opsCa, "--ops-ca") } : {};
  const placement = placementOf(map);
  const getFrom = (ops: readonly Address[]) => (path: string) => opsRequest(ops, "GET", path, { timeoutMs: timeout, ...ca });
  if (placement === null) return await statusOf(getFrom(map.shards[0]!.addresses), name, json, out);
  const about = describeShards(placement.shards, map.generation);
  if (name !== undefined) {
    const index = placement.indexOf(name);
    const shard = map.shards[index]!;
    if (!json) out.write(`shard ${shard.name} of ${about}\n`);
    return await statusOf(getFrom(shard.addresses), name, json, out, shard.name);
  }
  let worst: number = ExitCode.OK;
  const views: Record<string, unknown> = {};
  for (const shard of map.shards) {
    if (!json) out.write(`${shard === map.shards[0] ? "" : "\n"}shard ${shard.name} of ${about}\n`);
    // With --json, each shard's answer is collected and printed as one document at the end.
    const collected = { text: "", write(text: string) { this.text += text; } };
    try {
      await statusOf(getFrom(shard.addresses), undefined, json, json ? collected : out, shard.name);
      if (json) views[shard.name] = JSON.parse(collected.text);
    } catch (error) {
      if (!(error instanceof CliError)) throw error;
      process.stderr.write(`lockd status: shard ${shard.name}: ${error.message}\n`);
      if (json) views[shard.name] = { error: error.message };
      worst = error.exitCode;
    }
  }
  if (json) out.write(`${JSON.stringify({ generation: map.generation, shards: views }, null, 2)}\n`);
  return worst;
}

/** One service's status (every lock, or NAME); `shard` labels the JSON when the service is a shard. */
async function statusOf(
  get: (path: string) => Promise<OpsAnswer>,
  name: string | undefined,
  json: boolean,
  out: { write(text: string): unknown },
  shard?: string,
): Promise<number> {
  const label = shard === undefined ? {} : { shard };
  if (name === undefined) {
    const view = await listLocks(get);
    if (json) {
      out.write(`${JSON.stringify({ ...label, ...view }, null, 2)}\n`);
      return ExitCode.OK;
    }
    const s = view.sessions;
    out.write(await roleLine(get));
    out.write(`${view.total} lock${view.total === 1 ? "" : "s"}; sessions: ${s.owner} holding, ${s.waiting} waiting, ${s.connected} connecting\n`);
    if (view.locks.length > 0) out.write(table(view.locks));
    if (view.next !== null) {
      out.write(`(showing the first ${view.locks.length} of ${view.total} locks, in name order; ask for one with lockd status NAME)\n`);
    }
    return ExitCode.OK;
  }
  const answer = await get(`/v1/locks?${lockQuery(name)}`);
  if (answer.status === 404) {
    out.write(json ? `${JSON.stringify({ ...label, name, holder: null, waiters: [] }, null, 2)}\n` : `${name}: free (no holder, no waiters)\n`);
    return ExitCode.OK;
  }
  expectOk(answer);
  out.write(json ? `${JSON.stringify({ ...label, ...(answer.body as object) }, null, 2)}\n` : table([answer.body as LockView]));
  return ExitCode.OK;
}

/** Pages of /v1/locks fetched by `lockd status` at most: 10,000 locks at the server's largest page. */
export const STATUS_MAX_PAGES = 10;

/**
 * Every lock, following the server's cursor page by page, for at most
 * `maxPages` pages. The answer has the shape of one page: `next` is not
 * null when it stopped before the last; total and sessions are the last
 * page's (the freshest).
 */
export async function listLocks(
  get: (path: string) => Promise<OpsAnswer>,
  options: { pageSize?: number; maxPages?: number } = {},
): Promise<LocksView> {
  const limit = options.pageSize === undefined ? "" : `limit=${options.pageSize}&`;
  const locks: LockView[] = [];
  let page: LocksView | null = null;
  for (let n = 0; n < (options.maxPages ?? STATUS_MAX_PAGES) && (page === null || page.next !== null); n++) {
    const answer = await get(`/v1/locks?${limit}${page === null ? "" : `cursor=${encodeURIComponent(page.next!)}`}`);
    expectOk(answer);
    page = answer.body as LocksView;
    locks.push(...page.locks);
  }
  return { ...page!, locks };
}

/** With --coordinator: "service S: active, epoch N" (a standby serves no locks); nothing without. */
async function roleLine(get: (path: string) => Promise<OpsAnswer>): Promise<string> {
  const ready = await get("/readyz");
  const body = ready.body as { role?: string; epoch?: number; service?: string } | null;
  if (body === null || typeof body !== "object" || body.role === undefined) return "";
  const note = body.role === "standby" ? " (a standby serves no locks: ask the active)" : "";
  return `service ${body.service}: ${body.role}, epoch ${body.epoch}${note}\n`;
}

const HEADER = ["LOCK", "ROLE", "SESSION", "OWNER", "REMOTE", "TOKEN", "FOR", "LEASE", "SILENT"];

function row(lock: string, role: string, s: HolderView | WaiterView, token: string, forMs: number): string[] {
  return [lock, role, String(s.session), s.owner === "" ? "-" : s.owner, s.remote || "-", token, humanMs(forMs), humanMs(s.leaseMs), humanMs(s.silentForMs)];
}

/** A plain aligned table: the holder, then the waiters in queue order, per lock. */
export function table(locks: readonly LockView[]): string {
  const rows: string[][] = [HEADER];
  for (const lock of locks) {
    let label = lock.name;
    if (lock.holder !== null) {
      rows.push(row(label, "holder", lock.holder, lock.holder.token, lock.holder.heldForMs));
      label = "";
    } else {
      rows.push([label, "(free)", "", "", "", "", "", "", ""]);
      label = "";
    }
    for (const w of lock.waiters) rows.push(row(label, `waiter ${w.position}`, w, "-", w.waitingForMs));
    const more = lock.waiting - lock.waiters.length;
    if (more > 0) rows.push(["", `(+${more} more waiting)`, "", "", "", "", "", "", ""]);
  }
  const widths = HEADER.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ").trimEnd()).join("\n") + "\n";
}
