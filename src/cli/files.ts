/**
 * Reading the files that options name (certificates, keys), with errors
 * that say which option. node:fs is required when a file is read, not
 * imported: loading it costs every `lockd run` about 0.6 ms (compiled, Bun
 * 1.4), and most runs read no file.
 */
import { createRequire } from "node:module";
import { ExitCode } from "./exit.ts";
import { CliError } from "./errors.ts";
import type { TokenStoreError } from "../tokens/file.ts";

export function readOptionFile(path: string, flag: string): string {
  try {
    return (createRequire(import.meta.url)("node:fs") as typeof import("node:fs")).readFileSync(path, "utf8");
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

/** A data directory error as `lockd serve` and `lockd floor` say it: the store's sentence, with the advice worded by flag. */
export function storeMessage(error: TokenStoreError, dataDir: string): string {
  if (error.advice === "file") return `--data-dir ${dataDir} is a file, not a directory`;
  if (error.advice === "other") return `${error.message} (choose another --data-dir, or fix the directory)`;
  return error.message;
}
