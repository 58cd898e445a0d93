/**
 * The soak's external checker: it sees only what clients logged (grants
 * with lock, token and time; the end of each hold) and what the supervisor
 * did (kills), and checks the two promises a lock server makes:
 *
 * - single ownership: the holds of one lock never overlap in time (a hold
 *   ends at release, at the pessimism deadline, or when its process was
 *   killed);
 * - fencing: no token is issued twice, and on each lock the holds in time
 *   order carry strictly increasing tokens;
 * - pessimism: no grant is reported after its own deadline had passed (a
 *   hold that ends before it starts was never confirmed; a paused client
 *   reading a stale push must not count it as a grant).
 *
 * Times come from different processes' clocks (epoch ms from each
 * performance.timeOrigin): overlaps under TOLERANCE_MS are counted apart as
 * clock noise, never silently dropped.
 */
export const TOLERANCE_MS = 1;

export interface Hold {
  readonly lock: number;
  readonly token: bigint;
  readonly key: string;
  readonly start: number;
  end: number;
  why: string;
  /** Diagnostics: the claim's confirmation time at the grant (epoch ms) and its lease. */
  readonly confirmed?: number;
  readonly lease?: number;
}

export interface Verdict {
  holds: number;
  locks: number;
  duplicateTokens: number;
  overlaps: number;
  overlapsWithinTolerance: number;
  tokenOrder: number;
  endedBeforeStart: number;
  unended: number;
  examples: string[];
}

export class Checker {
  private readonly holds = new Map<string, Hold>();
  /** Worker tag -> the time it was killed (epoch ms). */
  private readonly kills = new Map<string, number>();
  /** Worker tag -> its stalls: stopped (taken after SIGSTOP was sent) and resumed (taken before SIGCONT). */
  private readonly stalls = new Map<string, { stopped: number; resumed: number }[]>();

  /** One JSON line from a worker tagged `tag`. */
  line(line: Record<string, any>): void {
    if (line.k === "g") this.holds.set(line.s, { lock: line.l, token: BigInt(line.t), key: line.s, start: line.a, end: Number.POSITIVE_INFINITY, why: "", confirmed: line.c, lease: line.L });
    else if (line.k === "e") {
      const hold = this.holds.get(line.s);
      if (hold !== undefined) {
        hold.end = line.e;
        hold.why = line.w;
      }
    }
  }

  killed(tag: string, at: number): void {
    this.kills.set(tag, at);
  }

  /**
   * A worker was stopped (SIGSTOP) from `stopped` to `resumed`. A hold it
   * had then, whose 0.8 x lease deadline passed while it was stopped, was
   * lost at that deadline at the latest, even if the process was killed
   * after resuming but before it could log the end (it never ran again).
   */
  stalled(tag: string, stopped: number, resumed: number): void {
    let list = this.stalls.get(tag);
    if (list === undefined) this.stalls.set(tag, (list = []));
    list.push({ stopped, resumed });
  }

  /**
   * When an unended hold of a killed worker ended at the latest: at the
   * kill, or earlier at the deadline of a stall that outlasted its lease's
   * 0.8 (its last confirmation was no later than the stop, so its deadline
   * was at most stop + 0.8 x lease, and a reply read after that confirms
   * nothing). Bounds only: nothing here can hide a grant the server made
   * while the hold could still have been confirmed.
   */
  private killedEnd(hold: Hold, tag: string, killedAt: number): number {
    if (hold.lease === undefined) return killedAt;
    for (const stall of this.stalls.get(tag) ?? []) {
      if (stall.stopped < hold.start || stall.stopped > killedAt) continue;
      const deadline = stall.stopped + 0.8 * hold.lease;
      if (deadline < stall.resumed) return Math.min(killedAt, deadline);
    }
    return killedAt;
  }

  verdict(): Verdict {
    const v: Verdict = { holds: this.holds.size, locks: 0, duplicateTokens: 0, overlaps: 0, overlapsWithinTolerance: 0, tokenOrder: 0, endedBeforeStart: 0, unended: 0, examples: [] };
    const seen = new Set<bigint>();
    const byLock = new Map<number, Hold[]>();
    for (const hold of this.holds.values()) {
      if (hold.end === Number.POSITIVE_INFINITY) {
        const tag = hold.key.slice(0, hold.key.indexOf("."));
        const killedAt = this.kills.get(tag);
        if (killedAt !== undefined) {
          hold.end = this.killedEnd(hold, tag, killedAt);
          hold.why = hold.end < killedAt ? "killed after a stall past its deadline" : "killed";
        } else v.unended++;
      }
      if (hold.end < hold.start - TOLERANCE_MS) {
        v.endedBeforeStart++;
        if (v.examples.length < 20) v.examples.push(`${hold.key} (token ${hold.token}) reported a grant ${(hold.start - hold.end).toFixed(3)} ms after its deadline (${hold.why})`);
      }
      if (seen.has(hold.token)) {
        v.duplicateTokens++;
        v.examples.push(`token ${hold.token} granted twice (${hold.key})`);
      }
      seen.add(hold.token);
      let list = byLock.get(hold.lock);
      if (list === undefined) byLock.set(hold.lock, (list = []));
      list.push(hold);
    }
    v.locks = byLock.size;
    for (const list of byLock.values()) {
      list.sort((a, b) => a.start - b.start);
      let latest: Hold | null = null; // the hold with the latest end so far
      let previous: Hold | null = null;
      for (const hold of list) {
        if (previous !== null && hold.token <= previous.token) {
          v.tokenOrder++;
          if (v.examples.length < 20) v.examples.push(`lock ${hold.lock}: token ${hold.token} (${hold.key}) after ${previous.token} (${previous.key})`);
        }
        if (latest !== null && hold.start < latest.end) {
          const by = latest.end - hold.start;
          if (by < TOLERANCE_MS) v.overlapsWithinTolerance++;
          else {
            v.overlaps++;
            if (v.examples.length < 20) v.examples.push(`lock ${hold.lock}: ${hold.key} (token ${hold.token}, lease ${hold.lease}, confirmed ${((hold.confirmed ?? NaN) - hold.start).toFixed(1)} ms before its grant) granted ${by.toFixed(3)} ms before ${latest.key} (token ${latest.token}, ${latest.why}) ended`);
          }
        }
        if (latest === null || hold.end > latest.end) latest = hold;
        previous = hold;
      }
    }
    return v;
  }
}
