/**
 * Option values of `lockd serve` (and `lockd floor`) as zod schemas from
 * text. The parse functions of the kinds the client commands share
 * (durations, counts, files, tokens) are text.ts's, wrapped here, so a value
 * reads the same in every command; the client commands' tables use text.ts
 * alone, without loading zod. Each factory also sets the placeholder
 * `--help` shows for its kind.
 */
import { z } from "zod";
import { AddressError, isWildcardHost, parseAddress } from "../../net/address.ts";
import { isLogLevel, LOG_LEVEL_NAMES } from "../../log/logger.ts";
import { countParser, durationParser, kind, pathParser, placeholderOfSchema, problemOf, type ValueSchema } from "./text.ts";

export { formatDuration, parseDuration, placeholderOf } from "./text.ts";

/** A zod schema from one of text.ts's parse functions (which throw ValueProblem or AddressError). */
function fromText<T>(placeholder: string, parse: (text: string) => T) {
  return kind(
    placeholder,
    z.string().transform((text, ctx): T => {
      try {
        return parse(text);
      } catch (error) {
        ctx.addIssue({ code: "custom", message: problemOf(error) });
        return z.NEVER;
      }
    }),
  );
}

/** A duration that names its unit (text.ts's durationParser: a bare number is refused). */
export const duration = (min: number, max = Number.MAX_SAFE_INTEGER) => fromText("DURATION", durationParser(min, max));

export const count = (min: number, max: number) => fromText("N", countParser(min, max));

/** A file path that must name something; the file is read later. */
export const path = fromText("FILE", pathParser);


/**
 * An address others reach this instance by (--advertise-ops): HOST:PORT,
 * but never a wildcard (0.0.0.0, ::), which a listener may bind but no
 * other machine can connect to.
 */
export const advertisedAddress = fromText("HOST:PORT", (text) => {
  const address = parseAddress(text);
  if (isWildcardHost(address.host)) {
    throw new AddressError(
      `${JSON.stringify(text.trim())} is a wildcard address, which a listener binds but no other machine can reach: give the address or name others reach this instance's ops server by (example: 10.0.0.7:7701 or lockd-1.internal:7701)`,
      text,
    );
  }
  return address;
});

/** One address to listen on: HOST:PORT, [IPv6]:PORT, or :PORT (host 127.0.0.1); port 0 picks a free port. */
export const listenAddress = fromText("HOST:PORT", (text) => parseAddress(text, { allowPortZero: true }));

export const logLevel = kind("LEVEL", z.string().transform((text, ctx) => {
  const level = text.trim().toLowerCase();
  if (!isLogLevel(level)) {
    ctx.addIssue({ code: "custom", message: `"${text}" is not a log level (one of ${LOG_LEVEL_NAMES.join(", ")})` });
    return z.NEVER;
  }
  return level;
}));

/** "auto" (parsed as null: the caller decides), or a value of `schema`. */
export const autoOr = <T>(schema: ValueSchema<T> & object) =>
  kind(`${placeholderOfSchema(schema) ?? "VALUE"}|auto`, z.string().transform((text, ctx): T | null => {
    if (text.trim() === "auto") return null;
    const result = schema.safeParse(text);
    if (result.success) return result.data;
    for (const issue of result.error.issues) ctx.addIssue({ code: "custom", message: `${issue.message} (or auto)` });
    return z.NEVER;
  }));

/** "off" (parsed as null: no limit), or a value of `schema`. */
export const offOr = <T>(schema: ValueSchema<T> & object) =>
  kind(`${placeholderOfSchema(schema) ?? "VALUE"}|off`, z.string().transform((text, ctx): T | null => {
    if (text.trim() === "off") return null;
    const result = schema.safeParse(text);
    if (result.success) return result.data;
    for (const issue of result.error.issues) ctx.addIssue({ code: "custom", message: `${issue.message} (or off)` });
    return z.NEVER;
  }));

/** A coordinator URL: non-empty, no whitespace (its scheme is checked at start). */
export const coordinatorUrl = kind("URL", z.string().transform((text, ctx) => {
  if (!/^\S+$/.test(text)) {
    ctx.addIssue({ code: "custom", message: "the coordinator URL must be non-empty, without spaces (example: postgres://lockd@db.internal:5432/lockd)" });
    return z.NEVER;
  }
  return text;
}));

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

/** A service name: 1..255 printable ASCII characters. */
export const serviceName = kind("NAME", z.string().refine((text) => /^[\x21-\x7e]{1,255}$/.test(text), "a service name is 1 to 255 printable ASCII characters without spaces"));
