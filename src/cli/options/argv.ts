/**
 * The argv parser: a command's option table (one OptionSpec per option) is
 * the single source of truth for its flags, LOCKD_* environment variables,
 * defaults, help text and validation. Precedence: flag, then environment,
 * then default. Every bad value is reported, one line each, naming where it
 * came from, before anything starts.
 */
import { ConfigError } from "../errors.ts";
import { placeholderOf, type ValueOf, type ValueSchema } from "./text.ts";

export interface OptionSpec {
  /** --flag */
  readonly flag: string;
  /** LOCKD_* variable, if the option can come from the environment. */
  readonly env?: string;
  /** Default as the user would type it; undefined when there is none. */
  readonly default?: string;
  readonly help: string;
  /** How the text is parsed: a zod schema (serve's, values.ts) or a text.ts one (client commands'). */
  readonly schema: ValueSchema<unknown> & object;
  /** Placeholder in --help (default: the schema's kind, e.g. DURATION). */
  readonly value?: string;
}

export type OptionTable = Record<string, OptionSpec>;

/** The parsed value of every option of a table. */
export type Options<T extends OptionTable> = {
  -readonly [K in keyof T]: T[K]["default"] extends string ? ValueOf<T[K]["schema"]> : ValueOf<T[K]["schema"]> | undefined;
};

export { ConfigError };

export interface Parsed<T extends OptionTable> {
  readonly options: Options<T>;
  /** Arguments that are not options, in order (everything after `--` included). */
  readonly positionals: string[];
  readonly help: boolean;
  /** Where each option's value came from. */
  readonly sources: Record<keyof T, OptionSource>;
}

export type OptionSource = "flag" | "env" | "default" | "unset";

/**
 * Parse `argv` (flags as `--flag value` or `--flag=value`) and `env` against
 * `table`. Boolean flags are those in `switches`. Throws ConfigError listing
 * every problem.
 */
export function parseOptions<T extends OptionTable>(
  table: T,
  argv: readonly string[],
  env: Record<string, string | undefined>,
  switches: Record<string, string> = {},
): Parsed<T> & { switches: Set<string> } {
  const byFlag = new Map<string, string>();
  for (const [key, spec] of Object.entries(table)) byFlag.set(spec.flag, key);
  const raw = new Map<string, { value: string; from: string }>();
  const positionals: string[] = [];
  const on = new Set<string>();
  const problems: string[] = [];
  let help = false;

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg === "-h" || arg === "--help") {
      help = true;
      continue;
    }
    if (switches[arg] !== undefined) {
      on.add(switches[arg]);
      continue;
    }
    if (!arg.startsWith("-") || arg === "-") {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const key = byFlag.get(flag);
    if (key === undefined) {
      problems.push(`unknown option ${flag}`);
      continue;
    }
    let value: string | undefined;
    if (eq > 0) value = arg.slice(eq + 1);
    else if (i + 1 < argv.length && !looksLikeFlag(argv[i + 1]!)) value = argv[++i];
    if (value === undefined) {
      problems.push(`${flag} needs a value (write ${flag}=${placeholderOf(table[key]!)} for one that starts with -)`);
      continue;
    }
    raw.set(key, { value, from: flag });
  }

  const options: Record<string, unknown> = {};
  const sources: Record<string, OptionSource> = {};
  for (const [key, spec] of Object.entries(table)) {
    let source = raw.get(key);
    const fromEnv = spec.env === undefined ? undefined : env[spec.env];
    if (source === undefined && fromEnv !== undefined && fromEnv !== "") source = { value: fromEnv, from: spec.env! };
    if (source === undefined && spec.default !== undefined) source = { value: spec.default, from: "default" };
    sources[key] = source === undefined ? "unset" : source.from === spec.flag ? "flag" : source.from === "default" ? "default" : "env";
    if (source === undefined) {
      options[key] = undefined;
      continue;
    }
    const result = spec.schema.safeParse(source.value);
    if (result.success) options[key] = result.data;
    else for (const issue of result.error.issues) problems.push(`${source.from === spec.flag ? spec.flag : `${spec.flag} (from ${source.from})`}: ${issue.message}`);
  }
  if (problems.length > 0 && !help) throw new ConfigError(problems);
  return { options: options as Options<T>, positionals, help, switches: on, sources: sources as Record<keyof T, OptionSource> };
}

/** `--wait -n`: the next argument is another flag, not this one's value. */
function looksLikeFlag(arg: string): boolean {
  return arg.length > 1 && arg.startsWith("-") && !/^-\d/.test(arg);
}
