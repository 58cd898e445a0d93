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
 *
 * At start: a run that did not stop cleanly (a crash, SIGKILL, power loss)
 * leaves `clean: false`, and every name waits 0.8 x the largest lease from
 * this start; after a clean stop only the published names wait, each for
 * its own holder's lease. The state is marked not clean (`start`) before
 * the first grant. Writes happen under the data directory's lock, which the
 * token store (file.ts) holds.
 */
import { readFileSync } from "node:fs";
import { crc, replaceDurably } from "./durable.ts";
import { join } from "node:path";
import { delayFor, type HeldSet, LockDelay } from "../core/delay.ts";
import { TokenStoreError } from "./file.ts";

const FILE = "leases";
const FORMAT = /^lockd-leases v1 (.*) crc=([0-9a-f]{8})\n?$/s;

/** The file's content. */
export interface LeaseState {
  readonly maxLeaseMs: number;
  readonly carryLeaseMs: number;
  readonly clean: boolean;
  readonly held: HeldSet | null;
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
      const { maxLeaseMs, carryLeaseMs, clean, held } = value;
      if (typeof maxLeaseMs === "number" && maxLeaseMs >= 0 && typeof carryLeaseMs === "number" && carryLeaseMs >= 0 && typeof clean === "boolean" && (held === null || isHeld(held))) {
        state = { maxLeaseMs, carryLeaseMs, clean, held };
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

export class LeasesFile {
  /** The lock-delay this run owes the last one, and the durable largest lease. */
  readonly delay: LockDelay;
  private maxLeaseMs = 0;
  private carryLeaseMs: number;
  private started = false;

  private constructor(
    readonly dir: string,
    readonly previous: LeaseState | null,
    now: number,
    private readonly onFatal: (error: TokenStoreError) => never,
  ) {
    const owed = startDelay(previous);
    this.carryLeaseMs = owed.carryLeaseMs;
    this.delay = new LockDelay({
      why: owed.clean ? "clean-restart" : "restart",
      until: now + owed.everyNameMs,
      names: new Map(owed.names.map(([name, ms]) => [name, now + ms])),
      durableMaxMs: 0,
      raise: (leaseMs) => this.raise(leaseMs),
    });
  }

  /**
   * Read the last run's record in `dir` (which the caller has locked) and
   * work out what this run owes it, counted from `now` (monotonic ms).
   * Writes nothing: `start` does. Throws TokenStoreError.
   */
  static open(dir: string, now: number, onFatal: (error: TokenStoreError) => never): LeasesFile {
    return new LeasesFile(dir, readLeases(dir), now, onFatal);
  }

  /** Mark this run not clean, carrying what the last run's holders may rely on. Before the first grant. Throws TokenStoreError. */
  start(): void {
    writeLeases(this.dir, this.state(false, null));
    this.started = true;
  }

  /** The delay is over: nothing of earlier runs is relied on any more. */
  delayOver(): void {
    if (this.carryLeaseMs === 0 || !this.started) return;
    this.carryLeaseMs = 0;
    this.write(this.state(false, null));
  }

  /** A clean stop: publish the names held at the stop (`held`), so that the next start holds back only those. */
  close(held: HeldSet): void {
    if (!this.started) return;
    let maxLeaseMs = this.maxLeaseMs;
    if (held !== "*") {
      maxLeaseMs = 0;
      for (const [, lease] of held) if (lease > maxLeaseMs) maxLeaseMs = lease;
    }
    this.maxLeaseMs = maxLeaseMs;
    writeLeases(this.dir, this.state(true, held));
  }

  /** The grant path's write (LockDelay.covers): once per new, rounded-up largest lease. */
  private raise(leaseMs: number): boolean {
    const before = this.maxLeaseMs;
    this.maxLeaseMs = Math.max(before, leaseMs);
    if (this.started) this.write(this.state(false, null));
    return true;
  }

  private write(state: LeaseState): void {
    try {
      writeLeases(this.dir, state);
    } catch (error) {
      this.onFatal(error as TokenStoreError);
    }
  }

  private state(clean: boolean, held: HeldSet | null): LeaseState {
    return { maxLeaseMs: this.maxLeaseMs, carryLeaseMs: this.carryLeaseMs, clean, held };
  }
}
