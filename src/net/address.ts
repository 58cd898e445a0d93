/**
 * Addresses of lock and ops servers, as people write them: one parser for
 * the client library (`servers`), `lockd run --server`, `lockd status --ops`,
 * the admin verbs, `lockd serve --listen/--ops` and every LOCKD_* variable
 * that holds an address. No Bun API and no dependency: the client library
 * runs on Node.js too.
 *
 *     address  = host ":" port | "[" ipv6 "]" ":" port | ":" port
 *     list     = address *( "," address )        (spaces around elements ignored)
 *
 * `host` is a DNS name or an IPv4 address; an IPv6 address goes in
 * brackets (`[::1]:7700`), because its colons would make the port
 * ambiguous. `:PORT` means 127.0.0.1: all interfaces is never implied.
 *
 * The server map (shards, docs/protocol.md section 12) is the same lists,
 * named and joined with `;`, with an optional generation first:
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
 *
 * Every error names the element that is wrong (its position in a list) and
 * what is wrong with it. The grammar is kept in this one place so that the
 * library, the CLI and the servers never read one string two ways.
 */
import { isIPv4, isIPv6 } from "node:net";

export interface Address {
  readonly host: string;
  readonly port: number;
}

/** The host `:PORT` stands for. */
export const DEFAULT_HOST = "127.0.0.1";

export const ADDRESS_EXAMPLE = "127.0.0.1:7700";

/** A malformed address or address list; the message names the bad element. */
export class AddressError extends RangeError {
  override readonly name = "AddressError";
  constructor(
    message: string,
    /** The element that is wrong, as given. */
    readonly element: string,
  ) {
    super(message);
  }
}

export interface AddressRules {
  /** Accept port 0 ("any free port"): only for addresses to listen on. Default false. */
  readonly allowPortZero?: boolean;
}

/** A DNS name: labels of letters, digits, `-` and `_`, dot-separated, at most 253 characters. */
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$/;

/** Why `text` is not an address, or null when it is one. Sets `out` on success. */
function problem(text: string, rules: AddressRules, out: { host: string; port: number }): string | null {
  if (text === "") return "empty";
  let host: string;
  let portText: string;
  if (text.startsWith("[")) {
    const close = text.indexOf("]");
    if (close < 0) return "an opening [ without ]";
    host = text.slice(1, close);
    if (!isIPv6(host)) return `${JSON.stringify(host)} in brackets is not an IPv6 address`;
    if (text[close + 1] !== ":") return "missing :PORT after ]";
    portText = text.slice(close + 2);
  } else {
    const colon = text.lastIndexOf(":");
    if (colon < 0) return "missing :PORT";
    host = text.slice(0, colon);
    portText = text.slice(colon + 1);
    if (host.includes(":")) return isIPv6(host) || isIPv6(text) ? "an IPv6 address goes in brackets: [::1]:7700" : "too many colons";
    if (host === "") host = DEFAULT_HOST;
    else {
      const why = namedHostProblem(host);
      if (why !== null) return why;
    }
  }
  if (!/^\d{1,5}$/.test(portText)) return portText === "" ? "missing the port after :" : `port ${JSON.stringify(portText)} is not a number`;
  const port = Number(portText);
  const why = portProblem(port, rules);
  if (why !== null) return why;
  out.host = host;
  out.port = port;
  return null;
}

/** Why `host` (without brackets or a colon) is not a DNS name or an IPv4 address, or null. */
function namedHostProblem(host: string): string | null {
  return !isIPv4(host) && (/^[\d.]+$/.test(host) || !HOSTNAME.test(host)) ? `${JSON.stringify(host)} is not a host name or IP address` : null;
}

function portProblem(port: number, rules: AddressRules): string | null {
  const min = rules.allowPortZero ? 0 : 1;
  return port >= min && port <= 65535 && Number.isInteger(port) ? null : `port ${port} is out of range ${min}..65535`;
}

/** Why an Address given as a value is not one parseAddress could have returned, or null. */
function addressValueProblem(address: Address, rules: AddressRules): string | null {
  const { host, port } = (address ?? {}) as Partial<Address>;
  if (typeof host !== "string" || host === "") return "host must be a host name or IP address";
  if (typeof port !== "number") return "port must be a number";
  if (!isIPv6(host)) {
    if (host.includes(":")) return `${JSON.stringify(host)} is not a host name or IP address`;
    const why = namedHostProblem(host);
    if (why !== null) return why;
  }
  return portProblem(port, rules);
}

/** One address: `host:port`, `[v6]:port` or `:port`. Throws AddressError. */
export function parseAddress(text: string, rules: AddressRules = {}): Address {
  const trimmed = text.trim();
  const out = { host: "", port: 0 };
  const why = problem(trimmed, rules, out);
  if (why !== null) {
    const hint = trimmed.includes(",") ? "; one address expected here, not a list" : "";
    throw new AddressError(`${JSON.stringify(text)} is not HOST:PORT: ${why}${hint} (example: ${ADDRESS_EXAMPLE})`, text);
  }
  return out;
}

/**
 * A list of addresses: a comma-separated string, or an array whose items may
 * themselves be comma-separated. At least one. Throws AddressError naming
 * the first bad element and its position.
 */
export function parseAddressList(input: string | readonly string[], rules: AddressRules = {}): Address[] {
  const elements = (typeof input === "string" ? [input] : input).flatMap((item) => item.split(","));
  const whole = typeof input === "string" ? input : input.join(",");
  if (elements.every((element) => element.trim() === "")) {
    throw new AddressError(`no address given (example: ${ADDRESS_EXAMPLE}, or a list: 10.0.0.1:7700,10.0.0.2:7700)`, whole);
  }
  const addresses: Address[] = [];
  for (let i = 0; i < elements.length; i++) {
    const element = elements[i]!.trim();
    const out = { host: "", port: 0 };
    const why = problem(element, rules, out);
    if (why !== null) {
      const where = elements.length === 1 ? JSON.stringify(element) : `element ${i + 1} of ${JSON.stringify(whole)} (${JSON.stringify(element)})`;
      throw new AddressError(`${where} is not HOST:PORT: ${why} (example: ${ADDRESS_EXAMPLE}, or a list: 10.0.0.1:7700,10.0.0.2:7700)`, element);
    }
    addresses.push(out);
  }
  return addresses;
}

/** A host as it stands before `:port` (in a URL too): an IPv6 address in brackets. */
export function bracketHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

/** `host:port`, with an IPv6 host in brackets: what parseAddress reads back. */
export function formatAddress(address: Address): string {
  return `${bracketHost(address.host)}:${address.port}`;
}

export function formatAddressList(addresses: readonly Address[]): string {
  return addresses.map(formatAddress).join(",");
}

// --- the server map: shards ---------------------------------------------------------

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
