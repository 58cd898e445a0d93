/**
 * `lockd serve --coordinator`: the URL (inline or from a file, like the
 * admin token), the instance id, and the store opened and checked before
 * anything listens. Every problem is one line and an exit code.
 */
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { ConfigError, type OptionSource } from "../config.ts";
import { CoordinatorConfigError, PgCoordinatorStore } from "../server/coordinator-store.ts";
import { ExitCode } from "./exit.ts";
import { CliError } from "./ops-client.ts";

export interface CoordinatorFlags {
  readonly coordinator: string | undefined;
  readonly coordinatorFile: string | undefined;
}

/**
 * The coordinator URL and where it came from, or null without one. Flags
 * beat the environment; on the same level the inline URL and the file are
 * mutually exclusive.
 */
export function resolveCoordinatorUrl(
  options: CoordinatorFlags,
  sources: { readonly coordinator: OptionSource; readonly coordinatorFile: OptionSource },
  read: (path: string) => string = (path) => readFileSync(path, "utf8"),
): { url: string; from: string } | null {
  for (const level of ["flag", "env"] as const) {
    const inline = sources.coordinator === level ? options.coordinator : undefined;
    const file = sources.coordinatorFile === level ? options.coordinatorFile : undefined;
    if (inline !== undefined && file !== undefined) {
      throw new ConfigError([`${level === "flag" ? "--coordinator and --coordinator-file" : "LOCKD_COORDINATOR and LOCKD_COORDINATOR_FILE"} are both set: give one`]);
    }
    if (inline !== undefined) return { url: inline, from: level === "flag" ? "--coordinator" : "LOCKD_COORDINATOR" };
    if (file !== undefined) {
      const where = level === "flag" ? "--coordinator-file" : "--coordinator-file (from LOCKD_COORDINATOR_FILE)";
      let text: string;
      try {
        text = read(file);
      } catch (error) {
        throw new ConfigError([`${where}: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`]);
      }
      const url = text.replace(/\r?\n$/, "");
      if (!/^\S+$/.test(url)) throw new ConfigError([`${where}: ${file} must hold one URL on one line`]);
      return { url, from: level === "flag" ? "--coordinator-file" : "LOCKD_COORDINATOR_FILE" };
    }
  }
  return null;
}

/** host/pid-N/random: unique per process, readable in the coordinator table. */
export function instanceId(): string {
  const random = Array.from(crypto.getRandomValues(new Uint8Array(4)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hostname()}/pid-${process.pid}/${random}`.slice(0, 255);
}

/** Open and check the store; a problem becomes a CliError with its exit code. */
export async function openCoordinator(url: string, service: string, instance: string, leaseMs: number, block: number): Promise<PgCoordinatorStore> {
  try {
    return await PgCoordinatorStore.open({ url, service, instance, leaseMs, block, connectTimeoutS: Math.max(1, Math.ceil(leaseMs / 1000)) });
  } catch (error) {
    if (!(error instanceof CoordinatorConfigError)) throw error;
    const code = error.kind === "usage" ? ExitCode.USAGE : error.kind === "schema" ? ExitCode.DATA_ERROR : ExitCode.UNAVAILABLE;
    throw new CliError(error.message, code);
  }
}
