/**
 * The coordinator URL, read with libpq's meaning of a connection URI:
 *
 *   postgres://[user[:password]@][host[:port][,host[:port]...]][/dbname][?param=value&...]
 *
 * - several hosts, each with its own port (`h1:5441,h2:5442`), an IPv6
 *   address in brackets (`[fd00::5]:5432`), or a unix socket directory
 *   (a host that begins with `/`, given percent-encoded in the URI or in
 *   `host=`); a host without a port uses 5432;
 * - the `host=` and `port=` parameters, which replace the URI's hosts and
 *   ports: `host=a,b&port=5441,5442` (one port for every host, or one per
 *   host, as libpq);
 * - `target_session_attrs`: which server of the list to use. lockd must
 *   write, so `read-write` is its default (a server whose
 *   `transaction_read_only` is off) and `primary` (a server not in
 *   recovery) is accepted as its synonym; a value that would let lockd pick
 *   a server it cannot write to (`any`, `read-only`, `standby`,
 *   `prefer-standby`) is refused;
 * - `dbname`, `user`, `password`, `sslmode`, `connect_timeout` and
 *   `application_name`, with libpq's meaning.
 *
 * Anything else (another parameter, a malformed host list or port, another
 * scheme) is a CoordinatorUrlError with one line naming it. libpq's
 * keyword/value strings (`host=a port=5432 ...`) are not read: give a URL.
 *
 * Pure: no I/O. The store (store.ts) connects to the hosts in order.
 */

/** One server of the list: a host name, IPv4 or IPv6 address (no brackets), or a unix socket directory, and its port. */
export interface CoordinatorEndpoint {
  readonly host: string;
  readonly port: number;
}

export type SslMode = "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full";

/** What lockd connects to: the servers in order and what it asks each for. */
export interface CoordinatorTarget {
  readonly endpoints: readonly CoordinatorEndpoint[];
  readonly user: string | undefined;
  readonly password: string | undefined;
  readonly database: string | undefined;
  /** Both mean a server lockd can write to; `primary` asks pg_is_in_recovery(), `read-write` transaction_read_only. */
  readonly targetSessionAttrs: "read-write" | "primary";
  readonly sslmode: SslMode | undefined;
  /** Seconds to wait for each server's connection (libpq's connect_timeout). */
  readonly connectTimeoutS: number | undefined;
  readonly applicationName: string | undefined;
}

/** A URL lockd cannot use as it is: the message is one line naming what is wrong. */
export class CoordinatorUrlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CoordinatorUrlError";
  }
}

/** The parameters lockd understands, with what each means (in the refusal of any other). */
export const URL_PARAMETERS = ["host", "port", "dbname", "user", "password", "target_session_attrs", "sslmode", "connect_timeout", "application_name"] as const;

const SSL_MODES: readonly SslMode[] = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"];
const EXAMPLE = "example: postgres://lockd@db1.internal:5432,db2.internal:5432/lockd";

/** A host:port for messages and reports (IPv6 in brackets). */
export function formatEndpoint(e: CoordinatorEndpoint): string {
  return e.host.includes(":") ? `[${e.host}]:${e.port}` : `${e.host}:${e.port}`;
}

function decode(text: string, what: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new CoordinatorUrlError(`the coordinator URL's ${what} ${JSON.stringify(text)} has a malformed percent-escape`);
  }
}

function parsePort(text: string, where: string): number {
  if (!/^[0-9]{1,5}$/.test(text) || Number(text) < 1 || Number(text) > 65535) {
    throw new CoordinatorUrlError(`the coordinator URL's port ${JSON.stringify(text)}${where} is not a port (1 to 65535)`);
  }
  return Number(text);
}

/** One entry of the URI's host list: `host`, `host:port`, `[v6]`, `[v6]:port`, `:port`. */
function parseHostEntry(entry: string): { host: string | undefined; port: number | undefined } {
  if (entry.startsWith("[")) {
    const close = entry.indexOf("]");
    if (close < 0) throw new CoordinatorUrlError(`the coordinator URL's host ${JSON.stringify(entry)} opens a bracket it does not close`);
    const host = entry.slice(1, close);
    const rest = entry.slice(close + 1);
    if (host === "" || !/^[0-9a-fA-F:.]+(%[\w.-]+)?$/.test(host)) throw new CoordinatorUrlError(`the coordinator URL's host ${JSON.stringify(entry)} is not an IPv6 address`);
    if (rest === "") return { host, port: undefined };
    if (!rest.startsWith(":")) throw new CoordinatorUrlError(`the coordinator URL's host ${JSON.stringify(entry)} has something after its address that is not :PORT`);
    return { host, port: parsePort(rest.slice(1), ` (of ${entry})`) };
  }
  const colon = entry.lastIndexOf(":");
  const hostText = colon < 0 ? entry : entry.slice(0, colon);
  const port = colon < 0 ? undefined : parsePort(entry.slice(colon + 1), ` (of ${entry})`);
  const host = decode(hostText, "host");
  if (host !== "" && !host.startsWith("/") && !/^[A-Za-z0-9._-]+$/.test(host)) {
    throw new CoordinatorUrlError(`the coordinator URL's host ${JSON.stringify(host)} is not a host name or address`);
  }
  return { host: host === "" ? undefined : host, port };
}

/**
 * Read a coordinator URL. Throws CoordinatorUrlError, with one line naming
 * what is wrong, for anything lockd does not understand.
 */
export function parseCoordinatorUrl(url: string): CoordinatorTarget {
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url);
  if (scheme === null) throw new CoordinatorUrlError(`${JSON.stringify(redactUrl(url))} is not a URL (${EXAMPLE})`);
  const protocol = scheme[1]!.toLowerCase();
  if (protocol !== "postgres" && protocol !== "postgresql") {
    throw new CoordinatorUrlError(`${redactUrl(url)} is not a PostgreSQL URL (it must start with postgres:// or postgresql://)`);
  }
  if (/\s/.test(url)) throw new CoordinatorUrlError(`the coordinator URL ${JSON.stringify(redactUrl(url))} holds a space (percent-encode it as %20)`);
  let rest = url.slice(scheme[0].length);
  const hash = rest.indexOf("#");
  if (hash >= 0) throw new CoordinatorUrlError(`the coordinator URL has a fragment (${JSON.stringify(rest.slice(hash))}), which means nothing to PostgreSQL`);
  const q = rest.indexOf("?");
  const query = q < 0 ? "" : rest.slice(q + 1);
  rest = q < 0 ? rest : rest.slice(0, q);
  const slash = rest.indexOf("/");
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? "" : rest.slice(slash + 1);
  const at = authority.lastIndexOf("@");
  const userinfo = at < 0 ? undefined : authority.slice(0, at);
  const hostlist = at < 0 ? authority : authority.slice(at + 1);

  let user: string | undefined;
  let password: string | undefined;
  if (userinfo !== undefined) {
    const colon = userinfo.indexOf(":");
    user = decode(colon < 0 ? userinfo : userinfo.slice(0, colon), "user name");
    if (colon >= 0) password = decode(userinfo.slice(colon + 1), "password");
    if (user === "") user = undefined;
  }
  if (path.includes("/")) throw new CoordinatorUrlError(`the coordinator URL's database name ${JSON.stringify(path)} holds a slash (one database name after the hosts)`);
  let database = path === "" ? undefined : decode(path, "database name");

  // The URI's hosts: empty entries are libpq's default host.
  let hosts: (string | undefined)[] = [];
  let ports: (number | undefined)[] = [];
  if (hostlist !== "") {
    for (const entry of hostlist.split(",")) {
      const parsed = parseHostEntry(entry);
      hosts.push(parsed.host);
      ports.push(parsed.port);
    }
  }

  let targetSessionAttrs: CoordinatorTarget["targetSessionAttrs"] = "read-write";
  let sslmode: SslMode | undefined;
  let connectTimeoutS: number | undefined;
  let applicationName: string | undefined;
  const seen = new Set<string>();
  for (const pair of query === "" ? [] : query.split("&")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq < 0) throw new CoordinatorUrlError(`the coordinator URL's parameter ${JSON.stringify(decode(pair, "parameter"))} has no value (write name=value)`);
    const name = decode(pair.slice(0, eq).replace(/\+/g, " "), "parameter name");
    const value = decode(pair.slice(eq + 1).replace(/\+/g, " "), `parameter ${name}`);
    if (!(URL_PARAMETERS as readonly string[]).includes(name)) {
      throw new CoordinatorUrlError(`the coordinator URL's parameter ${JSON.stringify(name)} is not one lockd understands (it reads ${URL_PARAMETERS.join(", ")})`);
    }
    if (seen.has(name)) throw new CoordinatorUrlError(`the coordinator URL gives the parameter ${JSON.stringify(name)} twice`);
    seen.add(name);
    switch (name) {
      case "host":
        hosts = value.split(",").map((h) => {
          if (h === "") return undefined;
          if (!h.startsWith("/") && !/^[A-Za-z0-9._:-]+$/.test(h)) throw new CoordinatorUrlError(`the coordinator URL's host ${JSON.stringify(h)} (in host=) is not a host name or address`);
          return h;
        });
        break;
      case "port":
        ports = value.split(",").map((p) => (p === "" ? undefined : parsePort(p, " (in port=)")));
        break;
      case "dbname":
        database = value;
        break;
      case "user":
        user = value;
        break;
      case "password":
        password = value;
        break;
      case "target_session_attrs":
        if (value === "read-write" || value === "primary") targetSessionAttrs = value;
        else if (["any", "read-only", "standby", "prefer-standby"].includes(value)) {
          throw new CoordinatorUrlError(`the coordinator URL's target_session_attrs=${value} would let lockd use a server it cannot write to: lockd writes its row, so it needs read-write (the default) or primary`);
        } else {
          throw new CoordinatorUrlError(`the coordinator URL's target_session_attrs=${JSON.stringify(value)} is not one lockd understands (read-write, the default, or primary)`);
        }
        break;
      case "sslmode":
        if (!(SSL_MODES as readonly string[]).includes(value)) throw new CoordinatorUrlError(`the coordinator URL's sslmode=${JSON.stringify(value)} is not an SSL mode (${SSL_MODES.join(", ")})`);
        sslmode = value as SslMode;
        break;
      case "connect_timeout": {
        if (!/^[0-9]+$/.test(value) || Number(value) < 1 || Number(value) > 3600) throw new CoordinatorUrlError(`the coordinator URL's connect_timeout=${JSON.stringify(value)} is not a number of seconds (1 to 3600)`);
        connectTimeoutS = Number(value);
        break;
      }
      case "application_name":
        applicationName = value;
        break;
    }
  }

  if (hosts.length === 0) hosts = [undefined];
  if (ports.length > 1 && ports.length !== hosts.length) {
    throw new CoordinatorUrlError(`the coordinator URL gives ${ports.length} ports for ${hosts.length} host${hosts.length === 1 ? "" : "s"}: give one port for all, or one per host`);
  }
  const endpoints = hosts.map((host, i) => ({
    host: host ?? "localhost",
    port: (ports.length === 1 ? ports[0] : ports[i]) ?? 5432,
  }));
  return { endpoints, user, password, database, targetSessionAttrs, sslmode, connectTimeoutS, applicationName };
}

/** The URL without its password (in the user part or a password= parameter), for messages and logs. Never throws. */
export function redactUrl(url: string): string {
  let out = url.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^@/?#]*)@/, (_all, scheme: string, userinfo: string) => {
    const colon = userinfo.indexOf(":");
    return colon < 0 ? `${scheme}${userinfo}@` : `${scheme}${userinfo.slice(0, colon)}:****@`;
  });
  out = out.replace(/([?&]password=)[^&#]*/g, "$1****");
  return out;
}
