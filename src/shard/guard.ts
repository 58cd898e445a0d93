/**
 * The server's side of sharding (`lockd serve --shard NAME --shards LIST
 * --shards-generation N`): the guard that refuses an ACQUIRE for a name
 * that belongs to another shard (ERROR WRONG_SHARD, docs/protocol.md
 * section 12.2), and the generation tokens are issued in. Pure: the
 * engine calls the guard once per ACQUIRE (never per heartbeat).
 */
import { AddressError } from "../net/address.ts";
import { parseGeneration, parseServerMap } from "./map.ts";
import { encodeError } from "../protocol/frames.ts";
import { ErrorCode } from "../protocol/constants.ts";
import { describeShards, Placement } from "./placement.ts";

/** What `lockd serve` was told about the map. */
export interface ShardSettings {
  /** This server's shard; null when the server is not one shard of several. */
  readonly shard: string | null;
  /** Every shard's name (empty when `shard` is null). */
  readonly shards: readonly string[];
  /** The map's generation: the high bits of every token (src/shard/tokens.ts). */
  readonly generation: number;
}

export const NO_SHARDS: ShardSettings = { shard: null, shards: [], generation: 0 };

/**
 * The guard for `settings.shard`: null when every name is ours (no shard,
 * or a map of one), else a function that returns the WRONG_SHARD frame for
 * a name another shard owns, and null for ours.
 */
export function shardGuard(settings: ShardSettings): ((name: string) => Uint8Array | null) | null {
  if (settings.shard === null || settings.shards.length < 2) return null;
  const placement = new Placement(settings.shards);
  const self = settings.shard;
  const map = describeShards(settings.shards, settings.generation);
  return (name) => {
    const owner = placement.shardOf(name);
    if (owner === self) return null;
    return encodeError(
      ErrorCode.WRONG_SHARD,
      `this server is shard ${self} of ${map}, where this lock belongs to shard ${owner}: the client's server map differs from the servers'; fix the map (LOCKD_SERVER) and claim again`,
    );
  };
}

/**
 * The settings from `--shard`, `--shards` and `--shards-generation`. `shards`
 * is a list of names (`alpha,beta`) or a whole server map (the string the
 * clients use; its generation counts, and must agree with `generation` when
 * both are given). Throws AddressError with a message naming the flag.
 */
export function shardSettings(shard: string | undefined, shards: string | undefined, generation: number | undefined): ShardSettings {
  let gen = generation === undefined ? undefined : parseFlag("--shards-generation", () => parseGeneration(String(generation)));
  if (shard === undefined && shards === undefined) return { shard: null, shards: [], generation: gen ?? 0 };
  if (shard === undefined) throw new AddressError("--shards needs --shard NAME (which of them this server is)", shards!);
  if (shards === undefined) throw new AddressError("--shard needs --shards (every shard's name, e.g. alpha,beta)", shard);
  let names: string[];
  if (shards.includes("=")) {
    const map = parseFlag("--shards", () => parseServerMap(shards));
    if (gen !== undefined && map.generation !== gen) {
      throw new AddressError(`--shards says generation ${map.generation} and --shards-generation says ${gen}: give one`, shards);
    }
    gen = map.generation;
    names = map.shards.map((s) => s.name);
  } else {
    names = shards.split(",").map((name) => name.trim());
  }
  const placement = parseFlag("--shards", () => new Placement(names));
  if (!placement.shards.includes(shard.trim())) {
    throw new AddressError(`--shard ${JSON.stringify(shard)} is not one of --shards ${placement.shards.join(",")}`, shard);
  }
  return { shard: shard.trim(), shards: placement.shards, generation: gen ?? 0 };
}

function parseFlag<T>(flag: string, parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    if (!(error instanceof AddressError)) throw error;
    throw new AddressError(`${flag}: ${error.message}`, error.element);
  }
}
