/** `lockd status [NAME]`: who holds and who waits, as a table (or --json), from the ops server. */
import { readOptionFile } from "./files.ts";
import { parseOptions } from "./options/argv.ts";
import { helpRow, optionsHelp } from "./options/help.ts";
import { STATUS_OPTIONS } from "./options/ops-options.ts";
import type { HolderView, LockView, LocksView, ShardView, WaiterView } from "../ops/views.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";
import { activeHint, expectOk, humanMs, isNotActive, lockQuery, type OpsAnswer, opsRequest, OpsUnreachable } from "./ops-client.ts";
import { type Address, formatAddress } from "../net/address.ts";
import { describeShards, Placement, placementOf } from "../shard/placement.ts";
import { NO_SHARDS } from "../shard/identity.ts";
import type { CoordinatorServer } from "../failover/servers.ts";
import { describeReplication } from "../failover/replication.ts";

export const STATUS_HELP = `Usage: lockd status [options] [NAME]

Shows every lock that has a holder or waiters (or only NAME): each holder
(oldest first; a semaphore's with its slot) with its session id, owner
label, address, fencing token, how long it has held the lock, its lease and
how long it has been silent; then the waiters in queue order. MODE is each
session's claim: exclusive, shared, or "limit N" (a semaphore of N). Asks
the ops server of a running lockd serve, one page of 1000 locks at a time,
in name order; it stops after 10 pages (10,000 locks) and says so. Each
lock of the list shows its first 100 holders and 100 waiters (and how many
more); NAME shows up to 10,000 holders and its first 1000 waiters.

Options (flag, then environment, then default):
${optionsHelp(STATUS_OPTIONS)}
${helpRow("--json", "print the ops server's JSON instead of a table")}
${helpRow("-h, --help", "this text")}

With shards, --ops (or LOCKD_OPS) names each shard's ops servers in the
map syntax of LOCKD_SERVER (alpha=HOST:PORT,...;beta=HOST:PORT): NAME is
looked up on its shard only (the same placement the clients use), and
without NAME every shard is shown, one section per shard, headed by the
generation the servers say they run. Every answer is checked against the
map: each ops server says which shard of which map it is, and one that is
not the shard the map names (swapped addresses, a server without --shard,
another map) is an error naming the address, never a "free" from the
wrong shard. Servers that disagree on the generation (or with the map's
gen=) get a warning. With a plain list, a lock NAME asked of one shard of
several that does not own it is an error too.

With --coordinator, give every instance's ops address (a:7701,b:7701, or
per shard in the map): the active is asked and standbys are passed over
(a standby serves no locks; its "free" would be false). An "instances:"
line says what each instance is (with shards, and its map's generation);
an instance that runs another map than its shard's active (one warning,
naming the flags to restart it with, and whether it refuses to take
over), another standby that will not take over, or an instance that does
not answer, is a warning on stderr: the instance is wrong, not the map,
and the exit stays 0. When only standbys answer (also a lone standby's
address, for NAME), the exit is 69 and the error names the active the
standbys see (and its ops address, when it advertises one). A lone
standby's address without NAME shows its role line (exit 0).

While the server (or the service's active) runs a lock-delay (no grant
of some or every name after a failover or a restart, until an earlier
server's holders can no longer believe they hold), a "lock-delay:" line
says how long is left and for which names; --json has the lockDelay of
its /readyz. After a clean stop with --reclaim-max-lease, a "reclaim grace:"
line follows while the grace runs: the time left, how many of the grants
the stop published their holders have reclaimed, and the first few names
still waiting for theirs.

Exit codes: 0 shown (also for a free lock, and with warnings about
instances); 64 bad options; 69 ops server (of any shard) unreachable, or
only standbys answered; 78 the map given is wrong: an ops server in it is
not the shard --ops says (and, for a standby, not of that shard's service).
`;

export async function status(
  argv: readonly string[],
  env: Record<string, string | undefined>,
  out: { write(text: string): unknown } = process.stdout,
  err: { write(text: string): unknown } = process.stderr,
): Promise<number> {
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
  const request = { timeoutMs: timeout, ...ca };
  /**
   * Each address's /readyz, asked once per run (a promise per address):
   * the same answer passes a standby over, gives the role line and the
   * instances line, however many pages the listing takes.
   */
  const asked = new Map<string, Promise<OpsAnswer>>();
  const readyz = (address: Address): Promise<OpsAnswer> => {
    const key = formatAddress(address);
    let answer = asked.get(key);
    if (answer === undefined) asked.set(key, (answer = opsRequest(address, "GET", "/readyz", request)));
    return answer;
  };
  /**
   * Each address in turn until one answers; every answer is checked against
   * what the map says of it. A standby is passed over: it serves no locks,
   * and its view (idle, or its last term's) would show a held lock as free.
   * Its lock routes answer 503 NOT_ACTIVE; /readyz is asked too, for a
   * lockd from before that answer.
   */
  const getFrom = (ops: readonly Address[], expect: Expected, seen: ShardView[]) => {
    const standbys = new Set<Address>();
    /** What the standbys said of their service's active (their /readyz, or a NOT_ACTIVE answer: both name it). */
    const said: unknown[] = [];
    return async (path: string): Promise<OpsAnswer> => {
      const failures: string[] = [];
      for (const address of ops) {
        if (standbys.has(address)) {
          failures.push(`${formatAddress(address)}: a standby (it serves no locks)`);
          continue;
        }
        let answer: OpsAnswer;
        try {
          answer = path === "/readyz" ? await readyz(address) : await opsRequest(address, "GET", path, request);
          // A coordinated instance that is not the active says so on every lock route.
          // (A lone address listing every lock is let through: its role line is shown.)
          if (isNotActive(answer) && (ops.length > 1 || name !== undefined)) {
            standbys.add(address);
            said.push(answer.body);
            failures.push(`${formatAddress(address)}: a standby (it serves no locks)`);
            continue;
          }
          // A lone address is asked too when NAME is looked up: a standby's "free" would be false.
          const ready = ops.length > 1 || name !== undefined ? await readyz(address) : null;
          if ((ready?.body as { role?: unknown } | null | undefined)?.role === "standby") {
            standbys.add(address);
            said.push(ready!.body);
            failures.push(`${formatAddress(address)}: a standby (it serves no locks)`);
            continue;
          }
        } catch (error) {
          if (!(error instanceof CliError) || error.exitCode !== ExitCode.UNAVAILABLE || ops.length === 1) throw error;
          failures.push(`${formatAddress(address)}: ${error instanceof OpsUnreachable ? error.reasons.join("; ") : error.message}`);
          continue;
        }
        const view = checkShard(answer, address, expect, name);
        if (view !== null) seen.push(view);
        return answer;
      }
      const what = standbys.size === 0 ? "cannot reach any ops server of" : "no active instance among the ops servers";
      const hint = standbys.size === 0 ? "" : activeHint(said, ops, expect.shard);
      throw new CliError(`${what} ${ops.map(formatAddress).join(",")} (--ops, LOCKD_OPS): ${failures.join("; ")}${hint}`, ExitCode.UNAVAILABLE);
    };
  };
  /** The instances of a list, with their warnings said (on stderr, `prefix` naming the shard). */
  const instances = async (ops: readonly Address[], expect: Expected, prefix: string) => {
    const found = await instancesOf(ops, expect, readyz);
    for (const warning of found.warnings) err.write(`lockd status: warning: ${prefix}${warning}\n`);
    return found;
  };
  /**
   * The instances the map given is wrong about (another shard's, not of
   * this shard's service), said as errors on stderr, each once (`except`:
   * the error about to be reported anyway); whether there were any (exit 78).
   */
  const mapErrors = (found: { mapErrors: string[] }, prefix: string, except?: unknown): boolean => {
    const skip = except instanceof Error ? except.message : undefined;
    for (const message of found.mapErrors) if (message !== skip) err.write(`lockd status: ${prefix}${message}\n`);
    return found.mapErrors.length > 0;
  };
  /** A shard's (or the list's) JSON answer with its instances added. */
  const withInstances = (text: string, found: { list: Instance[] }) => {
    const view = JSON.parse(text) as Record<string, unknown>;
    return found.list.length === 0 ? view : { ...view, instances: found.list };
  };
  if (placement === null) {
    const seen: ShardView[] = [];
    const collected = buffer();
    const addresses = map.shards[0]!.addresses;
    const expected = { ...NO_SHARDS, generation: map.generation };
    let code: number;
    try {
      code = await statusOf(getFrom(addresses, expected, seen), name, json, collected);
    } catch (error) {
      // No instance could answer for the service: what each of them is, then the error.
      const found = await instances(addresses, expected, "");
      if (!json) out.write(found.text);
      throw error;
    }
    const found = await instances(addresses, expected, "");
    const shard = seen[0];
    // A plain address that is one shard of several: say that only its locks are shown.
    if (!json && shard !== undefined && shard.name !== null) {
      out.write(`shard ${shard.name} of ${describeShards(shard.shards, shard.generation)} (only this shard's locks: give --ops every shard's, ${shard.shards.map((s) => `${s}=HOST:PORT`).join(";")})\n`);
    }
    out.write(json ? `${JSON.stringify(withInstances(collected.text, found), null, 2)}\n` : found.text + collected.text);
    return code;
  }
  const expect = (shard: string): Expected => ({ shard, shards: placement.shards, generation: map.generation });
  if (name !== undefined) {
    const index = placement.indexOf(name);
    const shard = map.shards[index]!;
    const prefix = `shard ${shard.name}: `;
    const seen: ShardView[] = [];
    // Checked before anything is printed: an answer from the wrong shard says nothing about NAME.
    const collected = buffer();
    let code: number;
    try {
      code = await statusOf(getFrom(shard.addresses, expect(shard.name), seen), name, json, collected, shard.name);
    } catch (error) {
      const found = await instances(shard.addresses, expect(shard.name), prefix);
      const wrongMap = mapErrors(found, prefix, error);
      // No answer was trusted: the heading names no generation (the instances line has each one's).
      if (!json) out.write(`shard ${shard.name} of ${placement.shards.join(",")}\n${found.text}`);
      // The map given is wrong: that is the exit (78), as when listing every shard.
      if (wrongMap && error instanceof CliError && error.exitCode !== ExitCode.WRONG_SHARD) throw new CliError(error.message, ExitCode.WRONG_SHARD);
      throw error;
    }
    const found = await instances(shard.addresses, expect(shard.name), prefix);
    if (!json) out.write(`shard ${shard.name} of ${describeShards(placement.shards, seen[0]?.generation ?? map.generation)}\n${found.text}`);
    out.write(json ? `${JSON.stringify(withInstances(collected.text, found), null, 2)}\n` : collected.text);
    return mapErrors(found, prefix) ? ExitCode.WRONG_SHARD : code;
  }
  let worst: number = ExitCode.OK;
  const views: Record<string, unknown> = {};
  const generations = new Map<string, number>();
  for (const shard of map.shards) {
    // Each shard's answer is collected (and checked) first: its heading shows the generation its server says.
    const collected = buffer();
    const seen: ShardView[] = [];
    const prefix = `shard ${shard.name}: `;
    const gap = shard === map.shards[0] ? "" : "\n";
    try {
      await statusOf(getFrom(shard.addresses, expect(shard.name), seen), undefined, json, collected, shard.name);
      const found = await instances(shard.addresses, expect(shard.name), prefix);
      if (seen[0] !== undefined) generations.set(shard.name, seen[0].generation);
      if (json) views[shard.name] = withInstances(collected.text, found);
      else {
        const generation = seen[0]?.generation ?? map.generation;
        out.write(`${gap}shard ${shard.name} of ${describeShards(placement.shards, generation)}\n${found.text}${collected.text}`);
      }
      if (mapErrors(found, prefix)) worst = ExitCode.WRONG_SHARD;
    } catch (error) {
      if (!(error instanceof CliError)) throw error;
      const found = await instances(shard.addresses, expect(shard.name), prefix);
      const wrongMap = mapErrors(found, prefix, error);
      err.write(`lockd status: ${prefix}${error.message}\n`);
      if (json) views[shard.name] = { error: error.message, ...(found.list.length === 0 ? {} : { instances: found.list }) };
      // As a shown shard's section, less the locks (no answer was trusted: the heading names no generation).
      else out.write(`${gap}shard ${shard.name} of ${placement.shards.join(",")}\n${found.text}locks not shown (see the error on stderr)\n`);
      if (wrongMap || error.exitCode === ExitCode.WRONG_SHARD) worst = ExitCode.WRONG_SHARD;
      else if (worst === ExitCode.OK) worst = error.exitCode;
    }
  }
  const disagreement = generationProblem(generations, map.generation);
  if (disagreement !== null) err.write(`lockd status: warning: ${disagreement}\n`);
  if (json) {
    const distinct = new Set(generations.values());
    const generation = distinct.size === 1 ? [...distinct][0]! : null;
    out.write(`${JSON.stringify({ generation, mapGeneration: map.generation, ...(disagreement === null ? {} : { warning: disagreement }), shards: views }, null, 2)}\n`);
  }
  return worst;
}

const ROLES = new Set(["active", "standby", "stopped"]);

/** One instance of a list of ops addresses, as its /readyz says (`lockd status` with several addresses). */
interface Instance {
  readonly address: string;
  /** active, standby, stopped; ready or shutting_down without --coordinator; unreachable. */
  readonly state: string;
  readonly epoch?: number;
  /** The generation of the shard map it runs (its /readyz `shard` field; absent from a lockd before it). */
  readonly generation?: number;
  readonly refusal?: string;
  readonly error?: string;
}

/**
 * Every address of a list (an active and its standbys), asked /readyz at
 * once (through `readyz`, which asks each address once per run): the
 * answer above comes from one instance, and a standby that will not take
 * over (another map), instances of one shard that run different maps, or
 * an instance that does not answer, is what an operator must hear about
 * before the active fails. `text` is one line; `warnings` go to stderr,
 * one per instance at most (the flags to restart it with, when the active
 * says which, else its own refusal). `mapErrors`: instances that are not
 * the shard the map names and not of its service (the map given is wrong:
 * exit 78). Nothing for a single address.
 */
async function instancesOf(
  ops: readonly Address[],
  expect: Expected,
  readyz: (address: Address) => Promise<OpsAnswer>,
): Promise<{ list: Instance[]; text: string; warnings: string[]; mapErrors: string[] }> {
  const none = { list: [], text: "", warnings: [], mapErrors: [] };
  if (ops.length < 2) return none;
  type Body = { status?: unknown; role?: unknown; epoch?: unknown; refusal?: unknown; shard?: unknown; service?: unknown };
  const answers = await Promise.all(
    ops.map(async (address): Promise<{ address: Address; answer: OpsAnswer } | { address: Address; why: string }> => {
      try {
        return { address, answer: await readyz(address) };
      } catch (error) {
        if (!(error instanceof CliError) || error.exitCode !== ExitCode.UNAVAILABLE) throw error;
        return { address, why: error instanceof OpsUnreachable ? error.reasons.join("; ") : error.message };
      }
    }),
  );
  const bodyOf = (answer: OpsAnswer) => (answer.body ?? {}) as Body;
  // The service of the list's active: an instance of it (or one that refuses its row) is the shard's
  // instance, so a flag that differs is the instance's mistake, not the map's.
  const services = new Set(answers.flatMap((a) => ("answer" in a && bodyOf(a.answer).role === "active" && typeof bodyOf(a.answer).service === "string" ? [bodyOf(a.answer).service] : [])));
  const mapErrors: string[] = [];
  /** Each instance's place in the shard map, as it says it (absent: unreachable, or a lockd without the field). */
  const views = new Map<string, ShardView>();
  /** The same, less the instances the map is wrong about: compared with the active's below. */
  const maps = new Map<string, ShardView>();
  const list = answers.map((a): Instance => {
    const at = formatAddress(a.address);
    if (!("answer" in a)) return { address: at, state: "unreachable", error: a.why };
    const body = bodyOf(a.answer);
    const state = typeof body.role === "string" ? body.role : typeof body.status === "string" ? body.status : `HTTP ${a.answer.status}`;
    const refusal = typeof body.refusal === "string" ? body.refusal : undefined;
    const view = parseShardView(body.shard);
    if (view) {
      views.set(at, view);
      maps.set(at, view);
    }
    try {
      checkShard(a.answer, a.address, expect, undefined);
    } catch (error) {
      if (!(error instanceof CliError)) throw error;
      const ofTheService = refusal !== undefined || (typeof body.service === "string" && services.has(body.service));
      if (!ofTheService) {
        mapErrors.push(error.message);
        maps.delete(at);
      }
    }
    return {
      address: at,
      state,
      ...(typeof body.epoch === "number" ? { epoch: body.epoch } : {}),
      ...(view ? { generation: view.generation } : {}),
      ...(refusal === undefined ? {} : { refusal }),
    };
  });
  // Without --coordinator a list names replacements started only once the first is gone: nothing to say.
  if (!list.some((i) => ROLES.has(i.state))) return none;
  const actives = list.filter((i) => i.state === "active");
  const mismatch = mapMismatch(list, maps, actives.length === 1 ? actives[0]!.address : null, expect.shard !== null);
  const warnings: string[] = [];
  for (const i of list) {
    const fix = mismatch.each.get(i.address);
    if (i.error !== undefined) warnings.push(`${i.address} did not answer: ${i.error}`);
    else if (fix !== undefined) warnings.push(i.refusal === undefined ? `${i.address} (${i.state}) ${fix}` : `${i.address} is a standby that will not take over: it ${fix}`);
    else if (i.refusal !== undefined) warnings.push(`${i.address} is a standby that will not take over: ${i.refusal}`);
  }
  if (actives.length > 1) warnings.push(`${actives.length} instances say they are active: ${actives.map((i) => i.address).join(", ")}`);
  if (mismatch.all !== null) warnings.push(mismatch.all);
  // The generation is said where there are shards (a server without them runs generation 0 of no map).
  const sharded = [...views.values()].some((v) => v.name !== null || v.generation !== 0);
  const parts = list.map((i) => {
    const about = [...(i.epoch === undefined ? [] : [`epoch ${i.epoch}`]), ...(sharded && i.generation !== undefined ? [`generation ${i.generation}`] : [])];
    return `${i.address} ${i.state}${about.length === 0 ? "" : ` (${about.join(", ")})`}${i.refusal === undefined ? "" : " (will not take over)"}`;
  });
  return { list, text: `instances: ${parts.join("; ")}\n`, warnings, mapErrors };
}

/** Whether two servers run the same shard of the same map (the shard list in any order). */
function sameMap(a: ShardView, b: ShardView): boolean {
  return a.name === b.name && a.generation === b.generation && [...a.shards].sort().join(",") === [...b.shards].sort().join(",");
}

function describeView(view: ShardView): string {
  return view.name === null ? `no shards (generation ${view.generation})` : `shard ${view.name} of ${describeShards(view.shards, view.generation)}`;
}

/**
 * When the instances of one list (one shard's active and standbys) do not
 * run one map: `each`, per instance that differs from the active, what it
 * runs and the flags that would make it the active's ("runs ..., but the
 * active ... runs ...: restart ... with ..."); without one active, `all`
 * lists every instance's map. `inMap`: the list is a shard's in a map
 * given to status (an instance of another shard there is the map's
 * mistake, said elsewhere).
 */
function mapMismatch(
  list: readonly Instance[],
  maps: ReadonlyMap<string, ShardView>,
  active: string | null,
  inMap: boolean,
): { each: Map<string, string>; all: string | null } {
  const each = new Map<string, string>();
  const reference = active === null ? undefined : maps.get(active);
  if (reference === undefined) {
    const views = [...maps.values()];
    if (views.every((v) => sameMap(v, views[0]!))) return { each, all: null };
    const all = list.filter((i) => maps.has(i.address)).map((i) => `${i.address} (${i.state}) runs ${describeView(maps.get(i.address)!)}`);
    return { each, all: `the instances do not run one map: ${all.join("; ")}: start every instance of a service with the same --shard, --shards and --shards-generation` };
  }
  for (const i of list) {
    const view = maps.get(i.address);
    if (i.address === active || view === undefined || sameMap(view, reference)) continue;
    const flags = [
      ...(view.name === reference.name ? [] : [reference.name === null ? "without --shard" : `--shard ${reference.name}`]),
      ...([...view.shards].sort().join(",") === [...reference.shards].sort().join(",") ? [] : [reference.shards.length === 0 ? "without --shards" : `--shards ${reference.shards.join(",")}`]),
      ...(view.generation === reference.generation ? [] : [`--shards-generation ${reference.generation}`]),
    ];
    // Another shard's name: a wrong --shard, or another shard's instance (in a plain list; in a map, one in the active's service).
    const other = view.name === null || view.name === reference.name
      ? ""
      : inMap
        ? ` (or, if it is shard ${view.name}'s instance, with shard ${view.name}'s --service)`
        : ` (or, if it is another shard's instance, drop it from --ops)`;
    const fix = `restart ${i.address} with ${flags.join(" ")}${other}`;
    // A higher generation than the active's is how a map change rolls: the standbys take it first.
    const rolling = view.generation > reference.generation ? `a map change half done (finish it: stop the active cleanly and a standby with the new map takes over), or ${fix}` : fix;
    each.set(i.address, `runs ${describeView(view)}, but the active ${active} runs ${describeView(reference)}: ${rolling}`);
  }
  return { each, all: null };
}

/** What the map says of the ops servers of one entry: `shard` null for a plain list. */
interface Expected {
  readonly shard: string | null;
  readonly shards: readonly string[];
  /** The map's gen= (0 when it has none). */
  readonly generation: number;
}

function buffer(): { text: string; write(text: string): void } {
  return { text: "", write(text: string) { this.text += text; } };
}

/**
 * The server's `shard` field, checked against what the map says of the
 * address that answered; throws CliError WRONG_SHARD on a mismatch. Null
 * when the answer carries none (an error the caller reports anyway).
 */
export function checkShard(answer: OpsAnswer, address: Address, expect: Expected, name: string | undefined): ShardView | null {
  const body = answer.body as { shard?: unknown } | null;
  const view = body !== null && typeof body === "object" ? parseShardView(body.shard) : null;
  const at = `the ops server at ${formatAddress(address)}`;
  if (view === undefined) {
    if (expect.shard === null) return null;
    throw new CliError(`${at}: --ops says it is shard ${expect.shard}, but the server does not say which shard it is (a lockd older than the shard field of the ops API?): cannot trust its answer`, ExitCode.WRONG_SHARD);
  }
  if (view === null) return null;
  const serverSays = view.name === null ? "a server without shards (started without --shard)" : `shard ${view.name} of ${describeShards(view.shards, view.generation)}`;
  if (expect.shard === null) {
    // A plain list: fine for a plain server; a shard answers only for its own names.
    if (view.name === null || name === undefined) return view;
    const owner = view.shards.length < 2 ? view.name : new Placement(view.shards).shardOf(name);
    if (owner === view.name) return view;
    throw new CliError(
      `${at} is ${serverSays}, and ${JSON.stringify(name)} belongs to shard ${owner}: --ops is a plain list; give the map of every shard's ops servers (--ops "${view.shards.map((s) => `${s}=HOST:PORT`).join(";")}")`,
      ExitCode.WRONG_SHARD,
    );
  }
  const mapSays = `--ops says it is shard ${expect.shard} of ${expect.shards.join(",")}`;
  const sameShards = view.shards.length === expect.shards.length && [...view.shards].sort().join(",") === [...expect.shards].sort().join(",");
  if (view.name !== expect.shard || !sameShards) {
    throw new CliError(`${at}: ${mapSays}, but the server is ${serverSays}: fix the map (--ops, LOCKD_OPS)`, ExitCode.WRONG_SHARD);
  }
  return view;
}

/** The `shard` field of an ops answer: undefined when absent, null when the answer is not a lock view at all. */
function parseShardView(value: unknown): ShardView | null | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== "object") return undefined;
  const v = value as { name?: unknown; shards?: unknown; generation?: unknown };
  if ((v.name !== null && typeof v.name !== "string") || !Array.isArray(v.shards) || typeof v.generation !== "number") return undefined;
  return { name: v.name, shards: v.shards.map(String), generation: v.generation };
}

/**
 * A warning when the shards' servers disagree on the generation, or
 * agree on one other than the map's gen= (when it has one); else null.
 */
export function generationProblem(generations: ReadonlyMap<string, number>, mapGeneration: number): string | null {
  const distinct = new Set(generations.values());
  if (distinct.size > 1) {
    const each = [...generations].map(([shard, gen]) => `${shard} ${gen}`).join(", ");
    return `the shards' servers disagree on the map's generation (${each}): a map change is half done, or a server runs an old map`;
  }
  if (distinct.size === 1 && mapGeneration !== 0 && !distinct.has(mapGeneration)) {
    return `--ops says gen=${mapGeneration} but the servers run generation ${[...distinct][0]}: the map given is not the servers' map`;
  }
  return null;
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
    if (view === null) {
      // A lone standby: its role, and no locks (it serves none).
      const role = await roleOf(get);
      out.write(json ? `${JSON.stringify({ ...label, ...role, locks: null }, null, 2)}\n` : roleText(role));
      return ExitCode.OK;
    }
    const delay = await lockDelayOf(get);
    if (json) {
      out.write(`${JSON.stringify({ ...label, ...view, ...delay }, null, 2)}\n`);
      return ExitCode.OK;
    }
    const s = view.sessions;
    out.write(roleText(await roleOf(get)));
    out.write(lockDelayText(delay.lockDelay));
    out.write(`${view.total} lock${view.total === 1 ? "" : "s"}; sessions: ${s.owner} holding, ${s.waiting} waiting, ${s.connected} connecting\n`);
    if (view.locks.length > 0) out.write(table(view.locks));
    if (view.next !== null) {
      out.write(`(showing the first ${view.locks.length} of ${view.total} locks, in name order; ask for one with lockd status NAME)\n`);
    }
    return ExitCode.OK;
  }
  const answer = await get(`/v1/locks?${lockQuery(name)}`);
  if (answer.status !== 404) {
    expectOk(answer);
    await moreHolders(get, name, answer.body as LockView & { holdersNext?: string | null });
  }
  // A free NAME may still be held back by the delay: the line comes first.
  const delay = await lockDelayOf(get);
  if (!json) out.write(lockDelayText(delay.lockDelay));
  if (answer.status === 404) {
    out.write(json ? `${JSON.stringify({ ...label, name, holder: null, waiters: [], ...delay }, null, 2)}\n` : `${name}: free (no holder, no waiters)\n`);
    return ExitCode.OK;
  }
  out.write(json ? `${JSON.stringify({ ...label, ...(answer.body as object), ...delay }, null, 2)}\n` : table([answer.body as LockView]));
  return ExitCode.OK;
}

/**
 * The rest of one lock's holders (a semaphore's or shared lock's may be
 * many), following `holdersNext` for at most STATUS_MAX_PAGES pages in
 * all, appended to `view` (its `holdersNext` then is the last page's).
 */
async function moreHolders(get: (path: string) => Promise<OpsAnswer>, name: string, view: LockView & { holdersNext?: string | null }): Promise<void> {
  if (!Array.isArray(view.holders)) return; // a lockd before semaphores: its one holder
  const holders = view.holders as HolderView[];
  for (let n = 1; n < STATUS_MAX_PAGES && typeof view.holdersNext === "string"; n++) {
    const answer = await get(`/v1/locks?${lockQuery(name)}&limit=1&holdersCursor=${encodeURIComponent(view.holdersNext)}`);
    // The lock has gone meanwhile: what was read stands.
    if (answer.status === 404) break;
    expectOk(answer);
    const page = answer.body as LockView & { holdersNext?: string | null };
    holders.push(...page.holders);
    (view as { holdersNext?: string | null }).holdersNext = page.holdersNext ?? null;
  }
}

/** The lock-delay of /readyz as status shows it: a DelayView's fields, as far as it says them. */
export interface LockDelayOf {
  readonly why?: unknown;
  readonly remainingMs: number;
  readonly names?: unknown;
  readonly everyName?: unknown;
  /** The reclaim grace (GraceView), while one runs. */
  readonly reclaim?: unknown;
}

/**
 * The serving instance's lock-delay, from its /readyz (asked once per run
 * and address): `{ lockDelay: view }` or `{ lockDelay: null }` (none runs),
 * `{}` when the server says nothing of one (a lockd before the lock-delay),
 * or /readyz did not answer (the line is an extra: the listing stands).
 */
async function lockDelayOf(get: (path: string) => Promise<OpsAnswer>): Promise<{ lockDelay?: LockDelayOf | null }> {
  let ready: OpsAnswer;
  try {
    ready = await get("/readyz");
  } catch (error) {
    if (error instanceof CliError) return {};
    throw error;
  }
  const body = ready.body as { lockDelay?: unknown } | null;
  if (body === null || typeof body !== "object" || body.lockDelay === undefined) return {};
  const value = body.lockDelay as { remainingMs?: unknown } | null;
  if (value === null || typeof value !== "object" || typeof value.remainingMs !== "number" || !Number.isFinite(value.remainingMs)) return { lockDelay: null };
  return { lockDelay: value as LockDelayOf };
}

/** A lock-delay's time left: tenths of a second, rounded up (never "0.0 s" while some is left); minutes past one. */
export function delayLeft(ms: number): string {
  if (ms <= 0) return "0.0 s";
  if (ms < 60_000) return `${(Math.ceil(ms / 100) / 10).toFixed(1)} s`;
  const s = Math.ceil(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** After what a delay of every name runs, and whose holders it waits for, by `why` (the operator's page says the same). */
const DELAY_EVERY: Readonly<Record<string, string>> = {
  takeover: "after a takeover: an earlier active's holders may still believe they hold",
  released: "after a takeover from a clean stop: an earlier active's holders may still believe they hold",
  restart: "after a restart from a stop that was not clean: holders from before it may still believe they hold",
  "clean-restart": "after a restart from a clean stop: holders from before it may still believe they hold",
};

/** Where the names held back one by one were published, by `why`. */
const DELAY_STOP: Readonly<Record<string, string>> = {
  released: "the earlier active's clean stop",
  "clean-restart": "the last clean stop",
};

/**
 * The `lock-delay:` line of a /readyz lockDelay ("" for none): "lock-delay:
 * 12.3 s left, every name (after a takeover: an earlier active's holders
 * may still believe they hold)", or for the names a clean stop published
 * only, "lock-delay: 4.1 s left, 3 names held at the last clean stop (their
 * holders may still believe they hold them; every other name is granted)". The
 * time is the longest wait left: when the delay is over. A reclaim grace
 * adds its own line (reclaimText).
 */
export function lockDelayText(delay: LockDelayOf | null | undefined): string {
  if (delay === null || delay === undefined) return "";
  const left = delayLeft(delay.remainingMs);
  const why = typeof delay.why === "string" ? delay.why : "";
  const names = typeof delay.names === "number" ? delay.names : 0;
  if (delay.everyName === false && names > 0) {
    const stop = Object.hasOwn(DELAY_STOP, why) ? DELAY_STOP[why] : "the last clean stop";
    const which = names === 1 ? `1 name held at ${stop} (its holder may still believe it holds it` : `${names} names held at ${stop} (their holders may still believe they hold them`;
    return `lock-delay: ${left} left, ${which}; every other name is granted)\n${reclaimText(delay.reclaim)}`;
  }
  const about = Object.hasOwn(DELAY_EVERY, why) ? DELAY_EVERY[why] : "an earlier server's holders may still believe they hold";
  return `lock-delay: ${left} left, every name (${about})\n${reclaimText(delay.reclaim)}`;
}

/**
 * The `reclaim grace:` line of a lock-delay's `reclaim` ("" for none):
 * "reclaim grace: 6.2 s left, reclaimed 1 of 3 published grants; 2 not
 * yet, on "jobs/a", "jobs/b"". At most the names the server lists, then
 * "and N more names".
 */
export function reclaimText(grace: unknown): string {
  if (grace === null || typeof grace !== "object") return "";
  const g = grace as Record<string, unknown>;
  const { remainingMs, published, reclaimed } = g;
  if (typeof remainingMs !== "number" || typeof published !== "number" || typeof reclaimed !== "number") return "";
  const head = `reclaim grace: ${delayLeft(remainingMs)} left, reclaimed ${reclaimed} of ${published} published grant${published === 1 ? "" : "s"}`;
  const names = Array.isArray(g.unclaimedNames) ? g.unclaimedNames.filter((n): n is string => typeof n === "string") : [];
  if (published - reclaimed <= 0 || names.length === 0) return `${head}\n`;
  const total = typeof g.unclaimedNameCount === "number" ? g.unclaimedNameCount : names.length;
  const more = total > names.length ? `, and ${total - names.length} more name${total - names.length === 1 ? "" : "s"}` : "";
  return `${head}; ${published - reclaimed} not yet, on ${names.map((n) => JSON.stringify(n)).join(", ")}${more}\n`;
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
): Promise<LocksView | null> {
  const limit = options.pageSize === undefined ? "" : `limit=${options.pageSize}&`;
  const locks: LockView[] = [];
  let page: LocksView | null = null;
  for (let n = 0; n < (options.maxPages ?? STATUS_MAX_PAGES) && (page === null || page.next !== null); n++) {
    const answer = await get(`/v1/locks?${limit}${page === null ? "" : `cursor=${encodeURIComponent(page.next!)}`}`);
    if (isNotActive(answer)) return null; // a standby (or an active that stepped down mid-listing): it serves no locks
    expectOk(answer);
    page = answer.body as LocksView;
    locks.push(...page.locks);
  }
  return { ...page!, locks };
}

export interface RoleOf {
  readonly role?: string;
  readonly epoch?: number;
  /** The active's instance id as the instance asked last saw it; null: none (released), absent: an older lockd. */
  readonly active?: string | null;
  /** The active's ops address (HOST:PORT) as it advertises it; null or absent: not known (or an older lockd). */
  readonly activeOps?: string | null;
  readonly service?: string;
  readonly refusal?: string;
  /** The coordinator server the instance uses and its replication report (null: not connected yet; absent: an older lockd). */
  readonly coordinator?: CoordinatorServer | null;
}

/** With --coordinator: the role, epoch, active and service /readyz names; {} without. */
async function roleOf(get: (path: string) => Promise<OpsAnswer>): Promise<RoleOf> {
  const ready = await get("/readyz");
  const body = ready.body as RoleOf | null;
  if (body === null || typeof body !== "object" || body.role === undefined) return {};
  return {
    role: body.role,
    epoch: body.epoch,
    ...(typeof body.active === "string" || body.active === null ? { active: body.active } : {}),
    ...(typeof body.activeOps === "string" ? { activeOps: body.activeOps } : {}),
    service: body.service,
    ...(typeof body.refusal === "string" ? { refusal: body.refusal } : {}),
    ...(isCoordinatorServer(body.coordinator) || body.coordinator === null ? { coordinator: body.coordinator } : {}),
  };
}

function isCoordinatorServer(value: unknown): value is CoordinatorServer {
  const v = value as CoordinatorServer | null | undefined;
  return typeof v === "object" && v !== null && typeof v.server === "string" && typeof v.replication === "object" && v.replication !== null && typeof v.replication.mode === "string";
}

/** "coordinator 10.0.0.5:5432, replication synchronous (...)": the second line of the role (nothing from an older lockd). */
function coordinatorText(body: RoleOf): string {
  if (body.coordinator === undefined) return "";
  if (body.coordinator === null) return "coordinator: not connected yet\n";
  return `coordinator ${body.coordinator.server}, replication ${describeReplication(body.coordinator.replication)}\n`;
}

/**
 * "service S: active, epoch N"; a standby's line names the active it sees,
 * and its ops address when /readyz gives it ("service S: standby, epoch N,
 * active ID at HOST:PORT (a standby serves no locks: ask the active)");
 * nothing without --coordinator.
 */
export function roleText(body: RoleOf): string {
  if (body.role === undefined) return "";
  // An older lockd's /readyz names no active: say nothing about it.
  const active = body.role === "active" || body.active === undefined
    ? ""
    : body.active === null
      ? ", no active (the row is released or absent)"
      : `, active ${body.active}${typeof body.activeOps === "string" ? ` at ${body.activeOps}` : ""}`;
  const note = typeof body.refusal === "string"
    ? ` (a standby serves no locks, and refuses to take over: ${body.refusal})`
    : body.role === "standby" ? ` (a standby serves no locks${body.active === null ? "" : ": ask the active"})` : "";
  return `service ${body.service}: ${body.role}, epoch ${body.epoch}${active}${note}\n${coordinatorText(body)}`;
}


const HEADER = ["LOCK", "ROLE", "MODE", "SLOT", "SESSION", "OWNER", "REMOTE", "TOKEN", "FOR", "LEASE", "SILENT"];

/** A session's claim as the MODE column shows it: exclusive, shared, or a semaphore's "limit N". */
function claimMode(shared: boolean | undefined, limit: number): string {
  return shared === true ? "shared" : limit > 1 ? `limit ${limit}` : "exclusive";
}

function row(lock: string, role: string, mode: string, slot: string, s: HolderView | WaiterView, token: string, forMs: number): string[] {
  return [lock, role, mode, slot, String(s.session), s.owner === "" ? "-" : s.owner, s.remote || "-", token, humanMs(forMs), humanMs(s.leaseMs), humanMs(s.silentForMs)];
}

/** A lock view's holders, as a lockd before semaphores gives them too (its `holder` alone). */
function holdersOf(lock: LockView): readonly HolderView[] {
  return Array.isArray(lock.holders) ? lock.holders : lock.holder === null ? [] : [lock.holder];
}

const blank = (text: string): string[] => ["", text, ...HEADER.slice(2).map(() => "")];

/**
 * A plain aligned table, per lock: every holder (oldest first; a
 * semaphore's with its slot), then the waiters in queue order; MODE is each
 * session's claim (exclusive, shared, or limit N of a semaphore).
 */
export function table(locks: readonly LockView[]): string {
  const rows: string[][] = [HEADER];
  for (const lock of locks) {
    let label = lock.name;
    const limit = typeof lock.limit === "number" ? lock.limit : 1;
    const holders = holdersOf(lock);
    if (holders.length === 0) rows.push([label, "(free)", ...HEADER.slice(2).map(() => "")]);
    for (const h of holders) {
      const slot = typeof h.slot === "number" ? String(h.slot) : "-";
      rows.push(row(label, "holder", claimMode(h.shared, limit), slot, h, h.token, h.heldForMs));
      label = "";
    }
    const holding = typeof lock.holding === "number" ? lock.holding : holders.length;
    if (holding > holders.length) rows.push(blank(`(+${holding - holders.length} more holding)`));
    label = "";
    for (const w of lock.waiters) rows.push(row(label, `waiter ${w.position}`, claimMode(w.shared, typeof w.limit === "number" ? w.limit : limit), "-", w, "-", w.waitingForMs));
    const more = lock.waiting - lock.waiters.length;
    if (more > 0) rows.push(blank(`(+${more} more waiting)`));
  }
  const widths = HEADER.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ").trimEnd()).join("\n") + "\n";
}
