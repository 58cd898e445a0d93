/**
 * The simulation's command line (`npm run sim -- ...`).
 *
 *   npm run sim -- --seeds 100000            the long run: seeds 1..100000, progress and a summary
 *   npm run sim -- --seeds 1000 --from 5000  seeds 5000..5999
 *   npm run sim -- --seed 1234 --trace       replay one seed, printing every step
 *   --steps N   steps per schedule (default 200)
 *   --far       clock jumps of hours to months in every seed (slow: the wheel walks 2^33 ms in about 1 s)
 *   --near      in no seed (the bun test's mix)
 *   By default every 20th seed (seed % 20 == 0) gets the far jumps, so a seed replays the same way.
 *   --break B   run against a deliberately broken engine (repeat-tokens, late-driver, lifo,
 *               overtake: readers jump ahead of a queued writer, no-share: shared claims never share)
 *               to see what a failure looks like
 *   --coordinator  the failover simulations instead: coordinator.ts (two or three instances of a
 *               service, a coordinator row, pauses, kills, outages; grants checked against the row)
 *               and believers.ts (the same with real engines and clients; checked: no two clients
 *               believe they hold one name at once), as many seeds of each; takes --seeds, --from,
 *               --seed N --trace, and --break B: no-deadline-check | no-compare (coordinator.ts),
 *               or no-delay | short-delay | no-carry | no-raise | no-heartbeat-guard | no-restart-delay |
 *               reclaim-after-eof | short-grace | reclaim-any-token | reclaim-not-durable |
 *               grace-not-carried | no-cap-fold | reclaim-term-token | tell-early (believers.ts)
 *   --believers only believers.ts; takes the same, and --rates PCT (clock rates within +-PCT %,
 *               default 1; 2 shows the lock-delay's margin exceeded now and then) and --steps N
 *               (events per seed, default 20000); every fifth seed is a single server restarted on
 *               its data directory instead of a coordinated service, most of them with reclaim on;
 *               half the coordinated seeds have reclaim on too
 *   After the core's seeds, a plain run (no --seed, no --break, no --core) also runs as many
 *   coordinator seeds and a tenth as many believers seeds (each costs about ten coordinator seeds).
 *   --core      the core's seeds only
 *
 * Exits 1 if any seed fails; each failure prints its seed, step and replay command.
 */
import { BELIEVER_BREAKS, type BelieverSelfTest, runBelieverSeeds, simulateBelievers } from "./believers.ts";
import { type CoordinatorSelfTest, runCoordinatorSeeds, simulateCoordinator } from "./coordinator.ts";
import { type SelfTest, simulate, type SimResult } from "./simulate.ts";

const BREAKS: readonly SelfTest[] = ["repeat-tokens", "late-driver", "lifo", "overtake", "no-share"];

function parse(argv: readonly string[]): Map<string, string> {
  const args = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith("--")) throw new Error(`unexpected argument ${arg}`);
    const next = argv[i + 1];
    if (next !== undefined && !next.startsWith("--")) {
      args.set(arg.slice(2), next);
      i++;
    } else {
      args.set(arg.slice(2), "true");
    }
  }
  return args;
}

function int(args: Map<string, string>, name: string, fallback: number): number {
  const value = args.get(name);
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer, got ${value}`);
  return n;
}

function report(result: SimResult, steps: number, args: Map<string, string>): void {
  const f = result.failure!;
  const flags =
    `${steps !== 200 ? ` --steps ${steps}` : ""}${args.has("far") ? " --far" : ""}${args.has("near") ? " --near" : ""}` +
    `${args.has("break") ? ` --break ${args.get("break")}` : ""}`;
  console.log(`FAIL seed ${result.seed} at step ${f.step}: ${f.message}`);
  console.log(`  replay: npm run sim -- --seed ${result.seed} --trace${flags}`);
}

const COORDINATOR_BREAKS: readonly CoordinatorSelfTest[] = ["no-deadline-check", "no-compare"];

/** --coordinator (both failover simulations) and --believers (believers.ts only). */
async function coordinator(args: Map<string, string>): Promise<number> {
  const broken = args.get("break");
  const believersOnly = args.has("believers");
  const coordinatorBreak = broken !== undefined && COORDINATOR_BREAKS.includes(broken as CoordinatorSelfTest) ? (broken as CoordinatorSelfTest) : undefined;
  const believerBreak = broken !== undefined && BELIEVER_BREAKS.includes(broken as BelieverSelfTest) ? (broken as BelieverSelfTest) : undefined;
  if (broken !== undefined && believerBreak === undefined && (believersOnly || coordinatorBreak === undefined)) {
    throw new Error(`--break must be one of ${[...(believersOnly ? [] : COORDINATOR_BREAKS), ...BELIEVER_BREAKS].join(", ")}`);
  }
  const runCoordinator = !believersOnly && believerBreak === undefined;
  const runBelievers = coordinatorBreak === undefined;
  const rates = args.get("rates");
  const spread = rates === undefined ? undefined : Number(rates) / 100;
  if (spread !== undefined && !(spread >= 0 && spread < 1)) throw new Error(`--rates must be a percentage from 0 to under 100, got ${rates}`);
  const believerOptions = {
    ...(believerBreak === undefined ? {} : { selfTest: believerBreak }),
    ...(spread === undefined ? {} : { rateSpread: spread }),
    ...(args.has("steps") ? { steps: int(args, "steps", 20_000) } : {}),
  };
  const trace = args.has("trace") ? { trace: (line: string) => console.log(line) } : {};
  if (args.has("seed")) {
    const seed = int(args, "seed", 0);
    let failed = false;
    if (runCoordinator) {
      const result = await simulateCoordinator({ seed, ...(coordinatorBreak === undefined ? {} : { selfTest: coordinatorBreak }), ...trace });
      console.log(result.failure === null ? `coordinator seed ${seed}: ok, ${result.grants} grants, ${result.takeovers} terms` : `FAIL coordinator seed ${seed} at step ${result.failure.step}: ${result.failure.message}`);
      failed ||= result.failure !== null;
    }
    if (runBelievers) {
      const result = simulateBelievers({ seed, ...believerOptions, ...trace });
      console.log(
        result.failure === null
          ? `believers seed ${seed}: ok, ${result.beliefs} beliefs of ${result.grants} grants, ${result.takeovers} terms (${result.delayedTerms} with a lock-delay), ${result.handoffs} close handoffs`
          : `FAIL believers seed ${seed} at step ${result.failure.step}: ${result.failure.message}`,
      );
      failed ||= result.failure !== null;
    }
    return failed ? 1 : 0;
  }
  const from = int(args, "from", 1);
  const count = int(args, "seeds", 1000);
  const coordinatorFailed = runCoordinator ? await runCoordinatorSeeds(from, count, console.log, coordinatorBreak) : 0;
  const believersFailed = runBelievers ? runBelieverSeeds(from, count, console.log, believerOptions) : 0;
  return coordinatorFailed === 0 && believersFailed === 0 ? 0 : 1;
}

async function main(): Promise<number> {
  const args = parse(process.argv.slice(2));
  if (args.has("coordinator") || args.has("believers")) return await coordinator(args);
  const steps = int(args, "steps", 200);
  const broken = args.get("break");
  if (broken !== undefined && !BREAKS.includes(broken as SelfTest)) throw new Error(`--break must be one of ${BREAKS.join(", ")}`);
  const selfTest = broken === undefined ? {} : { selfTest: broken as SelfTest };
  const far = (seed: number): boolean => args.has("far") || (!args.has("near") && seed % 20 === 0);
  if (args.has("seed")) {
    const seed = int(args, "seed", 0);
    const result = simulate({ seed, steps, farJumps: far(seed), ...selfTest, ...(args.has("trace") ? { trace: (line: string) => console.log(line) } : {}) });
    if (result.failure !== null) {
      report(result, steps, args);
      return 1;
    }
    console.log(`seed ${seed}: ok, ${result.steps} steps, ${result.counters.grants} grants, ${result.counters.promotions} promotions`);
    return 0;
  }
  const count = int(args, "seeds", 1000);
  const from = int(args, "from", 1);
  const started = performance.now();
  let lastProgress = started;
  let failed = 0;
  let grants = 0;
  let promotions = 0;
  let totalSteps = 0;
  let maxQueue = 0;
  let drivenLateness = 0;
  let semaphoreGrants = 0;
  let sharedGrants = 0;
  let mismatches = 0;
  const ends = new Map<number, number>();
  for (let seed = from; seed < from + count; seed++) {
    const result = simulate({ seed, steps, farJumps: far(seed), ...selfTest });
    totalSteps += result.steps;
    grants += result.counters.grants;
    promotions += result.counters.promotions;
    maxQueue = Math.max(maxQueue, result.counters.maxQueue);
    semaphoreGrants += result.counters.semaphoreGrants;
    sharedGrants += result.counters.sharedGrants;
    mismatches += result.counters.mismatches;
    if (result.driven) drivenLateness = Math.max(drivenLateness, result.counters.maxLateness);
    for (const [reason, n] of result.counters.ends) ends.set(reason, (ends.get(reason) ?? 0) + n);
    if (result.failure !== null) {
      failed++;
      report(result, steps, args);
      if (failed >= 20) {
        console.log("stopping after 20 failures");
        break;
      }
    }
    const now = performance.now();
    if (now - lastProgress >= 5000) {
      lastProgress = now;
      const done = seed - from + 1;
      console.log(`progress: ${done}/${count} seeds, ${failed} failed, ${((now - started) / 1000).toFixed(0)} s`);
    }
  }
  const seconds = (performance.now() - started) / 1000;
  const endList = [...ends].sort((a, b) => a[0] - b[0]).map(([r, n]) => `${r === 0 ? "peer" : `0x${r.toString(16)}`}:${n}`);
  console.log(
    `sim: seeds ${from}..${from + count - 1}, ${failed} failed, ${totalSteps} steps in ${seconds.toFixed(1)} s; ` +
      `${grants} grants (${promotions} by promotion; ${semaphoreGrants} of semaphore permits, ${sharedGrants} shared; ${mismatches} mismatched limits), longest queue ${maxQueue}, ` +
      `worst expiry lateness with a driven timer ${drivenLateness.toFixed(3)} ms; session ends ${endList.join(" ")}`,
  );
  if (broken !== undefined || args.has("core")) return failed === 0 ? 0 : 1;
  const coordinatorFailed = await runCoordinatorSeeds(from, count, console.log);
  const believersFailed = runBelieverSeeds(from, Math.max(1, Math.floor(count / 10)), console.log);
  return failed === 0 && coordinatorFailed === 0 && believersFailed === 0 ? 0 : 1;
}

process.exit(await main());
