/**
 * simulateCoordinator(seed): the real failover shell (src/failover/shell.ts,
 * with its role machine) of two or three instances of one service against a
 * model of the coordinator row, in simulated real time, under a seeded
 * schedule. Each shell runs on a clock of its own (ShellClock: the
 * simulation's time, the instance's offset and rate) and reaches the row
 * through a CoordinatorStore that the simulation answers; nothing in the
 * shell is re-written here.
 *
 * The world: each instance has its own monotonic clock (its own offset and a
 * rate within +-2 % of real time); every statement executes atomically on
 * the row after a random delay and is answered after another, or is lost
 * before or after executing (the shell then reports it failed after its own
 * timeout, and a late effect still lands); the coordinator
 * has outages; instances are paused (SIGSTOP: nothing runs, the clock goes
 * on), killed, restarted under a new id, and stopped cleanly (release).
 * Clients ask the serving instances for grants at random moments; a grant
 * happens only when the shell's check before a grant (its GrantGuard) says
 * yes, and takes its token from the shell, exactly as the engine does.
 *
 * Checked at every grant:
 * - the granting instance is the row's holder in the row's epoch: at most one
 *   instance grants at a time (the single-active invariant);
 * - its token is above every token granted before by any instance (tokens
 *   never go back), and not above the row's token floor.
 * The `selfTest` variants break the rules on purpose to show the checks fail.
 */
import { Engine, type EngineOutput } from "../../src/core/engine.ts";
import type { LockSource } from "../../src/ops/sources.ts";
import { EngineLocks } from "../../src/server/locks.ts";
import { FailoverShell, type ShellClock } from "../../src/failover/shell.ts";
import type { CoordinatorStore } from "../../src/failover/store.ts";
import { Logger } from "../../src/log/logger.ts";
import type { Conn } from "../../src/server/conn.ts";
import type { LockServer } from "../../src/server/server.ts";
import { EventQueue } from "./events.ts";
import { Rng } from "./prng.ts";
import { RowModel } from "./row.ts";

/** no-deadline-check: a grant trusts the step-down timer instead of reading the clock; no-compare: the takeover is a plain write. */
export type CoordinatorSelfTest = "no-deadline-check" | "no-compare";

export interface CoordinatorSimOptions {
  readonly seed: number;
  /** Events before the run ends (default 4000). */
  readonly steps?: number;
  readonly trace?: (line: string) => void;
  readonly selfTest?: CoordinatorSelfTest;
}

export interface CoordinatorSimResult {
  readonly seed: number;
  readonly failure: { readonly step: number; readonly message: string } | null;
  readonly grants: number;
  readonly takeovers: number;
  readonly stepDowns: number;
  readonly refused: number;
  readonly pauses: number;
  readonly kills: number;
}

interface Instance {
  readonly id: string;
  /** The real failover shell (src/failover/shell.ts), on this instance's clock. */
  shell: FailoverShell;
  readonly offset: number;
  readonly rate: number;
  alive: boolean;
  /** The current term's server (a stand-in for the lock listener), null while not serving. */
  server: TermStandIn | null;
  pausedUntil: number;
  /** Events that came due while paused, run on resume in order. */
  backlog: (() => void)[];
}

/** What the shell asks of the term's lock server; grants here are the simulation's, through the shell's guard. */
interface TermStandIn {
  readonly hostname: string;
  readonly port: number;
  readonly locks: LockSource;
  readonly tokensLast: number;
  readonly sessionCount: number;
  held(limit: number): Array<[string, number]> | null;
  stop(): Promise<void>;
  resume(): void;
}

class Violation extends Error {}

const SILENT = new Logger("error", () => {});
const NO_OUTPUT: EngineOutput<Conn> = { send() {}, close() {} };

/** Let every promise continuation that is ready run (the shell's statements answer through them). */
async function settle(): Promise<void> {
  for (let i = 0; i < 24; i++) await Promise.resolve();
}

export async function simulateCoordinator(options: CoordinatorSimOptions): Promise<CoordinatorSimResult> {
  const rng = new Rng(options.seed);
  const trace = options.trace;
  const selfTest = options.selfTest;
  const leaseMs = rng.pick([400, 1000, 2000, 4000]);
  const block = rng.pick([2, 3, 10, 1000]);
  const maxDelay = rng.pick([1, 10, leaseMs / 20, leaseMs / 5]);
  const lossRate = rng.pick([0, 0.01, 0.1]);
  const steps = options.steps ?? 4000;

  let now = 0;
  let seq = 0;
  let step = 0;
  const queue = new EventQueue();
  const store = new RowModel(block);
  let outageUntil = -1;
  const instances: Instance[] = [];
  let serial = 0;
  let lastToken = 0;
  let grants = 0;
  let refused = 0;
  let pauses = 0;
  let kills = 0;
  let takeovers = 0;
  let stepDowns = 0;

  const at = (time: number, run: () => void): void => queue.push({ at: Math.max(time, now), seq: seq++, run });
  const log = (line: string): void => trace?.(`${now.toFixed(3)} ${line}`);
  const local = (x: Instance): number => x.offset + x.rate * now;
  /** Real time at which instance x's clock reads `t`. */
  const realAt = (x: Instance, t: number): number => (t - x.offset) / x.rate;

  /** Run `body` in instance x now, or when it resumes. */
  const inInstance = (x: Instance, body: () => void): void => {
    if (!x.alive) return;
    if (now < x.pausedUntil) x.backlog.push(body);
    else body();
  };

  /**
   * The coordinator as instance x reaches it: each statement executes on the
   * row after a random delay and is answered after another, or is lost before
   * or after executing (the shell's own timeout then says it failed, and a
   * late effect still lands). An answer reaches the instance only when it runs.
   */
  const storeFor = (x: Instance): CoordinatorStore => {
    const statement = <T>(name: string, exec: () => T): Promise<T> =>
      new Promise<T>((resolve) => {
        if (rng.chance(lossRate)) return; // lost on the way there
        at(now + rng.float() * maxDelay, () => {
          if (now < outageUntil) return;
          const result = exec();
          log(`${x.id} ${name} executed -> ${JSON.stringify(result)}`);
          if (rng.chance(lossRate)) return; // the answer is lost
          at(now + rng.float() * maxDelay, () => inInstance(x, () => resolve(result)));
        });
      });
    return {
      setHolder() {}, // the holder is the instance id: no map, no ops address
      read: () => statement("read", () => store.row),
      create: (floor) => statement("create", () => store.create(x.id, floor, leaseMs)),
      takeover: (watched) => statement("takeover", () => store.takeover(x.id, watched, leaseMs, selfTest !== "no-compare")),
      renew: (epoch, carryLeaseMs) => statement("renew", () => store.renew(x.id, epoch, carryLeaseMs)),
      raise: (epoch, lease) => statement("raise", () => store.raise(x.id, epoch, lease)),
      reserve: (epoch) => statement("reserve", () => store.reserve(x.id, epoch)),
      release: (epoch, published) => statement("release", () => store.release(x.id, { type: "release", epoch, ...published })),
      close: async () => {},
    };
  };

  /** The instance's clock and timers: its own offset and rate; a timer fires only while it runs. */
  const clockOf = (x: Instance): ShellClock => ({
    now: () => local(x),
    arm(atLocal, fire) {
      let live = true;
      at(realAt(x, atLocal), () => inInstance(x, () => live && fire()));
      return () => (live = false);
    },
  });

  const spawn = (): Instance => {
    const x: Instance = {
      id: `i${++serial}`,
      shell: null as unknown as FailoverShell,
      offset: rng.int(2 ** 40),
      rate: 1 + (rng.float() - 0.5) * 0.04,
      alive: true,
      server: null,
      pausedUntil: -1,
      backlog: [],
    };
    x.shell = new FailoverShell({
      store: storeFor(x),
      service: "svc",
      instance: x.id,
      leaseMs,
      block,
      initialFloor: 0,
      log: SILENT,
      ioTimeoutMs: 1000,
      clock: clockOf(x),
      listen: (tokens, guard, delay) => {
        const engine = new Engine<Conn>(NO_OUTPUT, { ioTimeoutMs: 1000, tokens, grantGuard: guard, delay }, local(x));
        const term: TermStandIn = {
          hostname: "127.0.0.1",
          port: 7700,
          locks: new EngineLocks(engine),
          get tokensLast() {
            return engine.tokens.last;
          },
          get sessionCount() {
            return engine.sessions.size;
          },
          held: (limit) => engine.held(limit),
          async stop() {
            if (x.server === term) x.server = null;
            engine.shutdown(local(x));
          },
          resume() {},
        };
        x.server = term;
        return term as unknown as LockServer;
      },
      onRole: (role, epoch) => {
        if (role === "active") takeovers++;
        else stepDowns++;
        log(`${x.id} ${role === "active" ? "active" : "steps down"}, epoch ${epoch}`);
      },
    });
    instances.push(x);
    log(`${x.id} starts (rate ${x.rate.toFixed(4)})`);
    x.shell.start(null);
    return x;
  };

  /** A client asks instance x for a grant: the engine asks the shell (its grant guard) first, then takes a token from it. */
  const grant = (x: Instance): void => {
    if (x.server === null) return;
    const s = x.shell;
    const allowed = selfTest === "no-deadline-check" ? s.role === "active" : s.mayGrant(0);
    if (!allowed) {
      refused++; // the shell's guard queued its own pump
      return;
    }
    const token = s.next();
    grants++;
    const epoch = s.machine.epoch;
    log(`${x.id} grants token ${token} (epoch ${epoch})`);
    const row = store.row;
    if (row === null || row.holder !== x.id || row.epoch !== epoch) {
      throw new Violation(`${x.id} granted in epoch ${epoch} while the row is ${JSON.stringify(row)}: two actives`);
    }
    if (token <= lastToken) throw new Violation(`token ${token} from ${x.id} is not above the last token ${lastToken}`);
    if (token > row.tokenFloor) throw new Violation(`token ${token} is above the row's floor ${row.tokenFloor}`);
    lastToken = token;
  };

  // The schedule: the world's own events, drawn as the run goes.
  const chaos = (): void => {
    const live = instances.filter((x) => x.alive);
    const kind = rng.weighted([60, 4, 2, 1, 1, 2, 1]);
    const x = live.length === 0 ? null : rng.pick(live);
    if (kind === 0 && x !== null) {
      inInstance(x, () => grant(x));
    } else if (kind === 1 && x !== null && now >= x.pausedUntil) {
      // A pause: short (under 0.2 x lease), or long (past the lease).
      const length = rng.chance(0.5) ? rng.float() * 0.2 * leaseMs : leaseMs * (0.5 + 2 * rng.float());
      pauses++;
      x.pausedUntil = now + length;
      log(`${x.id} paused for ${length.toFixed(1)} ms`);
      at(x.pausedUntil, () => {
        const backlog = x.backlog;
        x.backlog = [];
        log(`${x.id} resumes (${backlog.length} events waiting)`);
        // On waking, a client's request can be the first thing the process handles.
        if (rng.chance(0.5)) grant(x);
        for (const run of backlog) if (x.alive) run();
      });
    } else if (kind === 2) {
      const length = rng.float() * 2 * leaseMs;
      outageUntil = Math.max(outageUntil, now + length);
      log(`coordinator unreachable for ${length.toFixed(1)} ms`);
    } else if (kind === 3 && x !== null && live.length > 1) {
      x.alive = false;
      x.server = null;
      kills++;
      log(`${x.id} killed`);
    } else if (kind === 4 && x !== null && now >= x.pausedUntil) {
      log(`${x.id} stops cleanly`);
      void x.shell.stop(); // its release goes out through the store; the instance runs nothing more
      x.server = null;
      x.alive = false;
    } else if (kind === 5 && live.length < 3) {
      spawn();
    }
    if (kind === 6 && x !== null) inInstance(x, () => grant(x));
    at(now + (rng.float() * leaseMs) / 8, chaos);
  };

  let failure: { step: number; message: string } | null = null;
  try {
    spawn();
    if (rng.chance(0.7)) spawn();
    at(0, chaos);
    while (step < steps && queue.size > 0) {
      const event = queue.pop()!;
      now = event.at;
      step++;
      event.run();
      await settle(); // what the event resolved runs now, at this moment of the world
    }
  } catch (error) {
    if (!(error instanceof Violation)) throw error;
    failure = { step, message: error.message };
    log(`FAIL: ${error.message}`);
  }
  return { seed: options.seed, failure, grants, takeovers, stepDowns, refused, pauses, kills };
}

/** Run `count` seeds from `from`; one line per failure and a summary. Returns the number that failed. */
export async function runCoordinatorSeeds(from: number, count: number, print: (line: string) => void, selfTest?: CoordinatorSelfTest): Promise<number> {
  const started = performance.now();
  let failed = 0;
  let grants = 0;
  let takeovers = 0;
  let stepDowns = 0;
  let pauses = 0;
  let kills = 0;
  for (let seed = from; seed < from + count; seed++) {
    const result = await simulateCoordinator({ seed, ...(selfTest === undefined ? {} : { selfTest }) });
    grants += result.grants;
    takeovers += result.takeovers;
    stepDowns += result.stepDowns;
    pauses += result.pauses;
    kills += result.kills;
    if (result.failure !== null) {
      failed++;
      print(`FAIL coordinator seed ${seed} at step ${result.failure.step}: ${result.failure.message}`);
      print(`  replay: npm run sim -- --coordinator --seed ${seed} --trace${selfTest === undefined ? "" : ` --break ${selfTest}`}`);
      if (failed >= 20) break;
    }
  }
  const seconds = (performance.now() - started) / 1000;
  print(
    `coordinator sim: seeds ${from}..${from + count - 1}, ${failed} failed in ${seconds.toFixed(1)} s; ` +
      `${grants} grants, ${takeovers} terms begun, ${stepDowns} step-downs, ${pauses} pauses, ${kills} kills`,
  );
  return failed;
}
