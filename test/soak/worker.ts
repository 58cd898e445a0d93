// A soak client process: SESSIONS concurrent claim loops through the client
// library over LOCKS lock names (contention), each claim a new connection
// (churn). Every grant and every end of a hold is written to stdout as one
// JSON line, synchronously, before the release reaches the server, so the
// external checker sees a hold end before anyone can be granted after it.
//
// Usage: bun worker.ts PORT SESSIONS LOCKS TAG
//
// Lines: {"k":"g","l":LOCK,"t":"TOKEN","s":KEY,"a":MS}   a grant
//        {"k":"e","s":KEY,"e":MS,"w":WHY}                  the end of that hold
//        {"k":"c","c":{CODE:COUNT}}                          failed claims, at exit
// MS is epoch milliseconds with sub-ms precision (performance.timeOrigin +
// performance.now()), comparable across processes on one machine.
//
// When a hold ends, its end is the earlier of now and the pessimism deadline
// (the send of the last answered frame + 0.8 x lease), as the client's own
// claim machine computes it (src/client/machine.ts, `confirmedUntil`): a
// process that was stopped (SIGSTOP) learns of the loss late, but under the
// protocol its hold ended at the deadline, which is what the checker must
// compare.
import { writeSync } from "node:fs";
import type { ClaimMachine } from "../../src/client/machine.ts";
import { LockClient, type Lock, type LockError } from "../../src/client/index.ts";

const [portArg, sessionsArg, locksArg, tag] = process.argv.slice(2);
const SESSIONS = Number(sessionsArg);
const LOCKS = Number(locksArg);

const client = new LockClient({ servers: `127.0.0.1:${portArg}`, owner: `soak/${tag}`, reconnectMs: 10_000 });
const stop = new AbortController();
const failures: Record<string, number> = {};

const epoch = (perfMs: number): number => performance.timeOrigin + perfMs;

function emit(line: Record<string, unknown>): void {
  writeSync(1, `${JSON.stringify(line)}\n`); // atomic for lines under PIPE_BUF
}

/** The lock's claim machine, whose confirmation times (performance.now() base) are read while the abort is dispatched. */
function machineOf(lock: Lock): ClaimMachine {
  // Not public API: the soak's checker needs the pessimism deadline the client itself used.
  return (lock as unknown as { claim: { machine: ClaimMachine } }).claim.machine;
}

async function session(n: number): Promise<void> {
  for (let cycle = 0; !stop.signal.aborted; cycle++) {
    const name = Math.floor(Math.random() * LOCKS);
    const lease = 1000 + Math.floor(Math.random() * 2000);
    const key = `${tag}.${n}.${cycle}`;
    let lock: Lock;
    try {
      lock = await client.acquire(`soak/${name}`, { lease, wait: 1000 + Math.random() * 5000, try: Math.random() < 0.1, signal: stop.signal });
    } catch (error) {
      const code = (error as LockError).code ?? "OTHER";
      failures[code] = (failures[code] ?? 0) + 1;
      await Bun.sleep(Math.random() * 200);
      continue;
    }
    // Taken before `held` is checked: a hold that passes the check was granted by
    // then, and a stall between the check and a later stamp could put the start
    // after the deadline the check had just met (a hold "ending before it starts").
    const grantedAt = performance.now();
    const abortedBeforeSeen = lock.signal.aborted;
    if (!lock.held) {
      // Lost before this code first looked (the process stalled between the
      // grant and here, e.g. blocked writing a log line into a full pipe, and
      // the deadline passed): it never acted on it, and when it was granted
      // is unknown here, so there is no hold to check. `held` checks the
      // pessimism deadline itself, as guarded work must before acting.
      const what = abortedBeforeSeen ? "LOST_BEFORE_SEEN" : "DEADLINE_PASSED_BEFORE_SEEN";
      emit({ k: "c", c: { [what]: 1 } }); // now: a killed process never gets to its exit line
      await lock.release();
      continue;
    }
    const machine = machineOf(lock);
    const confirmedAtGrant = machine.confirmedAt;
    emit({ k: "g", l: name, t: String(lock.token), s: key, a: epoch(grantedAt), c: epoch(confirmedAtGrant), L: lease });
    const ended = new Promise<void>((resolve) => {
      const end = (): void => {
        const now = performance.now();
        const until = machine.confirmedUntil;
        const deadline = until >= 0 ? until : now;
        const why = (lock.signal.reason as { why?: string } | undefined)?.why ?? "unknown";
        emit({ k: "e", s: key, e: epoch(Math.min(now, deadline)), w: why });
        resolve();
      };
      lock.signal.addEventListener("abort", end, { once: true });
    });
    await Promise.race([Bun.sleep(20 + Math.random() * 380), ended]); // the guarded work
    await lock.release();
    await ended;
    await Bun.sleep(Math.random() * 200);
  }
}

process.on("SIGTERM", () => stop.abort());
const loops = Array.from({ length: SESSIONS }, (_, n) => session(n));
await Promise.all(loops);
emit({ k: "c", c: failures });
process.exit(0);
