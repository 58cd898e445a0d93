/**
 * Option values without zod: the small hand parser the client commands'
 * tables (lockd run, status, the admin verbs, shard-of) are built from, and
 * the parse functions of every kind of value (durations, counts, addresses,
 * files, ...), which serve's zod schemas (values.ts) wrap. Measured with the
 * compiled binary (Bun 1.4): zod's classic API cost `lockd run NAME -- true`
 * about 3 ms of its 13; zod/mini, which serve uses, still about 1 ms of a
 * run that now takes 7.5 (docs/performance.md, Start-up).
 *
 * A schema here is anything with zod's `safeParse` shape (ValueSchema), so
 * parseOptions takes zod's and these alike.
 */
import { AddressError, parseAddressList } from "../../net/address.ts";
import { MAX_OWNER_LENGTH } from "../../protocol/constants.ts";
import { parseServerMap } from "../../shard/map.ts";

export interface ValueIssue {
  readonly message: string;
}

export type ValueResult<T> =
  | { readonly success: true; readonly data: T }
  | { readonly success: false; readonly error: { readonly issues: readonly ValueIssue[] } };

/** What parseOptions needs of a value's schema: a zod schema has it, and so has every textValue. */
export interface ValueSchema<T> {
  safeParse(text: string): ValueResult<T>;
}

/** The parsed type of a schema. */
export type ValueOf<S> = S extends ValueSchema<infer T> ? T : never;

/** A value that does not parse: its message is the problem shown after the flag's name. */
export class ValueProblem extends Error {
  override readonly name = "ValueProblem";
}

/**
 * The placeholder `--help` shows for a value of each kind (HOST:PORT,
 * DURATION, FILE, N, ...): set by the schema factories (here and in
 * values.ts), so an option built from them gets the right one without
 * saying so.
 */
const PLACEHOLDERS = new WeakMap<object, string>();

/** Record `placeholder` as the --help placeholder of `schema`; returns it. */
export function kind<T extends object>(placeholder: string, schema: T): T {
  PLACEHOLDERS.set(schema, placeholder);
  return schema;
}

/** The placeholder recorded for a schema, if any. */
export function placeholderOfSchema(schema: object): string | undefined {
  return PLACEHOLDERS.get(schema);
}

/** The --help placeholder of an option: its own, else its schema's, else VALUE. */
export function placeholderOf(spec: { readonly value?: string; readonly schema: object }): string {
  return spec.value ?? PLACEHOLDERS.get(spec.schema) ?? "VALUE";
}

/** The message of a value's problem: a ValueProblem or an AddressError (the address grammar's); anything else is a bug. */
export function problemOf(error: unknown): string {
  if (error instanceof ValueProblem || error instanceof AddressError) return error.message;
  throw error;
}

/** A schema from a parse function that throws ValueProblem (or AddressError) for a bad value. */
export function textValue<T>(placeholder: string, parse: (text: string) => T): ValueSchema<T> {
  return kind(placeholder, {
    safeParse(text: string): ValueResult<T> {
      try {
        return { success: true, data: parse(text) };
      } catch (error) {
        return { success: false, error: { issues: [{ message: problemOf(error) }] } };
      }
    },
  });
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * "250ms", "5s", "1.5s", "2m", "1h", "1d" in ms; NaN if malformed. A bare
 * number reads as ms here (the grammar of bench flags and tests); an option
 * refuses it (durationParser), since "5" might mean 5 s as well.
 */
export function parseDuration(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (match === null) return Number.NaN;
  return Math.round(Number(match[1]) * DURATION_UNITS[match[2] ?? "ms"]!);
}

/** Human form of a duration in ms, the inverse of parseDuration for round values. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of [["d", 86_400_000], ["h", 3_600_000], ["m", 60_000], ["s", 1000]] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

/** The unit spellings of a bare number that fall in min..max (only those: 5ms is no advice where 1s is the least). */
function spellings(number: string, min: number, max: number): string {
  const fits = [`${number}s`, `${number}ms`].filter((spelled) => {
    const ms = parseDuration(spelled);
    return ms >= min && ms <= max;
  });
  if (fits.length === 0) return `write a duration in ${formatDuration(min)}..${formatDuration(max)}`;
  return `write ${fits.join(" or ")}`;
}

/**
 * A duration option's value in ms, within min..max. It must name its unit:
 * a bare `5` is refused, naming both readings, since one user means 5 ms
 * and another 5 s (`--io-timeout 5` was once 5 ms, which cuts every client
 * of a real network; flock's `-w 5` is 5 s). `hint` adds a clause to that
 * refusal (lockd run -w: flock's reading).
 */
export function durationParser(min: number, max = Number.MAX_SAFE_INTEGER, hint = ""): (text: string) => number {
  return (text) => {
    const bare = /^\s*(\d+(?:\.\d+)?)\s*$/.exec(text);
    if (bare !== null) throw new ValueProblem(`"${bare[1]}" has no unit: ${spellings(bare[1]!, min, max)}${hint}`);
    const ms = parseDuration(text);
    if (Number.isNaN(ms)) throw new ValueProblem(`"${text}" is not a duration (examples: 250ms, 5s, 2m)`);
    if (ms < min || ms > max) throw new ValueProblem(`${text} is out of range ${formatDuration(min)}..${formatDuration(max)}`);
    return ms;
  };
}

/** A duration with its unit (durationParser): DURATION in --help. */
export const duration = (min: number, max = Number.MAX_SAFE_INTEGER, hint = "") => textValue("DURATION", durationParser(min, max, hint));

/** A whole number in min..max. */
export function countParser(min: number, max: number): (text: string) => number {
  return (text) => {
    const n = /^\s*\d+\s*$/.test(text) ? Number(text) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) throw new ValueProblem(`"${text}" is not a whole number in ${min}..${max}`);
    return n;
  };
}

export const count = (min: number, max: number) => textValue("N", countParser(min, max));

/** A file path that must name something; the file is read later. */
export function pathParser(text: string): string {
  if (text.trim() === "") throw new ValueProblem("an empty path");
  return text;
}

export const path = textValue("FILE", pathParser);

/** An admin token given inline: non-empty, no whitespace (it travels in an HTTP header). */
export function secretParser(text: string): string {
  if (!/^[\x21-\x7e]+$/.test(text)) throw new ValueProblem("the admin token must be non-empty printable ASCII without spaces");
  return text;
}

export const secret = textValue("TOKEN", secretParser);

/** An owner label: at most MAX_OWNER_LENGTH bytes of UTF-8 (the protocol's limit). */
export const ownerLabel = textValue("LABEL", (text) => {
  if (new TextEncoder().encode(text).length > MAX_OWNER_LENGTH) throw new ValueProblem(`owner must be at most ${MAX_OWNER_LENGTH} bytes of UTF-8`);
  return text;
});

/** Addresses to try in order: HOST:PORT[,HOST:PORT...] (the grammar is src/net/address.ts's). */
export const hostPortList = textValue("HOST:PORT[,...]", (text) => parseAddressList(text));

/** A server map: an address list (one shard), or [gen=N;]NAME=LIST;NAME=LIST (src/shard/map.ts). */
export const serverMap = textValue("HOST:PORT[,...]|MAP", (text) => parseServerMap(text));
