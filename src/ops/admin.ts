/**
 * Admin authentication: one bearer token (the CLI resolves it from a flag,
 * LOCKD_ADMIN_TOKEN, or a file: cli/secrets.ts). Mutating ops endpoints compare the
 * request's token with it in constant time: both sides are hashed to
 * SHA-256 first, so the comparison has the same length (and the same cost)
 * whatever the caller sent, and timingSafeEqual tells nothing by its timing.
 * Bun's SHA-256 and the global crypto.timingSafeEqual: importing node:crypto
 * would cost every start of the server about 2.5 ms (compiled, Bun 1.4).
 */

export const AuthResult = {
  OK: 0,
  /** No admin token is configured: admin endpoints are off (403). */
  UNCONFIGURED: 1,
  /** No `Authorization: Bearer` header (401). */
  MISSING: 2,
  /** A token that does not match (401). */
  WRONG: 3,
} as const;
export type AuthResult = (typeof AuthResult)[keyof typeof AuthResult];

/** The 403 body when no token is configured, without the CLI's words for how to set one (OpsWords.adminToken). */
export function adminDisabled(howToSet: string): string {
  return `admin endpoints are disabled: ${howToSet}`;
}

function digest(text: string): Uint8Array {
  return Bun.SHA256.hash(text) as Uint8Array;
}

export class AdminAuth {
  private readonly expected: Uint8Array | null;

  constructor(token: string | null) {
    this.expected = token === null ? null : digest(token);
  }

  get configured(): boolean {
    return this.expected !== null;
  }

  /** Check an `Authorization` header value. */
  check(authorization: string | null): AuthResult {
    if (this.expected === null) return AuthResult.UNCONFIGURED;
    const match = authorization === null ? null : /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization);
    if (match === null) return AuthResult.MISSING;
    return crypto.timingSafeEqual(digest(match[1]!), this.expected) ? AuthResult.OK : AuthResult.WRONG;
  }
}

/**
 * What an admin action may name about its target, so that it acts on the
 * session the operator saw and on no other: force-release's `?session=ID`
 * and `?token=T` (the holder's session id and fencing token; either, both,
 * or neither for "whoever holds it now"), kick's `?lock=NAME` (the lock the
 * session waits for). A changed target is refused (409) with nothing done.
 */
export interface HolderPrecondition {
  /** The holder's session id, or null: any. */
  readonly session: number | null;
  /** The holder's fencing token (decimal, canonical), or null: any. */
  readonly token: string | null;
}

export const NO_PRECONDITION: HolderPrecondition = { session: null, token: null };

const U64_MAX = (1n << 64n) - 1n;

/** Every value of `key` in a raw query string (still percent-encoded). */
function rawValues(query: string, key: string): string[] {
  const values: string[] = [];
  if (query === "") return values;
  const prefix = `${key}=`;
  for (const part of query.split("&")) if (part.startsWith(prefix)) values.push(part.slice(prefix.length));
  return values;
}

/** A session id as the ops answers show it: 1..2^53-1, no sign, no leading zero. */
export function parseSessionId(text: string): number | null {
  return /^[1-9]\d{0,15}$/.test(text) && Number.isSafeInteger(Number(text)) ? Number(text) : null;
}

/** A fencing token in decimal (a u64): its canonical form, or null. */
export function parseFencingToken(text: string): string | null {
  if (!/^\d{1,20}$/.test(text)) return null;
  const value = BigInt(text);
  return value >= 1n && value <= U64_MAX ? value.toString() : null;
}

/**
 * The 400 message for the first query parameter of `query` not in
 * `allowed`, or null. An admin action must not read a typo (`?Session=`)
 * as "no precondition" and act on whoever holds the lock now.
 */
export function unknownParam(query: string, allowed: readonly string[]): string | null {
  if (query === "") return null;
  for (const part of query.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const key = eq < 0 ? part : part.slice(0, eq);
    if (!allowed.includes(key)) {
      const shown = JSON.stringify(key.length > 40 ? `${key.slice(0, 40)}...` : key);
      return `unknown query parameter ${shown}; this action takes ${allowed.map((k) => `?${k}=`).join(", ")} (names are case-sensitive): nothing was done`;
    }
  }
  return null;
}

/** The 400 message for the first of `keys` given more than once in `query`, or null. */
export function givenTwice(query: string, keys: readonly string[]): string | null {
  for (const key of keys) {
    const n = rawValues(query, key).length;
    if (n > 1) return `${key} is given ${n} times; give it once`;
  }
  return null;
}

/** One optional query value (given twice is an error). */
function single(query: string, key: string): { value: string | null } | { error: string } {
  const values = rawValues(query, key);
  if (values.length > 1) return { error: `${key} is given ${values.length} times; give it once` };
  if (values.length === 0) return { value: null };
  try {
    return { value: decodeURIComponent(values[0]!.replace(/\+/g, "%20")) };
  } catch {
    return { error: `${key} is not valid percent-encoded UTF-8` };
  }
}

/** Force-release's `?session=` and `?token=`, or what is wrong with them (a 400). */
export function holderPrecondition(query: string): HolderPrecondition | { error: string } {
  const session = single(query, "session");
  if ("error" in session) return session;
  const token = single(query, "token");
  if ("error" in token) return token;
  let id: number | null = null;
  if (session.value !== null) {
    id = parseSessionId(session.value);
    if (id === null) return { error: `session ${JSON.stringify(session.value.slice(0, 40))} is not a session id (a positive whole number)` };
  }
  let fencing: string | null = null;
  if (token.value !== null) {
    fencing = parseFencingToken(token.value);
    if (fencing === null) {
      // Not echoed: it may be the admin token, put here by mistake.
      return { error: "token is not a fencing token (a whole number 1..2^64-1, as the lock view shows the holder's); the admin token goes in the Authorization header" };
    }
  }
  return { session: id, token: fencing };
}

/** What a precondition names, for messages: "session 41, token 1234". */
export function describePrecondition(want: HolderPrecondition): string {
  const parts: string[] = [];
  if (want.session !== null) parts.push(`session ${want.session}`);
  if (want.token !== null) parts.push(`token ${want.token}`);
  return parts.join(", ");
}

/** The holder as a precondition compares it. */
export interface HolderFacts {
  readonly session: number;
  readonly token: string;
  readonly owner: string;
}

/**
 * Null when `holder` is the one `want` names (or `want` names none), else
 * the one-line reason the action is refused (409: nothing was done).
 */
export function holderChanged(name: string, holder: HolderFacts, want: HolderPrecondition): string | null {
  const sessionOk = want.session === null || want.session === holder.session;
  const tokenOk = want.token === null || want.token === holder.token;
  if (sessionOk && tokenOk) return null;
  const now = `session ${holder.session}${holder.owner === "" ? "" : ` (owner ${JSON.stringify(holder.owner)})`} with token ${holder.token}`;
  return `${JSON.stringify(name)} is held by ${now}, not by the ${describePrecondition(want)} asked for: the holder changed, nothing was released; look again and name the holder you mean`;
}

/**
 * The refusal when a lock of several holders (a semaphore's, or shared
 * ones) has none that `want` names: how many hold it and who is the oldest.
 */
export function holderGone(name: string, holding: number, oldest: HolderFacts, want: HolderPrecondition): string {
  const first = `session ${oldest.session}${oldest.owner === "" ? "" : ` (owner ${JSON.stringify(oldest.owner)})`} with token ${oldest.token}`;
  return `${JSON.stringify(name)} has ${holding} holders and none is the ${describePrecondition(want)} asked for (the oldest is ${first}): the holder changed, nothing was released; look again and name the holder you mean`;
}
