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
