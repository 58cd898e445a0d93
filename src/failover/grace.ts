/**
 * ReclaimGrace: the account of a reclaim grace (protocol.md section 14) for
 * the views: which of the grants the last clean stop published have been
 * reclaimed, and how long the grace has left. The rules themselves (what
 * may be reclaimed, and when) are the engine's; this only counts what the
 * lock server reports (LockServer's `onReclaimed`, once per reclaim
 * granted) against the published set.
 *
 * Each update is a Map lookup, and a view costs the same whatever the size
 * of the set: it names only the first few names still unclaimed.
 */
import type { ReclaimEntry } from "../core/engine.ts";
import type { GraceView } from "../ops/sources.ts";

/** Unclaimed names a view lists at most. */
export const UNCLAIMED_NAMES_SHOWN = 5;

export class ReclaimGrace {
  /** The published grants not reclaimed yet: token -> name. */
  private readonly waiting = new Map<number, string>();
  /** Names with grants not reclaimed yet -> how many (in the record's order). */
  private readonly names = new Map<string, number>();
  /** Published grants. */
  readonly published: number;
  /** Distinct published grants reclaimed so far. */
  reclaimed = 0;

  /** `published`: the grants by name; `endsAt`: monotonic ms at which the last published name stops being held back. */
  constructor(published: ReadonlyMap<string, readonly ReclaimEntry[]>, readonly endsAt: number) {
    let count = 0;
    for (const [name, entries] of published) {
      for (const entry of entries) this.waiting.set(entry.token, name);
      this.names.set(name, entries.length);
      count += entries.length;
    }
    this.published = count;
  }

  /** A reclaim of the grant with `token` was granted (again, or of a token not published: nothing changes). */
  reclaim(token: number): void {
    const name = this.waiting.get(token);
    if (name === undefined) return;
    this.waiting.delete(token);
    this.reclaimed++;
    const left = this.names.get(name)! - 1;
    if (left === 0) this.names.delete(name);
    else this.names.set(name, left);
  }

  /** Published grants not reclaimed yet. */
  get unclaimed(): number {
    return this.published - this.reclaimed;
  }

  /** The first `n` names with a grant not reclaimed yet. */
  unclaimedNames(n: number = UNCLAIMED_NAMES_SHOWN): string[] {
    const out: string[] = [];
    for (const name of this.names.keys()) {
      if (out.length >= n) break;
      out.push(name);
    }
    return out;
  }

  /** The grace at `now` (monotonic ms); null once it is over. */
  view(now: number): GraceView | null {
    if (now >= this.endsAt) return null;
    return {
      remainingMs: Math.ceil(this.endsAt - now),
      published: this.published,
      reclaimed: this.reclaimed,
      unclaimedNames: this.unclaimedNames(),
      unclaimedNameCount: this.names.size,
    };
  }
}
