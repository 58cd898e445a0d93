/**
 * Values given inline or in a file, by flag or by environment: the admin
 * token (`--admin-token`, `--admin-token-file`, LOCKD_ADMIN_TOKEN,
 * LOCKD_ADMIN_TOKEN_FILE) and the coordinator URL (`--coordinator`,
 * `--coordinator-file`, ...). One rule for both: flags beat the
 * environment; on the same level the inline value and the file are
 * mutually exclusive; a file's contents lose one trailing newline.
 */
import { readFileSync } from "node:fs";
import { ConfigError, type OptionSource } from "./options/argv.ts";

export type ReadFile = (path: string) => string;

const readUtf8: ReadFile = (path) => readFileSync(path, "utf8");

/** The four names of one value, and what a file of it must hold. */
interface InlineOrFile {
  readonly flag: string;
  readonly fileFlag: string;
  readonly env: string;
  readonly fileEnv: string;
  readonly valid: RegExp;
  /** The end of "FILE must hold ...". */
  readonly holds: string;
}

interface Resolved {
  readonly value: string;
  /** The flag or variable it came from. */
  readonly from: string;
  /** The file it was read from, null when given inline. */
  readonly file: string | null;
}

/** Throws ConfigError for both forms on one level, or an unreadable or malformed file. */
function resolveInlineOrFile(
  names: InlineOrFile,
  inlineValue: string | undefined,
  fileValue: string | undefined,
  sources: { readonly inline: OptionSource; readonly file: OptionSource },
  read: ReadFile,
): Resolved | null {
  for (const level of ["flag", "env"] as const) {
    const inline = sources.inline === level ? inlineValue : undefined;
    const file = sources.file === level ? fileValue : undefined;
    if (inline !== undefined && file !== undefined) {
      throw new ConfigError([`${level === "flag" ? `${names.flag} and ${names.fileFlag}` : `${names.env} and ${names.fileEnv}`} are both set: give one`]);
    }
    if (inline !== undefined) return { value: inline, from: level === "flag" ? names.flag : names.env, file: null };
    if (file !== undefined) {
      const where = level === "flag" ? names.fileFlag : `${names.fileFlag} (from ${names.fileEnv})`;
      let text: string;
      try {
        text = read(file);
      } catch (error) {
        throw new ConfigError([`${where}: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`]);
      }
      const value = text.replace(/\r?\n$/, "");
      if (!names.valid.test(value)) throw new ConfigError([`${where}: ${file} must hold ${names.holds}`]);
      return { value, from: level === "flag" ? names.fileFlag : names.fileEnv, file };
    }
  }
  return null;
}

const ADMIN_TOKEN: InlineOrFile = {
  flag: "--admin-token",
  fileFlag: "--admin-token-file",
  env: "LOCKD_ADMIN_TOKEN",
  fileEnv: "LOCKD_ADMIN_TOKEN_FILE",
  valid: /^[\x21-\x7e]+$/,
  holds: "one token of printable ASCII without spaces (a trailing newline is fine)",
};

export interface TokenOptions {
  readonly adminToken: string | undefined;
  readonly adminTokenFile: string | undefined;
}

/** The admin token and where it came from (`from` is "none" without one). Throws ConfigError. */
export function resolveAdminToken(
  options: TokenOptions,
  sources: { readonly adminToken: OptionSource; readonly adminTokenFile: OptionSource },
  read: ReadFile = readUtf8,
): { token: string | null; from: string } {
  const found = resolveInlineOrFile(ADMIN_TOKEN, options.adminToken, options.adminTokenFile, { inline: sources.adminToken, file: sources.adminTokenFile }, read);
  if (found === null) return { token: null, from: "none" };
  return { token: found.value, from: found.file === null ? found.from : `file ${found.file}` };
}

const COORDINATOR_URL: InlineOrFile = {
  flag: "--coordinator",
  fileFlag: "--coordinator-file",
  env: "LOCKD_COORDINATOR",
  fileEnv: "LOCKD_COORDINATOR_FILE",
  valid: /^\S+$/,
  holds: "one URL on one line",
};

export interface CoordinatorFlags {
  readonly coordinator: string | undefined;
  readonly coordinatorFile: string | undefined;
}

/** The coordinator URL and the flag or variable it came from, or null without one. Throws ConfigError. */
export function resolveCoordinatorSource(
  options: CoordinatorFlags,
  sources: { readonly coordinator: OptionSource; readonly coordinatorFile: OptionSource },
  read: ReadFile = readUtf8,
): { url: string; from: string } | null {
  const found = resolveInlineOrFile(COORDINATOR_URL, options.coordinator, options.coordinatorFile, { inline: sources.coordinator, file: sources.coordinatorFile }, read);
  return found === null ? null : { url: found.value, from: found.from };
}
