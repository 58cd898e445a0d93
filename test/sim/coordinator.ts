/**
 * simulateCoordinator(seed): the coordinator role machine (src/server/
 * coordinator.ts) of two or three instances of one service against a model
 * of the coordinator row, in simulated real time, under a seeded schedule.
 *
 * The world: each instance has its own monotonic clock (its own offset and a
 * rate within +-2 % of real time); every statement executes atomically on
 * the row after a random delay and is answered after another, or is lost
 * before or after executing (the shell then reports it failed after its
 * timeout, as roles.ts does, and a late effect still lands); the coordinator
 * has outages; instances are paused (SIGSTOP: nothing runs, the clock goes
 * on), killed, restarted under a new id, and stopped cleanly (release).
 * Clients ask the serving instances for grants at random moments; a grant
 * happens only when the machine's check before a grant says yes, exactly as
 * the engine's grant guard asks it.
 *
 * Checked at every grant:
 * - the granting instance is the row's holder in the row's epoch: at most one
 *   instance grants at a time (the single-active invariant);
 * - its token is above every token granted before by any instance (tokens
 *   never go back), and not above the row's token floor.
 * The `selfTest` variants break the rules on purpose to show the checks fail.
 */
import { type DrivenMachine, drivenMachine } from "../helpers/role-machine.ts";
import { type RoleAction, Outcome } from "../../src/failover/machine.ts";
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
  readonly machine: DrivenMachine;
  readonly offset: number;
  readonly rate: number;
  alive: boolean;
  serving: boolean;
  pausedUntil: number;
  /** Events that came due while paused, run on resume in order. */
  backlog: (() => void)[];
  timerSeq: number;
}

class Violation extends Error {}

export function simulateCoordinator(options: CoordinatorSimOptions): CoordinatorSimResult {
  const rng = new Rng(options.seed);
  const trace = options.trace;
  const selfTest = options.selfTest;
  const leaseMs = rng.pick([400, 1000, 2000, 4000]);
  const block = rng.pick([2, 3, 10, 1000]);
  const maxDelay = rng.pick([1, 10, leaseMs / 20, leaseMs / 5]);
  const lossRate = rng.pick([0, 0.01, 0.1]);
  const statementTimeout = leaseMs / 2;
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

  const spawn = (): Instance => {
    const x: Instance = {
      id: `i${++serial}`,
      machine: drivenMachine({ leaseMs, block, initialFloor: 0 }),
      offset: rng.int(2 ** 40),
      rate: 1 + (rng.float() - 0.5) * 0.04,
      alive: true,
      serving: false,
      pausedUntil: -1,
      backlog: [],
      timerSeq: 0,
    };
    instances.push(x);
    log(`${x.id} starts (rate ${x.rate.toFixed(4)})`);
    perform(x, x.machine.start(local(x)));
    return x;
  };

  /** Carry out the machine's actions, then arm its timer (roles.ts's run()). */
  const perform = (x: Instance, actions: readonly RoleAction[]): void => {
    for (const action of actions) act(x, action);
    const wake = x.machine.nextWake();
    const mySeq = ++x.timerSeq;
    if (wake !== Infinity) {
      at(realAt(x, wake), () =>
        inInstance(x, () => {
          if (x.timerSeq === mySeq) perform(x, x.machine.tick(local(x)));
        }),
      );
    }
  };

  /** One statement: executes after a delay (maybe not at all), answered (maybe not), bounded by the shell's timeout. */
  const statement = <T>(x: Instance, name: string, exec: () => T, answer: (result: T | undefined) => RoleAction[]): void => {
    let reported = false;
    const report = (result: T | undefined): void => {
      if (reported) return;
      reported = true;
      inInstance(x, () => perform(x, answer(result)));
    };
    at(realAt(x, local(x) + statementTimeout), () => report(undefined));
    const execAt = now + rng.float() * maxDelay;
    if (rng.chance(lossRate)) return; // lost on the way there
    at(execAt, () => {
      if (now < outageUntil) return;
      const result = exec();
      log(`${x.id} ${name} executed -> ${JSON.stringify(result)}`);
      if (rng.chance(lossRate)) return; // the answer is lost
      at(now + rng.float() * maxDelay, () => report(result));
    });
  };

  const act = (x: Instance, action: RoleAction): void => {
    const m = x.machine;
    switch (action.type) {
      case "read":
        statement(x, "read", () => store.row, (r) => (r === undefined ? m.readDone(local(x), null, true) : m.readDone(local(x), r)));
        return;
      case "create":
        statement(x, "create", () => store.create(x.id, action.floor, leaseMs), (r) => m.createDone(local(x), r ?? null));
        return;
      case "takeover":
        statement(x, "takeover", () => store.takeover(x.id, action.watched, leaseMs, selfTest !== "no-compare"), (r) => m.takeoverDone(local(x), r ?? null));
        return;
      case "renew":
        statement(
          x,
          "renew",
          () => store.renew(x.id, action.epoch, action.carryLeaseMs),
          (ok) => m.renewDone(local(x), action.epoch, action.sentAt, ok === undefined ? Outcome.FAILED : ok ? Outcome.OK : Outcome.TAKEN),
        );
        return;
      case "reserve":
        statement(
          x,
          "reserve",
          () => store.reserve(x.id, action.epoch),
          (floor) => m.reserveDone(local(x), action.epoch, floor === undefined ? Outcome.FAILED : floor === null ? Outcome.TAKEN : Outcome.OK, floor ?? 0),
        );
        return;
      case "release":
        statement(x, "release", () => store.release(x.id, action), () => []);
        return;
      case "raise":
        statement(
          x,
          "raise",
          () => store.raise(x.id, action.epoch, action.leaseMs),
          (max) => m.raiseDone(local(x), action.epoch, max === undefined ? Outcome.FAILED : max === null ? Outcome.TAKEN : Outcome.OK, max ?? 0),
        );
        return;
      case "activate":
        x.serving = true;
        takeovers++;
        log(`${x.id} active, epoch ${action.epoch} (${action.why}), tokens from ${action.firstToken}`);
        return;
      case "stepDown":
        x.serving = false;
        stepDowns++;
        log(`${x.id} steps down: ${action.reason}`);
        return;
    }
  };

  /** A client asks instance x for a grant (the engine asks the guard first). */
  const grant = (x: Instance): void => {
    if (!x.serving) return;
    const m = x.machine;
    const allowed = selfTest === "no-deadline-check" ? m.role === "active" && m.mayGrant(-Infinity) : m.mayGrant(local(x));
    if (!allowed) {
      refused++;
      perform(x, m.tick(local(x))); // the guard's queued pump
      return;
    }
    const token = m.nextToken();
    grants++;
    log(`${x.id} grants token ${token} (epoch ${m.epoch})`);
    const row = store.row;
    if (row === null || row.holder !== x.id || row.epoch !== m.epoch) {
      throw new Violation(`${x.id} granted in epoch ${m.epoch} while the row is ${JSON.stringify(row)}: two actives`);
    }
    if (token <= lastToken) throw new Violation(`token ${token} from ${x.id} is not above the last token ${lastToken}`);
    if (token > row.tokenFloor) throw new Violation(`token ${token} is above the row's floor ${row.tokenFloor}`);
    lastToken = token;
    if (m.wantsReserve()) perform(x, m.tick(local(x)));
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
      x.serving = false;
      kills++;
      log(`${x.id} killed`);
    } else if (kind === 4 && x !== null && now >= x.pausedUntil) {
      log(`${x.id} stops cleanly`);
      const actions = x.machine.stop(local(x));
      x.serving = false;
      for (const a of actions) act(x, a);
      x.alive = false;
    } else if (kind === 5 && live.length < 3) {
      spawn();
    }
    if (kind === 6 && x !== null) inInstance(x, () => perform(x, x.machine.tick(local(x))));
    at(now + rng.float() * leaseMs / 8, chaos);
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
    }
  } catch (error) {
    if (!(error instanceof Violation)) throw error;
    failure = { step, message: error.message };
    log(`FAIL: ${error.message}`);
  }
  return { seed: options.seed, failure, grants, takeovers, stepDowns, refused, pauses, kills };
}

/** Run `count` seeds from `from`; one line per failure and a summary. Returns the number that failed. */
export function runCoordinatorSeeds(from: number, count: number, print: (line: string) => void, selfTest?: CoordinatorSelfTest): number {
  const started = performance.now();
  let failed = 0;
  let grants = 0;
  let takeovers = 0;
  let stepDowns = 0;
  let pauses = 0;
  let kills = 0;
  for (let seed = from; seed < from + count; seed++) {
    const result = simulateCoordinator({ seed, ...(selfTest === undefined ? {} : { selfTest }) });
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
