/**
 * Admin authentication: one bearer token, from a flag, LOCKD_ADMIN_TOKEN, or
 * a file named by LOCKD_ADMIN_TOKEN_FILE. Mutating ops endpoints compare the
 * request's token with it in constant time: both sides are hashed to
 * SHA-256 first, so the comparison has the same length (and the same cost)
 * whatever the caller sent, and timingSafeEqual tells nothing by its timing.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { ConfigError, type OptionSource } from "../config.ts";

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

/** How to turn admin endpoints on: the 403 body says it. */
export const HOW_TO_SET_TOKEN =
  "admin endpoints are disabled: start lockd serve with --admin-token-file FILE, LOCKD_ADMIN_TOKEN_FILE=FILE, or LOCKD_ADMIN_TOKEN=TOKEN";

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

export class AdminAuth {
  private readonly expected: Buffer | null;

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
    return timingSafeEqual(digest(match[1]!), this.expected) ? AuthResult.OK : AuthResult.WRONG;
  }
}

export interface TokenOptions {
  readonly adminToken: string | undefined;
  readonly adminTokenFile: string | undefined;
}

/**
 * The admin token and where it came from. Flags beat the environment; on
 * the same level the inline token and the file are mutually exclusive.
 * Throws ConfigError for an unreadable or empty file.
 */
export function resolveAdminToken(
  options: TokenOptions,
  sources: { readonly adminToken: OptionSource; readonly adminTokenFile: OptionSource },
  read: (path: string) => string = (path) => readFileSync(path, "utf8"),
): { token: string | null; from: string } {
  for (const level of ["flag", "env"] as const) {
    const inline = sources.adminToken === level ? options.adminToken : undefined;
    const file = sources.adminTokenFile === level ? options.adminTokenFile : undefined;
    if (inline !== undefined && file !== undefined) {
      const names = level === "flag" ? "--admin-token and --admin-token-file" : "LOCKD_ADMIN_TOKEN and LOCKD_ADMIN_TOKEN_FILE";
      throw new ConfigError([`${names} are both set: give one`]);
    }
    if (inline !== undefined) return { token: inline, from: level === "flag" ? "--admin-token" : "LOCKD_ADMIN_TOKEN" };
    if (file !== undefined) {
      const where = level === "flag" ? "--admin-token-file" : "--admin-token-file (from LOCKD_ADMIN_TOKEN_FILE)";
      let text: string;
      try {
        text = read(file);
      } catch (error) {
        throw new ConfigError([`${where}: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`]);
      }
      const token = text.replace(/\r?\n$/, "");
      if (!/^[\x21-\x7e]+$/.test(token)) {
        throw new ConfigError([`${where}: ${file} must hold one token of printable ASCII without spaces (a trailing newline is fine)`]);
      }
      return { token, from: `file ${file}` };
    }
  }
  return { token: null, from: "none" };
}
