/**
 * Option values: how each kind of value is written (durations, addresses,
 * counts, log levels, files, ...) and parsed, as zod schemas from text.
 * Each factory also sets the placeholder `--help` shows for its kind.
 */
import { z } from "zod";
import { AddressError, parseAddress, parseAddressList } from "../../net/address.ts";
import { parseServerMap } from "../../shard/map.ts";
import { isLogLevel, LOG_LEVEL_NAMES } from "../../log/logger.ts";
import { isWildcardHost } from "../../net/address.ts";
import { MAX_OWNER_LENGTH } from "../../protocol/constants.ts";
import type { OptionSpec } from "./argv.ts";

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "250ms", "5s", "1.5s", "2m", "1h", "1d", or a bare number of ms. NaN if malformed. */
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

/**
 * The placeholder `--help` shows for a value of each kind (HOST:PORT,
 * DURATION, FILE, N, ...): set by the schema factories below, so an option
 * built from them gets the right one without saying so.
 */
const PLACEHOLDERS = new WeakMap<z.ZodType<unknown, string>, string>();

function kind<T extends z.ZodType<unknown, string>>(placeholder: string, schema: T): T {
  PLACEHOLDERS.set(schema, placeholder);
  return schema;
}

/** The --help placeholder of an option: its own, else its schema's, else VALUE. */
export function placeholderOf(spec: OptionSpec): string {
  return spec.value ?? PLACEHOLDERS.get(spec.schema) ?? "VALUE";
}

/** `text` as ms within min..max; an issue on `ctx` (and z.NEVER) otherwise. */
function durationIn(text: string, min: number, max: number, ctx: z.RefinementCtx): number {
  const ms = parseDuration(text);
  if (Number.isNaN(ms)) {
    ctx.addIssue({ code: "custom", message: `"${text}" is not a duration (examples: 250ms, 5s, 2m)` });
    return z.NEVER;
  }
  if (ms < min || ms > max) {
    ctx.addIssue({ code: "custom", message: `${text} is out of range ${formatDuration(min)}..${formatDuration(max)}` });
    return z.NEVER;
  }
  return ms;
}

export const duration = (min: number, max = Number.MAX_SAFE_INTEGER) => kind("DURATION", z.string().transform((text, ctx) => durationIn(text, min, max, ctx)));

/**
 * A duration that must name its unit: for `lockd run -w`, flock(1)'s
 * letter, where flock counts seconds. A bare `-w 5` meant 5 ms here where a
 * user of flock meant 5 s; neither guess is safe, so it is refused.
 */
export const durationWithUnit = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  kind("DURATION", z.string().transform((text, ctx) => {
    const bare = /^\s*(\d+(?:\.\d+)?)\s*$/.exec(text);
    if (bare !== null) {
      ctx.addIssue({ code: "custom", message: `"${bare[1]}" has no unit: write ${bare[1]}s or ${bare[1]}ms (flock's -w counts seconds, a bare lockd duration milliseconds: neither is guessed here)` });
      return z.NEVER;
    }
    return durationIn(text, min, max, ctx);
  }));

function addressSchema<T>(placeholder: string, parse: (text: string) => T) {
  return kind(
    placeholder,
    z.string().transform((text, ctx): T => {
      try {
        return parse(text);
      } catch (error) {
        if (!(error instanceof AddressError)) throw error;
        ctx.addIssue({ code: "custom", message: error.message });
        return z.NEVER;
      }
    }),
  );
}

/** One address to connect to: HOST:PORT, [IPv6]:PORT, or :PORT (host 127.0.0.1). */
export const hostPort = addressSchema("HOST:PORT", (text) => parseAddress(text));

/**
 * An address others reach this instance by (--advertise-ops): as hostPort,
 * but never a wildcard (0.0.0.0, ::), which a listener may bind but no
 * other machine can connect to.
 */
export const advertisedAddress = addressSchema("HOST:PORT", (text) => {
  const address = parseAddress(text);
  if (isWildcardHost(address.host)) {
    throw new AddressError(
      `${JSON.stringify(text.trim())} is a wildcard address, which a listener binds but no other machine can reach: give the address or name others reach this instance's ops server by (example: 10.0.0.7:7701 or lockd-1.internal:7701)`,
      text,
    );
  }
  return address;
});

/** One address to listen on: as hostPort, and port 0 picks a free port. */
export const listenAddress = addressSchema("HOST:PORT", (text) => parseAddress(text, { allowPortZero: true }));

/** Addresses to try in order: HOST:PORT[,HOST:PORT...]. */
export const hostPortList = addressSchema("HOST:PORT[,...]", (text) => parseAddressList(text));

/** A server map: an address list (one shard), or [gen=N;]NAME=LIST;NAME=LIST (src/net/address.ts). */
export const serverMap = addressSchema("HOST:PORT[,...]|MAP", (text) => parseServerMap(text));

export const count = (min: number, max: number) =>
  kind("N", z.string().transform((text, ctx) => {
    const n = /^\s*\d+\s*$/.test(text) ? Number(text) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      ctx.addIssue({ code: "custom", message: `"${text}" is not a whole number in ${min}..${max}` });
      return z.NEVER;
    }
    return n;
  }));

export const logLevel = kind("LEVEL", z.string().transform((text, ctx) => {
  const level = text.trim().toLowerCase();
  if (!isLogLevel(level)) {
    ctx.addIssue({ code: "custom", message: `"${text}" is not a log level (one of ${LOG_LEVEL_NAMES.join(", ")})` });
    return z.NEVER;
  }
  return level;
}));

/** "auto" (parsed as null: the caller decides), or a value of `schema`. */
export const autoOr = <T>(schema: z.ZodType<T, string>) =>
  kind(`${PLACEHOLDERS.get(schema) ?? "VALUE"}|auto`, z.string().transform((text, ctx): T | null => {
    if (text.trim() === "auto") return null;
    const result = schema.safeParse(text);
    if (result.success) return result.data;
    for (const issue of result.error.issues) ctx.addIssue({ code: "custom", message: `${issue.message} (or auto)` });
    return z.NEVER;
  }));

/** "off" (parsed as null: no limit), or a value of `schema`. */
export const offOr = <T>(schema: z.ZodType<T, string>) =>
  kind(`${PLACEHOLDERS.get(schema) ?? "VALUE"}|off`, z.string().transform((text, ctx): T | null => {
    if (text.trim() === "off") return null;
    const result = schema.safeParse(text);
    if (result.success) return result.data;
    for (const issue of result.error.issues) ctx.addIssue({ code: "custom", message: `${issue.message} (or off)` });
    return z.NEVER;
  }));

/** An admin token given inline: non-empty, no whitespace (it travels in an HTTP header). */
export const secret = kind("TOKEN", z.string().transform((text, ctx) => {
  if (!/^[\x21-\x7e]+$/.test(text)) {
    ctx.addIssue({ code: "custom", message: "the admin token must be non-empty printable ASCII without spaces" });
    return z.NEVER;
  }
  return text;
}));

/** A file path that must name something; the file is read later. */
export const path = kind("FILE", z.string().transform((text, ctx) => {
  if (text.trim() === "") {
    ctx.addIssue({ code: "custom", message: "an empty path" });
    return z.NEVER;
  }
  return text;
}));

/** An owner label: at most MAX_OWNER_LENGTH bytes of UTF-8 (the protocol's limit). */
export const ownerLabel = kind("LABEL", z.string().refine((text) => new TextEncoder().encode(text).length <= MAX_OWNER_LENGTH, `owner must be at most ${MAX_OWNER_LENGTH} bytes of UTF-8`));

/** A coordinator URL: non-empty, no whitespace (its scheme is checked at start). */
export const coordinatorUrl = kind("URL", z.string().transform((text, ctx) => {
  if (!/^\S+$/.test(text)) {
    ctx.addIssue({ code: "custom", message: "the coordinator URL must be non-empty, without spaces (example: postgres://lockd@db.internal:5432/lockd)" });
    return z.NEVER;
  }
  return text;
}));

/** A service name: 1..255 printable ASCII characters. */
/** DNS names, comma-separated (an ops server's allowed Host names). */
export const hostNames = kind("NAME[,...]", z.string().transform((text, ctx) => {
  const names = text.split(",").map((name) => name.trim()).filter((name) => name !== "");
  const bad = names.find((name) => !/^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$/.test(name));
  if (bad !== undefined) {
    ctx.addIssue({ code: "custom", message: `${JSON.stringify(bad)} is not a DNS name (example: lockd.internal,ops.example.com)` });
    return z.NEVER;
  }
  return names;
}));

export const serviceName = kind("NAME", z.string().refine((text) => /^[\x21-\x7e]{1,255}$/.test(text), "a service name is 1 to 255 printable ASCII characters without spaces"));
