/**
 * simulate(seed): one seeded random schedule against one engine.
 *
 * The seed decides the world (start time, io-timeout, session limit, token
 * floor, whether a fake timer fires the wheel at every armed tick, how often
 * the fake socket re-enters the engine) and then every step: connections
 * opening, ACQUIREs on a handful of names (so contention is high) with
 * leases from 1 ms to 49 days and TRY now and then, heartbeats on schedule
 * and off it, silences past the lease, peer closes, operator force-release
 * and kick, partial reads, blocked and drained writes, malformed frames,
 * semaphores (a limit per name, now and then a claim with another) and
 * read/write locks (shared and exclusive claims of one name),
 * stale calls for sessions that already ended, clock jumps from a fraction
 * of a millisecond to days, ticks at random moments, and sometimes shutdown.
 * After every step the World checks the model's invariants; the first
 * violation stops the run and is reported with its seed and step, and
 * `simulate({ seed, trace })` replays it exactly.
 */
import { badAcquire } from "./acquires.ts";
import { type Client, ClientState, fail, type ModelCounters, SimFailure } from "./model.ts";
import { Rng } from "./prng.ts";
import { World, type WorldConfig } from "./world.ts";

export type SelfTest = "repeat-tokens" | "late-driver" | "lifo" | "overtake" | "no-share";

export interface SimOptions {
  readonly seed: number;
  /** Steps before the schedule winds down (default 200). */
  readonly steps?: number;
  /** Called with one line per step (for replaying a failure). */
  readonly trace?: (line: string) => void;
  /**
   * Clock jumps of hours to months are common rather than rare. Slower: the
   * wheel walks an elapsed gap 256 ticks at a time (55-100 ns per step here),
   * so a jump of 2^33 ms costs about a second. The long run turns this on
   * for every 20th seed.
   */
  readonly farJumps?: boolean;
  /** Break the engine on purpose, to show the checks catch it. */
  readonly selfTest?: SelfTest;
}

export interface SimResult {
  readonly seed: number;
  /** Steps run (the failing one included). */
  readonly steps: number;
  readonly failure: { readonly step: number; readonly message: string } | null;
  readonly counters: ModelCounters;
  readonly driven: boolean;
}

const NAME_POOL = ["a", "\ufeffa", "b", "jobs/nightly", "\u00fcn\u00efc\u00f8d\u00e9/\u9501", "n".repeat(512)];
const OWNERS = ["", "host-12/pid-4411/nightly-report", "\u00e9", "o".repeat(256)];

export function simulate(options: SimOptions): SimResult {
  const rng = new Rng(options.seed);
  const config: WorldConfig = {
    start: [0, 0.5, rng.int(2 ** 32), 2 ** 40 + rng.int(1000) / 16][rng.int(4)]!,
    ioTimeoutMs: rng.pick([3, 50, 1000, 5000]),
    maxSessions: rng.chance(0.2) ? rng.range(1, 6) : Infinity,
    tokenFloor: rng.chance(0.3) ? rng.int(2 ** 40) : 0,
    driven: rng.chance(0.5),
    driverLateMs: options.selfTest === "late-driver" ? 3 : 0,
    blockChance: rng.chance(0.3) ? 0.05 : 0,
    cutChance: rng.chance(0.2) ? 0.02 : 0,
    repeatTokens: options.selfTest === "repeat-tokens",
    lifo: options.selfTest === "lifo",
    overtake: options.selfTest === "overtake",
    noShare: options.selfTest === "no-share",
  };
  const names = NAME_POOL.slice(0, rng.range(1, 4));
  if (rng.chance(0.1)) names.push(NAME_POOL[5]!);
  const maxLive = rng.range(2, 12);
  // What each name is in this schedule: an exclusive lock, a read/write lock, or a semaphore.
  const kinds = new Map<string, { limit: number; readers: number }>();
  for (const name of names) {
    const kind = options.selfTest === "overtake" || options.selfTest === "no-share" ? 1 : rng.weighted([4, 3, 3]);
    kinds.set(name, kind === 0 ? { limit: 1, readers: 0 } : kind === 1 ? { limit: 1, readers: 0.6 } : { limit: rng.chance(0.1) ? 65_535 : rng.range(2, 4), readers: 0 });
  }
  /** The claim a client makes on `name`: the name's kind, or now and then another limit (LIMIT_MISMATCH). */
  const claimOf = (name: string): { limit: number; shared: boolean } => {
    const kind = kinds.get(name)!;
    if (rng.chance(0.04)) return { limit: rng.pick([1, 2, 3, 65_535]), shared: false };
    return { limit: kind.limit, shared: rng.chance(kind.readers) };
  };
  const claimText = (claim: { limit: number; shared: boolean }): string => (claim.limit > 1 ? ` limit ${claim.limit}` : claim.shared ? " SHARED" : "");
  const steps = options.steps ?? 200;
  const trace = options.trace;
  const far = options.farJumps === true;
  const world = new World(config, rng.fork());
  const model = world.model;
  let step = 0;
  const note = (what: string): void => {
    if (trace !== undefined) trace(`#${step} t=${world.now} ${what}`);
  };
  if (trace !== undefined) trace(`seed ${options.seed}: ${JSON.stringify({ ...config, maxSessions: String(config.maxSessions), names: names.map((n) => n.slice(0, 20)), maxLive })}`);

  const live = (): Client[] => model.liveClients();
  const pickLive = (accept: (c: Client) => boolean): Client | undefined => {
    const found = live().filter(accept);
    return found.length === 0 ? undefined : rng.pick(found);
  };
  const withSession = (): Client | undefined => {
    const found = model.clients.filter((c) => c.conn.session !== null);
    return found.length === 0 ? undefined : rng.pick(found);
  };
  const lease = (): number => {
    switch (rng.weighted([5, 30, 30, 20, 10, 5])) {
      case 0:
        return 1;
      case 1:
        return rng.range(1, 20);
      case 2:
        return rng.range(20, 2000);
      case 3:
        return rng.range(2000, 10_000);
      case 4:
        return rng.range(2 ** 20, 2 ** 32 - 1);
      default:
        return 2 ** 32 - 1;
    }
  };
  const jump = (): number => {
    switch (rng.weighted(far ? [45, 25, 15, 4, 1, 0.05] : [45, 25, 15, 2, 0.1, 0])) {
      case 0:
        return rng.int(3 * 16) / 16;
      case 1:
        return rng.int(300 * 16) / 16;
      case 2:
        return rng.int(20_000 * 16) / 16;
      case 3:
        return rng.int(2 ** 22);
      case 4:
        return rng.int(2 ** 27); // past level 2 and into level 3 of the wheel
      default:
        return rng.int(2 ** 33); // the top levels
    }
  };

  // Each action returns false when it has nothing to act on (then the clock moves instead).
  const actions: readonly [string, number, () => boolean][] = [
    ["open", 10, () => {
      if (live().length >= maxLive && !rng.chance(0.05)) return false;
      const c = world.open(rng.chance(0.6));
      note(`open -> ${c.describe()}`);
      if (c.live && rng.chance(0.7)) {
        // Usually the ACQUIRE follows the connect at once.
        const name = rng.pick(names);
        const l = lease();
        const tryOnly = rng.chance(0.1);
        const claim = claimOf(name);
        note(`acquire ${c.describe()} "${name.slice(0, 20)}" lease ${l}${tryOnly ? " TRY" : ""}${claimText(claim)}`);
        world.acquire(c, name, l, tryOnly, rng.pick(OWNERS), claim.limit, claim.shared);
      }
      return true;
    }],
    ["acquire", 14, () => {
      const c = pickLive((x) => x.state === ClientState.CONNECTED);
      if (c === undefined) return false;
      const name = rng.pick(names);
      const l = lease();
      const tryOnly = rng.chance(0.2);
      const claim = claimOf(name);
      note(`acquire ${c.describe()} "${name.slice(0, 20)}" lease ${l}${tryOnly ? " TRY" : ""}${claimText(claim)}`);
      world.acquire(c, name, l, tryOnly, rng.pick(OWNERS), claim.limit, claim.shared);
      return true;
    }],
    ["heartbeat", 14, () => {
      const c = rng.chance(0.95) ? pickLive((x) => x.accepted) : pickLive(() => true);
      if (c === undefined) return false;
      note(`heartbeat ${c.describe()}`);
      world.heartbeat(c);
      return true;
    }],
    ["heartbeat round", 8, () => {
      // Diligent clients heartbeat once a quarter lease has passed, as the client library does.
      const due = live().filter((c) => c.diligent && c.accepted && world.now - c.lastSeen >= c.lease / 4);
      note(`heartbeat round: ${due.length} due`);
      for (const c of due) if (c.live) world.heartbeat(c);
      return true;
    }],
    ["advance", 18, () => {
      const dt = jump();
      note(`advance ${dt}`);
      world.advance(dt);
      return true;
    }],
    ["tick", 6, () => {
      note("tick");
      world.tick();
      return true;
    }],
    ["close", 6, () => {
      const c = pickLive(() => true);
      if (c === undefined) return false;
      note(`peer closes ${c.describe()}`);
      world.closed(c);
      return true;
    }],
    ["force-release", 2, () => {
      const name = rng.chance(0.9) ? rng.pick(names) : "no-such-lock";
      // The oldest holder, a chosen holder (any session: one of another name, or a waiter, must not end), or no such session.
      const pick = rng.weighted([4, 4, 1]);
      const target = pick === 0 ? "oldest" : pick === 1 ? (withSession() ?? "oldest") : 1_000_000;
      note(`force-release "${name.slice(0, 20)}" ${typeof target === "object" ? target.describe() : target}`);
      world.forceRelease(name, target);
      return true;
    }],
    ["kick", 2, () => {
      const c = rng.chance(0.7) ? pickLive((x) => x.state === ClientState.WAITING) : withSession();
      const id = c?.conn.session?.id ?? 1_000_000;
      note(`kick session ${id}`);
      world.kick(id, c);
      return true;
    }],
    ["partial", 4, () => {
      const c = pickLive(() => true);
      if (c === undefined) return false;
      const partial = rng.chance(0.8);
      note(`readProgress ${c.describe()} partial=${partial}`);
      world.readProgress(c, partial);
      return true;
    }],
    ["write", 4, () => {
      const c = pickLive(() => true);
      if (c === undefined) return false;
      const blocked = rng.chance(0.5);
      note(`${blocked ? "writeBlocked" : "writeDrained"} ${c.describe()}`);
      if (blocked) world.writeBlocked(c);
      else world.writeDrained(c);
      return true;
    }],
    ["time out", 0.5, () => {
      const c = pickLive(() => true);
      if (c === undefined) return false;
      note(`timeOut ${c.describe()}`);
      world.timeOut(c);
      return true;
    }],
    ["bad header", 0.5, () => {
      const c = pickLive(() => true);
      if (c === undefined) return false;
      note(`protocolError ${c.describe()}`);
      world.protocolError(c);
      return true;
    }],
    ["bad acquire", 2, () => {
      const c = pickLive(() => true);
      if (c === undefined) return false;
      const bad = badAcquire(rng);
      note(`bad acquire (${bad.what}) ${c.describe()}`);
      world.badAcquire(c, bad.frame, bad.code);
      return true;
    }],
    ["second acquire", 1, () => {
      const c = pickLive((x) => x.accepted);
      if (c === undefined) return false;
      note(`second acquire ${c.describe()}`);
      world.acquire(c, rng.pick(names), lease(), rng.chance(0.5), "");
      return true;
    }],
    ["unknown frame", 0.5, () => {
      const c = pickLive(() => true);
      if (c === undefined) return false;
      const type = rng.pick([0x00, 0x03, 0x81, 0x82, 0xff]);
      note(`frame type 0x${type.toString(16)} to ${c.describe()}`);
      world.unknownFrame(c, type);
      return true;
    }],
    ["stale", 1.5, () => {
      // The shell can still hold a session the engine has ended: every call must be a no-op.
      const ended = model.clients.filter((x) => x.conn.session !== null && !x.live);
      if (ended.length === 0) return false;
      const c = rng.pick(ended);
      const what = rng.int(7);
      note(`stale call ${what} for ${c.describe()}`);
      if (what === 0) world.heartbeat(c);
      else if (what === 1) world.closed(c);
      else if (what === 2) world.readProgress(c, true);
      else if (what === 3) world.writeBlocked(c);
      else if (what === 4) world.timeOut(c);
      else if (what === 5) world.protocolError(c);
      else world.acquire(c, rng.pick(names), lease(), false, "");
      return true;
    }],
    ["shutdown", 0.3, () => {
      note("shutdown");
      world.shutdown();
      return true;
    }],
  ];
  const weights = actions.map((a) => a[1]);

  try {
    for (step = 1; step <= steps && !model.draining; step++) {
      const action = actions[rng.weighted(weights)]!;
      if (!action[2]()) {
        const dt = jump();
        note(`advance ${dt} (nothing for ${action[0]})`);
        world.advance(dt);
      }
    }
    windDown(world, rng, note, far ? 2 ** 27 : 2 ** 22);
  } catch (error) {
    if (!(error instanceof SimFailure)) throw error;
    return { seed: options.seed, steps: step, failure: { step, message: error.message }, counters: model.counters, driven: config.driven };
  }
  return { seed: options.seed, steps: step - 1, failure: null, counters: model.counters, driven: config.driven };
}

/** End every session (by their peers, by expiry, or after shutdown) and require an empty engine. */
function windDown(world: World, rng: Rng, note: (what: string) => void, maxSilence: number): void {
  const model = world.model;
  if (model.draining) {
    note("after shutdown: a refused open");
    world.open(false);
  } else if (rng.chance(0.5)) {
    note("wind down: peers close");
    for (const c of model.liveClients()) world.closed(c);
  } else {
    let last = world.now;
    for (const c of model.liveClients()) last = Math.max(last, model.deadline(c));
    if (last - world.now > maxSilence) {
      note("wind down: peers close (deadlines too far to walk)");
      for (const c of model.liveClients()) world.closed(c);
    } else {
      note(`wind down: silence until ${last + 2}`);
      world.advance(last + 2 - world.now);
      world.tick();
    }
  }
  const engine = world.engine;
  if (engine.sessions.size !== 0 || engine.locks.size !== 0 || engine.wheel.size !== 0 || engine.wheel.nextTick() !== -1) {
    fail(`after wind-down: ${engine.sessions.size} sessions, ${engine.locks.size} locks, ${engine.wheel.size} wheel entries`);
  }
  for (const c of model.clients) {
    if (c.state !== ClientState.ENDED || c.endReason === null) fail(`${c.describe()} neither ended nor has a reason`);
  }
}
