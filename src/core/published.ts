/**
 * The published set of a clean stop with reclaim on (protocol.md section
 * 14): every reclaimable grant at the stop, by name, as
 * [token, slot, limit, leaseMs]. A single server keeps it in its data
 * directory's lease record (tokens/leases.ts), a coordinated service in its
 * coordinator row (failover/store.ts), in this one JSON form; the next
 * server reads it back with `isPublished` and hands the engine
 * `publishedEntries`.
 */
import type { ReclaimEntry } from "./engine.ts";

/** A clean stop's reclaimable grants: each name with its grants as [token, slot, limit, leaseMs]. */
export type PublishedReclaims = ReadonlyArray<readonly [string, ReadonlyArray<readonly [number, number, number, number]>]>;

/** A safe integer. */
export const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v);

/** Whether `value` is a well-formed published set (anything else is not honoured). */
export function isPublished(value: unknown): value is PublishedReclaims {
  return (
    Array.isArray(value) &&
    value.every(
      (e) =>
        Array.isArray(e) &&
        e.length === 2 &&
        typeof e[0] === "string" &&
        Array.isArray(e[1]) &&
        (e[1] as unknown[]).every((g) => Array.isArray(g) && g.length === 4 && g.every(isCount) && (g as number[])[0]! >= 1 && (g as number[])[1]! >= -2 && (g as number[])[2]! >= 1 && (g as number[])[3]! >= 0),
    )
  );
}

/** The engine's form of a published set. */
export function publishedEntries(published: PublishedReclaims): Map<string, ReclaimEntry[]> {
  return new Map(published.map(([name, grants]) => [name, grants.map(([token, slot, limit, leaseMs]) => ({ token, slot, limit, leaseMs }))]));
}

/** The record's form of an engine's reclaimable grants (Engine.reclaimableGrants). */
export function recordOf(grants: ReadonlyMap<string, readonly ReclaimEntry[]>): PublishedReclaims {
  return [...grants].map(([name, entries]) => [name, entries.map((e) => [e.token, e.slot, e.limit, e.leaseMs] as const)] as const);
}


