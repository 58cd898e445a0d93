/** `lockd force-release NAME` and `lockd kick ID`: the admin actions of the ops server. */
import { readOptionFile } from "./files.ts";
import { type OptionTable, parseOptions } from "./options/argv.ts";
import { helpRow, optionsHelp } from "./options/help.ts";
import { FORCE_RELEASE_OPTIONS, KICK_OPTIONS } from "./options/ops-options.ts";
import { resolveAdminToken } from "./secrets.ts";
import type { HolderView, WaiterView } from "../ops/views.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";
import { errorMessage, expectOk, humanMs, isNotActive, lockQuery, opsRequest, withoutStandbys } from "./ops-client.ts";
import type { Address } from "../net/address.ts";
import type { ServerMap } from "../shard/map.ts";
import { placementOf } from "../shard/placement.ts";

function common(table: OptionTable, nothing: string): string {
  return `Options (flag, then environment, then default):
${optionsHelp(table)}
${helpRow("--json", "print the ops server's JSON answer")}
${helpRow("-h, --help", "this text")}

Exit codes: 0 done; 1 nothing done (${nothing});
64 bad arguments; 69 ops server unreachable (every address of an --ops
list), or only standbys answered (with --coordinator, list every instance:
standbys are passed over); 77 no token given, token refused, or the server has no admin token
configured; 78 the server is another shard than NAME's (or than the one
shard --ops names), and nothing was done.
`;
}

export const FORCE_RELEASE_HELP = `Usage: lockd force-release [options] NAME

Ends a session that holds NAME with ERROR FORCE_RELEASED; the waiters that
fit then (the first, or a run of shared ones) get the lock at once, each
with a new fencing token. With a map of shards in --ops, the request goes
to NAME's shard.

Name the holder you mean with --token (its fencing token) and/or --session
(its session id), as lockd status showed them: of a semaphore's or shared
lock's holders, that one is released and no other. If it has left (and
another session holds NAME now), nothing is released (exit 1, naming a
holder). Without them, the oldest holder when the request arrives is
released (the owner of an exclusive lock: for scripts that mean exactly
that).

${common(FORCE_RELEASE_OPTIONS, "no holder, or not the one --token or --session names")}`;

export const KICK_HELP = `Usage: lockd kick [options] SESSION_ID

Ends a waiting session with ERROR KICKED; the others keep their places in
the queue. Session ids are in lockd status; they are per server, so with
a map of shards --ops must name one shard's servers. (A holder is ended
with force-release instead.) --lock NAME kicks it only if it waits for NAME
(an id seen on another server, or before a restart, is not that session).

${common(KICK_OPTIONS, "no such waiting session, or it waits for another lock than --lock")}`;

type Verb = "force-release" | "kick";

export async function admin(verb: Verb, argv: readonly string[], env: Record<string, string | undefined>, out = process.stdout): Promise<number> {
  const parsed = parseOptions({ ...FORCE_RELEASE_OPTIONS, ...KICK_OPTIONS }, argv, env, { "--json": "json" });
  if (parsed.help) {
    out.write(verb === "kick" ? KICK_HELP : FORCE_RELEASE_HELP);
    return ExitCode.OK;
  }
  const what = verb === "kick" ? "SESSION_ID" : "NAME";
  if (parsed.positionals.length !== 1) throw new CliError(`needs exactly one ${what} (lockd ${verb} --help)`, ExitCode.USAGE);
  const target = parsed.positionals[0]!;
  const { token: holderToken, session, lock } = parsed.options;
  if (verb === "kick" && (holderToken !== undefined || session !== undefined)) {
    throw new CliError("kick takes no --token or --session: SESSION_ID names the session (--lock NAME, the lock it waits for)", ExitCode.USAGE);
  }
  if (verb === "force-release" && lock !== undefined) throw new CliError("force-release takes no --lock: NAME is the lock (--token, --session name its holder)", ExitCode.USAGE);
  const { ops: map, timeout, opsCa } = parsed.options;
  const { token, from } = resolveAdminToken(parsed.options, parsed.sources);
  if (token === null) {
    // Without a token the answer can only be 401 (or 403): say which flag gives one, not which header.
    throw new CliError(`needs the admin token the server was started with: --admin-token-file FILE (env LOCKD_ADMIN_TOKEN_FILE), or --admin-token TOKEN (env LOCKD_ADMIN_TOKEN)`, ExitCode.NOPERM);
  }
  const ops = opsFor(verb, target, map);
  // A map of one named shard: the server checks it is that shard before it kicks (ids are per server).
  const shard = map.shards.length === 1 && map.shards[0]!.name !== "" ? `?shard=${encodeURIComponent(map.shards[0]!.name)}` : "";
  const path = verb === "kick"
    ? `/v1/sessions/${encodeURIComponent(target)}/kick${shard}${lock === undefined ? "" : `${shard === "" ? "?" : "&"}lock=${encodeURIComponent(lock)}`}`
    : `/v1/locks/force-release?${lockQuery(target)}${session === undefined ? "" : `&session=${session}`}${holderToken === undefined ? "" : `&token=${holderToken}`}`;
  const request = { token, timeoutMs: timeout, ...(opsCa !== undefined ? { ca: readOptionFile(opsCa, "--ops-ca") } : {}) };
  // Every instance of a coordinated service may be listed: the action goes to the active, never a standby.
  const answer = await opsRequest(await withoutStandbys(ops, request), "POST", path, request);
  if (answer.status === 401) {
    throw new CliError(`the ops server refused the admin token (from ${from}): ${errorMessage(answer)}; give the one lockd serve was started with (--admin-token-file FILE, or LOCKD_ADMIN_TOKEN)`, ExitCode.NOPERM);
  }
  // The server is another shard than the one meant (a name's, or the map's): nothing was done.
  if (answer.status === 421) throw new CliError(`${errorMessage(answer)} (--ops, LOCKD_OPS)`, ExitCode.WRONG_SHARD);
  // A lone standby (a list has had its standbys passed over): the service's active was not asked.
  if (isNotActive(answer)) throw new CliError(`${errorMessage(answer)}; --ops, LOCKD_OPS: list every instance`, ExitCode.UNAVAILABLE);
  expectOk(answer);
  if (parsed.switches.has("json")) {
    out.write(`${JSON.stringify(answer.body, null, 2)}\n`);
    return ExitCode.OK;
  }
  if (verb === "kick") {
    const { lock, kicked } = answer.body as { lock: string; kicked: WaiterView };
    out.write(`kicked session ${kicked.session}${label(kicked.owner)} from ${JSON.stringify(lock)} (it was waiter ${kicked.position}, waiting ${humanMs(kicked.waitingForMs)})\n`);
  } else {
    const { lock, released, promoted } = answer.body as { lock: string; released: HolderView; promoted: HolderView | null };
    const { promotedCount } = answer.body as { promotedCount?: number };
    out.write(`released ${JSON.stringify(lock)} from session ${released.session}${label(released.owner)}${slotOf(released)}, token ${released.token}, held ${humanMs(released.heldForMs)}\n`);
    if (promoted === null) {
      // A semaphore's or shared lock's other holders may still hold it; a lock-delay may hold a waiter back.
      const { holding, waiting } = answer.body as { holding?: number; waiting?: number };
      if (typeof holding === "number" && holding > 0) out.write(`no waiter was granted: ${holding} other holder${holding === 1 ? "" : "s"} still hold${holding === 1 ? "s" : ""} it\n`);
      else if (typeof waiting === "number" && waiting > 0) out.write(`no waiter was granted yet (${waiting} waiting)\n`);
      else out.write("no waiters: the lock is free\n");
    } else {
      const others = typeof promotedCount === "number" && promotedCount > 1 ? ` (and ${promotedCount - 1} more granted with it)` : "";
      out.write(`promoted session ${promoted.session}${label(promoted.owner)}${slotOf(promoted)}, token ${promoted.token}${others}\n`);
    }
  }
  return ExitCode.OK;
}

/**
 * The ops addresses an action goes to: a plain list as it is; with a map of
 * shards (the one LOCKD_OPS holds for lockd status), force-release goes to
 * NAME's shard, and kick needs one shard (session ids are per server).
 */
function opsFor(verb: Verb, target: string, map: ServerMap): readonly Address[] {
  const placement = placementOf(map);
  if (placement === null || map.shards.length === 1) return map.shards[0]!.addresses;
  if (verb === "kick") {
    throw new CliError(
      `kick needs the ops servers of one shard: session ids are per server, and --ops is a map of ${map.shards.length} shards; give that shard's alone (--ops "${map.shards[0]!.name}=HOST:PORT,..." is checked against the server; a plain HOST:PORT,... list is not), as lockd status --ops MAP shows each shard's sessions`,
      ExitCode.USAGE,
    );
  }
  return map.shards[placement.indexOf(target)]!.addresses;
}

/** ", slot K" for a semaphore's holder, ", shared" for a shared one; "" for an exclusive one. */
function slotOf(holder: HolderView): string {
  return typeof holder.slot === "number" ? `, slot ${holder.slot}` : holder.shared === true ? ", shared" : "";
}

function label(owner: string): string {
  return owner === "" ? "" : ` (${owner})`;
}
