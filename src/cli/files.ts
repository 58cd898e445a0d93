/** Reading the files that options name (certificates, keys), with errors that say which option. */
import { readFileSync } from "node:fs";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";

export function readOptionFile(path: string, flag: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new CliError(`${flag} ${path}: ${(error as Error).message}`, ExitCode.NO_INPUT);
  }
}

/** Both or neither of a certificate and its key. */
export function pairOf(cert: string | undefined, key: string | undefined, certFlag: string, keyFlag: string): { cert: string; key: string } | undefined {
  if (cert === undefined && key === undefined) return undefined;
  if (cert === undefined || key === undefined) {
    throw new CliError(`${cert === undefined ? certFlag : keyFlag} is needed with ${cert === undefined ? keyFlag : certFlag}`, ExitCode.USAGE);
  }
  return { cert: readOptionFile(cert, certFlag), key: readOptionFile(key, keyFlag) };
}
