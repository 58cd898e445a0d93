/**
 * The shard map an instance serves, carried in the coordinator row's
 * `holder` column (no schema change): `holder` is the instance id, then,
 * for an instance started with a shard map or a generation, a space and a
 * tag naming the map:
 *
 *     db1/pid-4242/9f3a01bc shard=alpha gen=3 map=5f1e22c0 ops=10.0.0.5:7701
 *     (released) shard=alpha gen=3 map=5f1e22c0      (after a clean stop)
 *
 * `map` is the first 8 hex digits of SHA-256 over the sorted shard names
 * joined by ","; `shard` and `map` are absent without `--shard`, and an
 * instance without shards at generation 0 writes no tag at all (its
 * holder, and the released "", are what they were before shards). A
 * holder without a tag names no map: no shards at generation 0, or a lockd
 * from before this check, which may have served any map. It is never
 * refused (an upgrade must not lock a service out), only warned about.
 *
 * An active also writes `ops=HOST:PORT`, the address of its ops server
 * (advertisedOps), when it has one to give: standbys show it so an operator
 * knows where the active's /readyz and /ui are. It is display only (no
 * decision reads it), and a holder without it (an older lockd, or an
 * instance whose ops server binds a wildcard address without
 * --advertise-ops) just names no address. A released row names none.
 *
 * A standby reads the map its service's active served (or the one that
 * released the row) and refuses to take over when taking over would break
 * what the map guarantees (`takeoverRefusal`). Pure: no I/O, no clock.
 */
import { formatAddress, isWildcardHost, parseAddress, unbracket } from "../net/address.ts";
import type { ShardIdentity } from "../shard/identity.ts";

/** The holder of a row released by a clean stop starts with this (or is ""). */
export const RELEASED = "(released)";

/** The map as it appears in a holder. */
export interface HolderMap {
  readonly generation: number;
  /** The shard served; null without --shard. */
  readonly shard: string | null;
  /** 8 hex digits naming the shard list; null without --shard. */
  readonly map: string | null;
  /**
   * The shard list itself, sorted: known only for this instance's own map
   * (ownMapOf), so messages can name it; a holder carries only `map`.
   */
  readonly shards?: readonly string[];
}

/** The 8 hex digits that name a list of shards (order does not matter). Bun's SHA-256: node:crypto costs a server start about 2.5 ms to load. */
export function mapId(shards: readonly string[]): string {
  return new Bun.CryptoHasher("sha256").update([...shards].sort().join(",")).digest("hex").slice(0, 8);
}

export function holderMapOf(settings: ShardIdentity): HolderMap {
  return settings.shard === null
    ? { generation: settings.generation, shard: null, map: null }
    : { generation: settings.generation, shard: settings.shard, map: mapId(settings.shards) };
}

/** This instance's own map: holderMapOf with the shard list, so refusals can name the shards it serves. */
export function ownMapOf(settings: ShardIdentity): HolderMap {
  const map = holderMapOf(settings);
  return map.shard === null ? map : { ...map, shards: [...settings.shards].sort() };
}

/** The instance id in a holder (the map tag cut off); null when the row is released (no active). */
export function holderInstance(holder: string): string | null {
  if (isReleased(holder)) return null;
  const space = holder.indexOf(" ");
  return space < 0 ? holder : holder.slice(0, space);
}

/** The map part of the tag written after the instance id; "" for no shards at generation 0. */
export function mapTag(map: HolderMap): string {
  if (map.shard === null && map.generation === 0) return "";
  return map.shard === null ? `gen=${map.generation}` : `shard=${map.shard} gen=${map.generation} map=${map.map}`;
}

/** The longest `ops=` address a holder carries (the instance id keeps room beside the map; config checks --advertise-ops against it). */
export const MAX_ADVERTISED_OPS = 100;

/**
 * The holder an instance writes when active: the instance id, the map tag,
 * and `ops=HOST:PORT` when `ops` is given (its ops server's address, as
 * advertisedOps gives it).
 */
export function activeHolder(instance: string, map: HolderMap, ops: string | null = null): string {
  const mapPart = mapTag(map);
  const opsPart = ops === null || ops === "" || ops.length > MAX_ADVERTISED_OPS || /\s/.test(ops) ? "" : `ops=${ops}`;
  const tag = mapPart === "" ? opsPart : opsPart === "" ? mapPart : `${mapPart} ${opsPart}`;
  // The column holds 255 characters: the instance id gives way, never the tag.
  return tag === "" ? instance : `${instance.slice(0, 254 - tag.length)} ${tag}`;
}

/**
 * The ops address an active advertises in its holder: `explicit`
 * (--advertise-ops) when set; else the ops server's bound address, unless
 * it is a wildcard (0.0.0.0, ::), which names no host another machine can
 * reach; else null (no `ops=`).
 */
export function advertisedOps(explicit: string | null, bound: { readonly host: string; readonly port: number }): string | null {
  if (explicit !== null) return explicit;
  if (isWildcardHost(bound.host)) return null;
  return formatAddress({ host: unbracket(bound.host), port: bound.port });
}

/** Whether `value` is an address an ops address may be: HOST:PORT by the one grammar (src/net/address.ts), with a host. */
function isOpsValue(value: string): boolean {
  if (value.startsWith(":")) return false;
  try {
    parseAddress(value);
    return true;
  } catch {
    return false;
  }
}

/**
 * The ops address a holder advertises (`ops=HOST:PORT`), or null: a
 * released row, a holder without one (an older lockd, a wildcard bind
 * without --advertise-ops), or a value that is not HOST:PORT.
 */
export function parseHolderOps(holder: string): string | null {
  if (isReleased(holder)) return null;
  const parts = holder.split(" ");
  for (let i = 1; i < parts.length; i++) {
    const part = parts[i]!;
    if (!part.startsWith("ops=")) continue;
    const value = part.slice(4);
    return value.length <= MAX_ADVERTISED_OPS && isOpsValue(value) ? value : null;
  }
  return null;
}

/** The holder a clean stop writes: "" without a tag (as before shards), else "(released) TAG". */
export function releasedHolder(map: HolderMap): string {
  const tag = mapTag(map);
  return tag === "" ? "" : `${RELEASED} ${tag}`;
}

/** The row was released by a clean stop (a standby takes it at once). */
export function isReleased(holder: string): boolean {
  return holder === "" || holder === RELEASED || holder.startsWith(`${RELEASED} `);
}

/** The map a holder names; null when it names none (no tag). */
export function parseHolderMap(holder: string): HolderMap | null {
  let tagged = false;
  let generation = 0;
  let shard: string | null = null;
  let map: string | null = null;
  const parts = holder.split(" ");
  for (let i = 1; i < parts.length; i++) {
    const part = parts[i]!;
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    const key = part.slice(0, eq);
    const value = part.slice(eq + 1);
    if (key === "gen" && /^\d{1,2}$/.test(value)) {
      generation = Number(value);
      tagged = true;
    } else if (key === "shard" && value !== "") shard = value;
    else if (key === "map" && value !== "") map = value;
  }
  return tagged ? { generation, shard, map } : null;
}

/** Shard names a description lists at most (a message stays one readable line). */
const LISTED_SHARDS = 16;

/**
 * The map for people: "shard alpha of map 5f1e22c0, generation 3", "no
 * shards, generation 0"; with the shard list known (this instance's own
 * map, ownMapOf): "shard alpha of alpha,beta (map 5f1e22c0, generation 3)".
 */
export function describeHolderMap(map: HolderMap | null): string {
  if (map === null) return "a map it does not name (no shards at generation 0, or a lockd from before the map check)";
  if (map.shard === null) return `no shards, generation ${map.generation}`;
  if (map.shards === undefined) return `shard ${map.shard} of map ${map.map}, generation ${map.generation}`;
  const listed = map.shards.length <= LISTED_SHARDS ? map.shards.join(",") : `${map.shards.slice(0, LISTED_SHARDS).join(",")},... (${map.shards.length} shards)`;
  return `shard ${map.shard} of ${listed} (map ${map.map}, generation ${map.generation})`;
}

/**
 * The map a row's holder names, for a standby's log line: as
 * describeHolderMap, except that a holder naming no map, read by an
 * instance that has none either (no shards at generation 0: a plain
 * service), is "none": nothing differs, nothing to warn about. The careful
 * wording stays for an instance that has a map.
 */
export function describeRowMap(mine: HolderMap, holder: string): string {
  const row = parseHolderMap(holder);
  return row === null && mapTag(mine) === "" ? "none" : describeHolderMap(row);
}

/**
 * How refusals name the settings an operator changes. The CLI gives its
 * flags (`--shard`, ...); without them, plain words.
 */
export interface ShardWords {
  readonly service: string;
  readonly shard: string;
  readonly shards: string;
  readonly shardsGeneration: string;
}

export const PLAIN_SHARD_WORDS: ShardWords = { service: "the service name", shard: "the shard name", shards: "the shard list", shardsGeneration: "the shards generation" };

/** What makes a takeover refused (refusalOf), in the order it is decided. */
type RefusalKind = "shard" | "generation" | "list" | "map";

/**
 * Whether an instance serving `mine` must not take over a row whose holder
 * is `holder`, and why; null: it may. Taking over is refused when
 *
 * - the row served another shard than this instance's, whatever the
 *   generations: the wrong --service or --shard ("shard");
 * - the row's generation is higher than this instance's: its tokens would
 *   be below tokens the service already issued (protocol.md 12.3)
 *   ("generation");
 * - the generations are equal but the maps differ: another shard list
 *   ("list"), or shards on one side only ("map"): one generation with two
 *   maps, under which a name could be granted by two shards.
 *
 * A higher generation than the row's is a map change in progress: allowed.
 * A holder that names no map is never refused (takeoverChangesMap warns).
 */
function refusalOf(mine: HolderMap, holder: string, w: ShardWords): { readonly kind: RefusalKind; readonly reason: string } | null {
  const row = parseHolderMap(holder);
  if (row === null) return null;
  // What differs, side by side: this instance's map (with its shard list) first, then the active's (a holder carries only the hash).
  const both = `this instance serves ${describeHolderMap(mine)}; the service's active served ${describeHolderMap(row)}`;
  if (row.shard !== null && mine.shard !== null && row.shard !== mine.shard) {
    return { kind: "shard", reason: `${both}: a shard's service must not be taken over by another shard (check ${w.service} and ${w.shard})` };
  }
  if (row.generation > mine.generation) {
    // An instance without shards needs every shard flag, not only the generation (the holder names the shard, not the list).
    const flags =
      mine.shard === null && row.shard !== null
        ? `${w.shard} ${row.shard}, that generation's ${w.shards} list and ${w.shardsGeneration} ${row.generation} or higher`
        : `${w.shardsGeneration} ${row.generation} or higher, and that generation's map`;
    return { kind: "generation", reason: `${both}: this instance's tokens would be below tokens already issued (start it with ${flags})` };
  }
  if (row.generation === mine.generation && (row.shard !== mine.shard || row.map !== mine.map)) {
    return {
      kind: row.shard !== null && mine.shard !== null ? "list" : "map",
      reason: `${both}: one generation with two maps (give every instance of the service the same ${w.shards} and ${w.shardsGeneration}; a new map needs a higher generation)`,
    };
  }
  return null;
}

/** Why taking over the row `holder` is refused to an instance serving `mine` (refusalOf); null: it may. */
export function takeoverRefusal(mine: HolderMap, holder: string, words: ShardWords = PLAIN_SHARD_WORDS): string | null {
  return refusalOf(mine, holder, words)?.reason ?? null;
}

const HEADLINES: Record<RefusalKind, string> = {
  shard: "this instance's shard differs from the one its service's active served",
  generation: "this instance's shards generation is lower than its service's active's",
  list: "this instance's shard list differs from the one its service's active served",
  map: "this instance's shard map differs from the one its service's active served",
};

/**
 * The headline of a refusal to take over (the log line's message after
 * "standby: refusing to take over: "), naming what differs as refusalOf
 * decides it; the reason says it in detail.
 */
export function refusalHeadline(mine: HolderMap, holder: string): string {
  return HEADLINES[refusalOf(mine, holder, PLAIN_SHARD_WORDS)?.kind ?? "map"];
}

/**
 * A standby that may take over a row whose map differs from its own (this
 * instance has a higher generation: a map change in progress, or a
 * generation raised by mistake), or names none while this instance has
 * one: what it will change when it does; null when the maps are the same
 * or the takeover is refused anyway.
 */
export function takeoverChangesMap(mine: HolderMap, holder: string): string | null {
  const row = parseHolderMap(holder);
  if (row === null ? mapTag(mine) === "" : row.generation === mine.generation && row.shard === mine.shard && row.map === mine.map) return null;
  if (takeoverRefusal(mine, holder) !== null) return null;
  return `this instance serves ${describeHolderMap(mine)}; the service's active served ${describeHolderMap(row)}; this instance will serve its own map when it takes over (right during a map change rolled in order; otherwise restart it with its service's flags)`;
}
