/**
 * The server map (shards, docs/protocol.md section 12): the address lists of
 * src/net/address.ts, named and joined with `;`, with an optional generation
 * first:
 *
 *     map        = [ "gen=" generation ";" ] ( list / shard *( ";" shard ) )
 *     shard      = shard-name "=" list
 *     shard-name = 1 to 63 of a-z 0-9 - _ , starting with a letter or digit; not "gen"
 *     generation = 0..31
 *
 * A plain list is one unnamed shard, so every string that worked before
 * the map existed means what it meant.
 *
 * A map a program holds as a value (one parseServerMap returned) is checked
 * by the same rules with checkServerMap, not formatted and parsed again.
 * Every error names the element that is wrong, as the address parser's do.
 * No Bun API: the client library reads maps on Node.js too.
 */
import { type Address, ADDRESS_EXAMPLE, AddressError, type AddressRules, addressValueProblem, formatAddress, formatAddressList, parseAddressList } from "../net/address.ts";

/** A shard name: 1 to 63 lower-case letters, digits, `-` and `_`, starting with a letter or digit. */
export const SHARD_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;

/** The element that sets the generation (`gen=N`): not a shard name. */
export const GENERATION_KEY = "gen";

/**
 * The highest map generation. Tokens are `generation * 2^48 + counter`
 * (docs/protocol.md section 12.3), and 31 keeps every token below 2^53, so
 * that clients in languages whose numbers are doubles read tokens exactly.
 */
export const MAX_GENERATION = 31;

export const MAP_EXAMPLE = "alpha=10.0.0.1:7700,10.0.0.2:7700;beta=10.0.0.3:7700";

export interface ShardAddresses {
  /** The shard's name; "" for the one shard of a plain list. */
  readonly name: string;
  /** Its servers, tried in order (an active and its standbys). */
  readonly addresses: readonly Address[];
}

export interface ServerMap {
  /** Map generation, 0..MAX_GENERATION; 0 when not given. */
  readonly generation: number;
  /** Named shards in the order given, or one unnamed shard (a plain list). */
  readonly shards: readonly ShardAddresses[];
}

/** Why `name` is not a shard name, or null when it is one. */
export function shardNameProblem(name: string): string | null {
  if (name === "") return "an empty shard name";
  if (name === GENERATION_KEY) return `"${GENERATION_KEY}" is not a shard name (gen=N sets the generation, first)`;
  if (!SHARD_NAME.test(name)) return `shard name ${JSON.stringify(name)} must be 1 to 63 of a-z 0-9 - _, starting with a letter or digit`;
  return null;
}

/** The generation in `gen=N` or `--shards-generation N`; throws AddressError. */
export function parseGeneration(text: string, element = text): number {
  const trimmed = text.trim();
  const n = /^\d{1,5}$/.test(trimmed) ? Number(trimmed) : Number.NaN;
  if (!(n >= 0 && n <= MAX_GENERATION)) {
    throw new AddressError(`generation ${JSON.stringify(trimmed)} is not a whole number in 0..${MAX_GENERATION}`, element);
  }
  return n;
}

/**
 * A server map: `[gen=N;]NAME=LIST;NAME=LIST...`, or a plain address list
 * (one unnamed shard). An array is one string: its items joined with `;`
 * when any item names a shard or holds a `;`, else with `,` (a list of
 * addresses, as before). Throws AddressError naming the part that is wrong.
 */
export function parseServerMap(input: string | readonly string[], rules: AddressRules = {}): ServerMap {
  const whole = typeof input === "string" ? input : input.some((item) => item.includes("=") || item.includes(";")) ? input.join(";") : input.join(",");
  const parts = whole.split(";").map((part) => part.trim());
  while (parts.length > 1 && parts[parts.length - 1] === "") parts.pop(); // a trailing ;
  let generation = 0;
  let first = 0;
  if (parts[0]!.startsWith(`${GENERATION_KEY}=`)) {
    generation = parseGeneration(parts[0]!.slice(GENERATION_KEY.length + 1), parts[0]!);
    first = 1;
    if (parts.length === 1) throw new AddressError(`${JSON.stringify(whole)} has a generation but no servers (example: gen=1;${MAP_EXAMPLE})`, whole);
  }
  const rest = parts.slice(first);
  if (rest.length === 1 && !rest[0]!.includes("=")) {
    return { generation, shards: [{ name: "", addresses: parseAddressList(rest[0]!, rules) }] };
  }
  const shards: ShardAddresses[] = [];
  const owners = new Map<string, string>();
  for (let i = 0; i < rest.length; i++) {
    const part = rest[i]!;
    const where = `shard ${i + 1} of ${JSON.stringify(whole)} (${JSON.stringify(part)})`;
    const eq = part.indexOf("=");
    if (eq < 0) {
      const why = part === "" ? "empty" : parts[0]!.includes("=") || rest.length > 1 ? "has no NAME= (every part of a map is a named shard)" : "has no NAME=";
      throw new AddressError(`${where} ${why} (example: ${MAP_EXAMPLE})`, part);
    }
    const name = part.slice(0, eq).trim();
    if (name === GENERATION_KEY) throw new AddressError(`${where}: gen=N must come first, once`, part);
    const nameProblem = shardNameProblem(name);
    if (nameProblem !== null) throw new AddressError(`${where}: ${nameProblem} (example: ${MAP_EXAMPLE})`, part);
    if (shards.some((shard) => shard.name === name)) throw new AddressError(`${where}: shard ${JSON.stringify(name)} is named twice`, part);
    let addresses: Address[];
    try {
      addresses = parseAddressList(part.slice(eq + 1), rules);
    } catch (error) {
      if (!(error instanceof AddressError)) throw error;
      throw new AddressError(`shard ${JSON.stringify(name)} of the map: ${error.message}`, error.element);
    }
    for (const address of addresses) {
      const key = formatAddress(address);
      const other = owners.get(key);
      if (other !== undefined) throw new AddressError(`${key} is in two shards (${JSON.stringify(other)} and ${JSON.stringify(name)}): a server serves one shard`, key);
      owners.set(key, name);
    }
    shards.push({ name, addresses });
  }
  return { generation, shards };
}

/**
 * A server map given as a value rather than text (one parseServerMap
 * returned, or one a program built): checked against the rules
 * parseServerMap applies to text, and copied, so that changing the object
 * later changes nothing. Throws AddressError naming the part that is wrong.
 */
export function checkServerMap(map: ServerMap, rules: AddressRules = {}): ServerMap {
  const { generation, shards } = (map ?? {}) as Partial<ServerMap>;
  if (typeof generation !== "number" || !Number.isInteger(generation) || generation < 0 || generation > MAX_GENERATION) {
    throw new AddressError(`the map's generation ${String(generation)} is not a whole number in 0..${MAX_GENERATION}`, String(generation));
  }
  if (!Array.isArray(shards) || shards.length === 0) throw new AddressError(`a server map needs at least one shard (example: ${MAP_EXAMPLE})`, "");
  const copies: ShardAddresses[] = [];
  const owners = new Map<string, string>();
  for (let i = 0; i < shards.length; i++) {
    const shard = shards[i] as ShardAddresses;
    const name = shard?.name;
    if (typeof name !== "string") throw new AddressError(`shard ${i + 1} of the map has no name`, "");
    if (name === "" && shards.length > 1) throw new AddressError(`shard ${i + 1} of the map has no name (only a map of one shard, a plain list, may be unnamed)`, name);
    const where = name === "" ? "the map" : `shard ${JSON.stringify(name)} of the map`;
    const nameProblem = name === "" ? null : shardNameProblem(name);
    if (nameProblem !== null) throw new AddressError(`shard ${i + 1} of the map: ${nameProblem} (example: ${MAP_EXAMPLE})`, name);
    if (copies.some((other) => other.name === name)) throw new AddressError(`shard ${JSON.stringify(name)} is named twice`, name);
    if (!Array.isArray(shard.addresses) || shard.addresses.length === 0) throw new AddressError(`${where} has no address (example: ${ADDRESS_EXAMPLE})`, name);
    const addresses: Address[] = [];
    for (let j = 0; j < shard.addresses.length; j++) {
      const address = shard.addresses[j]!;
      const why = addressValueProblem(address, rules);
      if (why !== null) throw new AddressError(`address ${j + 1} of ${where}: ${why}`, JSON.stringify(address));
      const copy = { host: address.host, port: address.port };
      const key = formatAddress(copy);
      const other = name === "" ? undefined : owners.get(key); // a plain list may repeat an address, as in text
      if (other !== undefined) throw new AddressError(`${key} is in two shards (${JSON.stringify(other)} and ${JSON.stringify(name)}): a server serves one shard`, key);
      owners.set(key, name);
      addresses.push(copy);
    }
    copies.push({ name, addresses });
  }
  return { generation, shards: copies };
}

/** The map as parseServerMap reads it back. */
export function formatServerMap(map: ServerMap): string {
  const body = map.shards.map((shard) => (shard.name === "" ? "" : `${shard.name}=`) + formatAddressList(shard.addresses)).join(";");
  return map.generation === 0 ? body : `${GENERATION_KEY}=${map.generation};${body}`;
}
