/**
 * Option values of `lockd serve` (and `lockd floor`) as zod schemas from
 * text. The parse functions of the kinds the client commands share
 * (durations, counts, files) are text.ts's, wrapped here, so a value reads
 * the same in every command; the client commands' tables use text.ts
 * alone, without loading zod. Each factory also sets the placeholder
 * `--help` shows for its kind.
 *
 * zod/mini, zod's functional API: the same schemas and safeParse, and a
 * fraction of the classic API's load time, which every start of the server
 * pays (compiled, Bun 1.4: classic about 2-4 ms, mini under 1 ms).
 */
import { z } from "zod/mini";
import { AddressError, isWildcardHost, parseAddress } from "../../net/address.ts";
import { isLogLevel, LOG_LEVEL_NAMES } from "../../log/logger.ts";
import { countParser, durationParser, kind, pathParser, placeholderOfSchema, problemOf, type ValueSchema } from "./text.ts";

export { formatDuration, parseDuration, placeholderOf } from "./text.ts";

/** The string schema every option's pipe starts from: one instance (zod schemas are immutable), built once per start, not once per option. */
const TEXT = z.string();

/**
 * A schema from text: `parse` returns the value, or calls `fail` with the
 * problem (its result is zod's NEVER, to return).
 */
function textSchema<T>(placeholder: string, parse: (text: string, fail: (message: string) => never) => T) {
  return kind(
    placeholder,
    z.pipe(
      TEXT,
      z.transform((text: string, ctx): T => {
        const fail = (message: string): never => {
          ctx.issues.push({ code: "custom", message, input: text });
          return z.NEVER;
        };
        return parse(text, fail);
      }),
    ),
  );
}

/** A zod schema from one of text.ts's parse functions (which throw ValueProblem or AddressError). */
function fromText<T>(placeholder: string, parse: (text: string) => T) {
  return textSchema(placeholder, (text, fail): T => {
    try {
      return parse(text);
    } catch (error) {
      return fail(problemOf(error));
    }
  });
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

export const logLevel = textSchema("LEVEL", (text, fail) => {
  const level = text.trim().toLowerCase();
  return isLogLevel(level) ? level : fail(`"${text}" is not a log level (one of ${LOG_LEVEL_NAMES.join(", ")})`);
});

/** "auto" (parsed as null: the caller decides), or a value of `schema`. */
export const autoOr = <T>(schema: ValueSchema<T> & object) => keywordOr("auto", schema);

/** `word` (parsed as null), or a value of `schema`, whose problems get "(or WORD)". */
function keywordOr<T>(word: string, schema: ValueSchema<T> & object) {
  return textSchema(`${placeholderOfSchema(schema) ?? "VALUE"}|${word}`, (text, fail): T | null => {
    if (text.trim() === word) return null;
    const result = schema.safeParse(text);
    return result.success ? result.data : fail(result.error.issues.map((issue) => `${issue.message} (or ${word})`).join("; "));
  });
}

/** "off" (parsed as null: no limit), or a value of `schema`. */
export const offOr = <T>(schema: ValueSchema<T> & object) => keywordOr("off", schema);

/** A coordinator URL: non-empty, no whitespace (its scheme is checked at start). */
export const coordinatorUrl = textSchema("URL", (text, fail) =>
  /^\S+$/.test(text) ? text : fail("the coordinator URL must be non-empty, without spaces (example: postgres://lockd@db.internal:5432/lockd)"),
);

/** DNS names, comma-separated (an ops server's allowed Host names). */
export const hostNames = textSchema("NAME[,...]", (text, fail) => {
  const names = text.split(",").map((name) => name.trim()).filter((name) => name !== "");
  const bad = names.find((name) => !/^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$/.test(name));
  return bad === undefined ? names : fail(`${JSON.stringify(bad)} is not a DNS name (example: lockd.internal,ops.example.com)`);
});

/** A service name: 1..255 printable ASCII characters. */
export const serviceName = kind("NAME", z.string().check(z.refine((text: string) => /^[\x21-\x7e]{1,255}$/.test(text), "a service name is 1 to 255 printable ASCII characters without spaces")));
