/**
 * LeasesFile: what a single server keeps in its data directory so that the
 * next start on it grants no name while a holder of this run may still
 * believe it holds it (the lock-delay, core/delay.ts).
 *
 * `<data-dir>/leases` is one line, `lockd-leases v1 <json> crc=<crc32 hex>`,
 * replaced like the token floor (write a temp file, fsync, rename, fsync the
 * directory). The JSON holds:
 *
 * - `maxLeaseMs`: the largest lease this run granted or may grant without
 *   another write. Raised before a grant whose lease it does not cover (one
 *   synchronous write, rounded up so that a lifetime sees few: delay.ts
 *   roundLease), never lowered during a run.
 * - `carryLeaseMs`: the largest lease of earlier runs whose holders may still
 *   believe; cleared once this run's own delay is over.
 * - `clean`: false from the start of a run until its clean stop.
 * - `held`: written by a clean stop: each name held at that moment with its
 *   holder's lease ("*" when there were too many to list).
 * - `reclaimMaxLeaseMs` (reclaim, protocol.md section 14): the largest cap M
 *   any run on this directory had; never lowered. Absent: never on.
 * - `reclaim`: written by a clean stop with reclaim on, with `held`: every
 *   reclaimable grant at that moment, by name, as [token, slot, limit,
 *   lease]. Absent: none published (reclaim off, too many, or no clean stop
 *   since: `start` clears it, so a crash after a start leaves none).
 *
 * At start: a run that did not stop cleanly (a crash, SIGKILL, power loss)
 * leaves `clean: false`, and every name waits 0.8 x the largest lease from
 * this start; after a clean stop only the published names wait, each for
 * its own holder's lease. The state is marked not clean (`start`) before
 * the first grant. Writes happen under the data directory's lock, which the
 * token store (file.ts) holds.
 *
 * Reclaim: the run's M is the larger of its flag and the recorded one (a
 * holder granted under the larger cap may reclaim at the next start). A
 * start after a clean stop that published grants accepts their reclaims
 * (the engine's `reclaim.published`) only if every published name is held
 * back for at least 0.8 x its grant's lease; reclaimed holders are this
 * run's holders, so a lease covering any reclaim (M, rounded up) is durable
 * from the start (a crash later still waits for them). A run with reclaim off still
 * accepts the reclaims its predecessor published (those holders were told
 * the next run accepts them), and publishes none at its own stop.
 */
import { readFileSync } from "node:fs";
import { crc, replaceDurably } from "./durable.ts";
import { join } from "node:path";
import { CLIENT_GIVE_UP_SHARE, delayFor, type HeldSet, LockDelay, roundLease } from "../core/delay.ts";
import type { ReclaimEntry } from "../core/engine.ts";
import { isCount, isPublished, type PublishedReclaims, publishedEntries, recordOf } from "../core/published.ts";
import { TokenStoreError } from "./file.ts";

const FILE = "leases";
const FORMAT = /^lockd-leases v1 (.*) crc=([0-9a-f]{8})\n?$/s;

/** The file's content. */
export interface LeaseState {
  readonly maxLeaseMs: number;
  readonly carryLeaseMs: number;
  readonly clean: boolean;
  readonly held: HeldSet | null;
  /** The largest reclaim cap M (ms) a run on this directory had; absent: reclaim never on. */
  readonly reclaimMaxLeaseMs?: number;
  /** The reclaimable grants a clean stop published, by name; absent: none. */
  readonly reclaim?: PublishedReclaims;
}


/** What this run does about reclaim, from its flag and the last run's record. */
export interface ReclaimPlan {
  /** The engine's cap M (ms); null: reclaim off in this run (no flag, nothing published to honour). */
  readonly maxLeaseMs: number | null;
  /** The flag's value when the recorded M is larger and used instead; null otherwise. */
  readonly requestedMs: number | null;
  /** This run's clean stop publishes its reclaimable grants (the flag is on). */
  readonly publishes: boolean;
  /** The grants the last clean stop published, by name, whose reclaims this run accepts (empty: none). */
  readonly published: ReadonlyMap<string, readonly ReclaimEntry[]>;
  /** Grants in `published`. */
  readonly grants: number;
  /** Monotonic ms when the last published name stops being held back: the end of the grace (0: no grace). */
  readonly graceEndsAt: number;
  /**
   * Why a published set is not honoured: "not-held-back" (a published name
   * is not held back for 0.8 x its grant's lease: a record this lockd would
   * not write). Null: honoured, or none published.
   */
  readonly dropped: "not-held-back" | null;
}

function isHeld(value: unknown): value is HeldSet {
  return value === "*" || (Array.isArray(value) && value.every((e) => Array.isArray(e) && e.length === 2 && typeof e[0] === "string" && typeof e[1] === "number" && e[1] >= 0));
}

/** Read `<dir>/leases`: null when there is none (a new directory, or one an older lockd wrote). Throws TokenStoreError when it is corrupt. */
export function readLeases(dir: string): LeaseState | null {
  const path = join(dir, FILE);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new TokenStoreError(`cannot read ${path}: ${(error as Error).message}`, { cause: error });
  }
  const match = FORMAT.exec(text);
  let state: LeaseState | null = null;
  if (match !== null && crc(`lockd-leases v1 ${match[1]}`) === match[2]) {
    try {
      const value = JSON.parse(match[1]!) as Record<string, unknown>;
      const { maxLeaseMs, carryLeaseMs, clean, held, reclaimMaxLeaseMs, reclaim } = value;
      if (
        typeof maxLeaseMs === "number" && maxLeaseMs >= 0 && typeof carryLeaseMs === "number" && carryLeaseMs >= 0 && typeof clean === "boolean" && (held === null || isHeld(held)) &&
        (reclaimMaxLeaseMs === undefined || (isCount(reclaimMaxLeaseMs) && reclaimMaxLeaseMs >= 1)) &&
        (reclaim === undefined || isPublished(reclaim))
      ) {
        state = {
          maxLeaseMs,
          carryLeaseMs,
          clean,
          held,
          ...(reclaimMaxLeaseMs === undefined ? {} : { reclaimMaxLeaseMs }),
          ...(reclaim === undefined ? {} : { reclaim }),
        };
      }
    } catch {
      state = null;
    }
  }
  if (state === null) {
    throw new TokenStoreError(
      `the lease record ${path} is corrupt (${JSON.stringify(text.slice(0, 80))}); refusing to start, since holders of the last run may still believe they hold their locks. ` +
        `Wait until 0.8 x the longest lease your clients use has passed since the last server stopped, then delete the file ` +
        `(see docs/operations.md, "Fencing tokens and the data directory").`,
      undefined,
      "corrupt",
    );
  }
  return state;
}

/** Durably replace `<dir>/leases`. Throws TokenStoreError. */
export function writeLeases(dir: string, state: LeaseState): void {
  const path = join(dir, FILE);
  const body = `lockd-leases v1 ${JSON.stringify(state)}`;
  try {
    replaceDurably(dir, path, `${body} crc=${crc(body)}\n`);
  } catch (error) {
    throw new TokenStoreError(`cannot write the lease record ${path}: ${(error as Error).message}`, { cause: error });
  }
}

/** The delay a start owes the run before it, from that run's state (null: none recorded). */
export function startDelay(previous: LeaseState | null): { readonly everyNameMs: number; readonly names: ReadonlyArray<readonly [string, number]>; readonly carryLeaseMs: number; readonly clean: boolean } {
  if (previous === null) return { everyNameMs: 0, names: [], carryLeaseMs: 0, clean: true };
  if (!previous.clean || previous.held === null || previous.held === "*") {
    const largest = Math.max(previous.maxLeaseMs, previous.carryLeaseMs);
    return { everyNameMs: delayFor(largest), names: [], carryLeaseMs: largest, clean: previous.clean };
  }
  let heldMax = 0;
  for (const [, lease] of previous.held) if (lease > heldMax) heldMax = lease;
  return {
    everyNameMs: delayFor(previous.carryLeaseMs),
    names: previous.held.map(([name, lease]) => [name, delayFor(lease)] as const),
    carryLeaseMs: Math.max(previous.carryLeaseMs, heldMax),
    clean: true,
  };
}

/** Reclaim's setting for a run: --reclaim-max-lease in ms, or null (off). */
export interface ReclaimSetting {
  readonly maxLeaseMs: number | null;
}

/**
 * What a run does about reclaim (see the top of this file): its M, and the
 * published grants it accepts, checked against the delay each published
 * name is held back for (`heldBackMs`, ms from the start).
 */
export function reclaimPlan(previous: LeaseState | null, setting: ReclaimSetting, heldBackMs: (name: string) => number, now: number): ReclaimPlan {
  const recorded = previous?.reclaimMaxLeaseMs ?? null;
  const flag = setting.maxLeaseMs;
  // Only a clean stop's set: `start` clears it, so a set in a record that is not clean was never written by this lockd.
  const candidate = previous !== null && previous.clean && previous.reclaim !== undefined && previous.reclaim.length > 0 ? previous.reclaim : null;
  let dropped: ReclaimPlan["dropped"] = null;
  let published = new Map<string, ReclaimEntry[]>();
  let grants = 0;
  let graceMs = 0;
  if (candidate !== null) {
    for (const [name, entries] of candidate) {
      const wait = heldBackMs(name);
      for (const [, , , leaseMs] of entries) {
        if (wait < CLIENT_GIVE_UP_SHARE * leaseMs) dropped = "not-held-back";
        grants++;
      }
      if (wait > graceMs) graceMs = wait;
    }
    if (dropped === null) published = publishedEntries(candidate);
    else {
      grants = 0;
      graceMs = 0;
    }
  }
  // M: the larger of the flag and the record; with the flag off, the record's only to honour what was published.
  const maxLeaseMs = flag !== null ? Math.max(flag, recorded ?? 0) : grants > 0 ? recorded : null;
  return {
    maxLeaseMs,
    requestedMs: flag !== null && recorded !== null && recorded > flag ? flag : null,
    publishes: flag !== null,
    published,
    grants,
    graceEndsAt: grants > 0 ? now + graceMs : 0,
    dropped,
  };
}

export class LeasesFile {
  /** The lock-delay this run owes the last one, and the durable largest lease. */
  readonly delay: LockDelay;
  /** What this run does about reclaim. */
  readonly reclaim: ReclaimPlan;
  private maxLeaseMs = 0;
  private carryLeaseMs: number;
  /** The largest reclaim cap recorded (0: never on). */
  private readonly reclaimMaxLeaseMs: number;
  private started = false;

  private constructor(
    readonly dir: string,
    readonly previous: LeaseState | null,
    now: number,
    private readonly onFatal: (error: TokenStoreError) => never,
    setting: ReclaimSetting,
  ) {
    const owed = startDelay(previous);
    this.carryLeaseMs = owed.carryLeaseMs;
    const names = new Map(owed.names);
    this.reclaim = reclaimPlan(previous, setting, (name) => Math.max(owed.everyNameMs, names.get(name) ?? 0), now);
    this.reclaimMaxLeaseMs = Math.max(previous?.reclaimMaxLeaseMs ?? 0, this.reclaim.maxLeaseMs ?? 0);
    // Reclaimed holders are this run's: their leases are durable before the first grant (start), as a grant's would be.
    // A reclaim's lease is bounded by M (the engine refuses one above it), not by the published lease: M is what is made durable.
    this.maxLeaseMs = this.reclaim.grants > 0 && this.reclaim.maxLeaseMs !== null ? roundLease(this.reclaim.maxLeaseMs) : 0;
    this.delay = new LockDelay({
      why: owed.clean ? "clean-restart" : "restart",
      until: now + owed.everyNameMs,
      names: new Map(owed.names.map(([name, ms]) => [name, now + ms])),
      durableMaxMs: this.maxLeaseMs,
      raise: (leaseMs) => this.raise(leaseMs),
    });
  }

  /**
   * Read the last run's record in `dir` (which the caller has locked) and
   * work out what this run owes it, counted from `now` (monotonic ms), and
   * what it does about reclaim (`reclaim`: the flag; omitted: off).
   * Writes nothing: `start` does. Throws TokenStoreError.
   */
  static open(dir: string, now: number, onFatal: (error: TokenStoreError) => never, reclaim: ReclaimSetting = { maxLeaseMs: null }): LeasesFile {
    return new LeasesFile(dir, readLeases(dir), now, onFatal, reclaim);
  }

  /** Mark this run not clean, carrying what the last run's holders may rely on. Before the first grant. Throws TokenStoreError. */
  start(): void {
    writeLeases(this.dir, this.state(false, null, null));
    this.started = true;
  }

  /** The delay is over: nothing of earlier runs is relied on any more. */
  delayOver(): void {
    if (this.carryLeaseMs === 0 || !this.started) return;
    this.carryLeaseMs = 0;
    this.write(this.state(false, null, null));
  }

  /**
   * A clean stop: publish the names held at the stop (`held`), so that the
   * next start holds back only those, and (`reclaim`, only when
   * `reclaim.publishes`) the reclaimable grants whose reclaims it accepts.
   * One durable write; throws TokenStoreError. Written before any session
   * hears of the stop: a holder told to reclaim is in the record.
   */
  close(held: HeldSet, reclaim: ReadonlyMap<string, readonly ReclaimEntry[]> | null = null): void {
    if (!this.started) return;
    let maxLeaseMs = this.maxLeaseMs;
    if (held !== "*") {
      maxLeaseMs = 0;
      for (const [, lease] of held) if (lease > maxLeaseMs) maxLeaseMs = lease;
    }
    this.maxLeaseMs = maxLeaseMs;
    writeLeases(this.dir, this.state(true, held, reclaim !== null && this.reclaim.publishes ? recordOf(reclaim) : null));
  }
  /** The grant path's write (LockDelay.covers): once per new, rounded-up largest lease. */
  private raise(leaseMs: number): boolean {
    const before = this.maxLeaseMs;
    this.maxLeaseMs = Math.max(before, leaseMs);
    if (this.started) this.write(this.state(false, null, null));
    return true;
  }

  private write(state: LeaseState): void {
    try {
      writeLeases(this.dir, state);
    } catch (error) {
      this.onFatal(error as TokenStoreError);
    }
  }

  private state(clean: boolean, held: HeldSet | null, reclaim: PublishedReclaims | null): LeaseState {
    return {
      maxLeaseMs: this.maxLeaseMs,
      carryLeaseMs: this.carryLeaseMs,
      clean,
      held,
      ...(this.reclaimMaxLeaseMs === 0 ? {} : { reclaimMaxLeaseMs: this.reclaimMaxLeaseMs }),
      ...(reclaim === null ? {} : { reclaim }),
    };
  }
}
