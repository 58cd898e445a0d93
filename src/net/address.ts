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
 * A server map (shards) is a list of these lists: src/shard/map.ts.
 *
 * Every error names the element that is wrong (its position in a list) and
 * what is wrong with it. The grammar is kept in this one place so that the
 * library, the CLI and the servers never read one string two ways.
 */

export interface Address {
  readonly host: string;
  readonly port: number;
}

/** The host `:PORT` stands for. */
export const DEFAULT_HOST = "127.0.0.1";

/** The lock protocol's port by default: `lockd serve --listen`, and where clients look without LOCKD_SERVER. */
export const DEFAULT_LOCK_PORT = 7700;
/** The ops server's port by default: `lockd serve --ops`, and where `lockd status` and the admin verbs look. */
export const DEFAULT_OPS_PORT = 7701;
/** `lockd serve --listen`'s default, and the server of `lockd run` and the client library by default. */
export const DEFAULT_LOCK_ADDRESS = `${DEFAULT_HOST}:${DEFAULT_LOCK_PORT}`;
/** `lockd serve --ops`'s default, and the ops server `lockd status` and the admin verbs ask by default. */
export const DEFAULT_OPS_ADDRESS = `${DEFAULT_HOST}:${DEFAULT_OPS_PORT}`;

export const ADDRESS_EXAMPLE = DEFAULT_LOCK_ADDRESS;

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

/*
 * IPv4 and IPv6 literals, by node:net's own expressions (lib/internal/net.js;
 * test/cli/startup-imports.test.ts checks they agree with node:net): node:net
 * itself is not imported, since loading it costs a command about 2.5 ms
 * (Bun 1.4, compiled) and `lockd run` parses addresses before anything else.
 */
const V4_SEG = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
const V4_STR = `(?:${V4_SEG}\\.){3}${V4_SEG}`;
const IPV4 = new RegExp(`^${V4_STR}$`);
const V6_SEG = "(?:[0-9a-fA-F]{1,4})";
/** Built at its first use: constructing it costs a command start about 0.3 ms, and most addresses have no colon. */
let IPV6: RegExp | undefined;
function ipv6Expression(): RegExp {
  return (IPV6 ??= new RegExp(
    "^(?:" +
      `(?:${V6_SEG}:){7}(?:${V6_SEG}|:)|` +
      `(?:${V6_SEG}:){6}(?:${V4_STR}|:${V6_SEG}|:)|` +
      `(?:${V6_SEG}:){5}(?::${V4_STR}|(?::${V6_SEG}){1,2}|:)|` +
      `(?:${V6_SEG}:){4}(?:(?::${V6_SEG}){0,1}:${V4_STR}|(?::${V6_SEG}){1,3}|:)|` +
      `(?:${V6_SEG}:){3}(?:(?::${V6_SEG}){0,2}:${V4_STR}|(?::${V6_SEG}){1,4}|:)|` +
      `(?:${V6_SEG}:){2}(?:(?::${V6_SEG}){0,3}:${V4_STR}|(?::${V6_SEG}){1,5}|:)|` +
      `(?:${V6_SEG}:){1}(?:(?::${V6_SEG}){0,4}:${V4_STR}|(?::${V6_SEG}){1,6}|:)|` +
      `(?::(?:(?::${V6_SEG}){0,5}:${V4_STR}|(?::${V6_SEG}){1,7}|:))` +
      ")(?:%[0-9a-zA-Z-.:]{1,})?$",
  ));
}

/** Whether `text` is an IPv4 literal (dotted quad, no leading zeros): node:net's isIPv4. */
export function isIPv4(text: string): boolean {
  return IPV4.test(text);
}

/** Whether `text` is an IPv6 literal (a zone index `%eth0` allowed): node:net's isIPv6. */
export function isIPv6(text: string): boolean {
  // Without a colon it is none, and the expression is not needed.
  return text.includes(":") && ipv6Expression().test(text);
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
export function addressValueProblem(address: Address, rules: AddressRules): string | null {
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
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** A host without the brackets an IPv6 address has before `:port`: the inverse of bracketHost. */
export function unbracket(host: string): string {
  return host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
}

/** `host:port`, with an IPv6 host in brackets: what parseAddress reads back. */
export function formatAddress(address: Address): string {
  return `${bracketHost(address.host)}:${address.port}`;
}

export function formatAddressList(addresses: readonly Address[]): string {
  return addresses.map(formatAddress).join(",");
}

/**
 * A wildcard (unspecified) host: "" , 0.0.0.0 (or its short forms 0, 0.0,
 * 0.0.0), :: and its longer spellings (0:0:0:0:0:0:0:0, ::0,
 * ::ffff:0.0.0.0), bracketed or not. A listener binds it to take every
 * interface; as an address to reach, it names no host another machine can
 * reach.
 */
export function isWildcardHost(host: string): boolean {
  const bare = unbracket(host).replace(/%.*$/, "");
  if (bare === "" || /^0+(\.0+){0,3}$/.test(bare)) return true;
  if (!bare.includes(":")) return false;
  const mapped = /^(?:0*:)*:?(?:ffff:)?(0+(?:\.0+){3})$/i.exec(bare);
  return mapped !== null || /^[0:]*$/.test(bare);
}

/**
 * A loopback host (127.0.0.0/8, ::1, localhost, bracketed or not): an
 * address that names, on every host, that host itself. Advertised by an
 * active, it is right only when every instance runs on one machine.
 */
export function isLoopbackHost(host: string): boolean {
  const bare = unbracket(host).replace(/%.*$/, "").toLowerCase();
  return bare === "localhost" || /^127(\.\d{1,3}){3}$/.test(bare) || /^(0{0,4}:){2,7}0{0,3}1$/.test(bare) || /^::ffff:127(\.\d{1,3}){3}$/.test(bare);
}

/** The host part of HOST:PORT (brackets kept off). */
export function hostOf(address: string): string {
  const colon = address.lastIndexOf(":");
  return unbracket(colon < 0 ? address : address.slice(0, colon));
}
