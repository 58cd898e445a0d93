/**
 * `lockd serve --shard NAME --shards LIST --shards-generation N`: which shard
 * of which map this server is (src/shard/identity.ts), from its flags.
 */
import { AddressError } from "../net/address.ts";
import type { ShardIdentity } from "../shard/identity.ts";
import { parseGeneration, parseServerMap } from "../shard/map.ts";
import { Placement } from "../shard/placement.ts";

/**
 * The settings from `--shard`, `--shards` and `--shards-generation`. `shards`
 * is a list of names (`alpha,beta`) or a whole server map (the string the
 * clients use; its generation counts, and must agree with `generation` when
 * both are given). Throws AddressError with a message naming the flag.
 */
export function shardSettings(shard: string | undefined, shards: string | undefined, generation: number | undefined): ShardIdentity {
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
