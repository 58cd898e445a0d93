// A pause of the holder's whole process (a long GC pause, a stopped VM)
// resumes it in the middle of its work, with every timer overdue. The
// pessimism deadline (0.8 x lease after the last answered send) has passed,
// so the lock is no longer held, whatever timer has not fired yet: the
// first look at `held` after the pause must say so (and abort the signal),
// or the guarded work would check, see "held", and write.
import { expect, test } from "bun:test";
import { LockClient, LockLostError } from "../../src/client/index.ts";
import { startServer } from "../helpers/wire.ts";

// 1.5 s: `held` must still be true after the first half lease, and this process can
// stall for 100-300 ms on a loaded 2-core machine (with 400 ms, a stall of ~250 ms
// there already lost the lock before the pause under test).
const LEASE = 1500;

/** Block this process's event loop, as a GC pause would. */
function pause(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {}
}

test("after a pause longer than 0.8 x lease, `held` is false at once and the signal aborts (unconfirmed)", async () => {
  await using server = startServer();
  const client = new LockClient({ servers: `127.0.0.1:${server.port}` });
  const lock = await client.acquire("fault/pause", { lease: LEASE });
  try {
    await Bun.sleep(LEASE / 2); // a heartbeat or two answered
    expect(lock.held).toBe(true);
    pause(LEASE); // longer than 0.8 x lease since any send
    // Still inside the same callback: no timer has had a chance to run.
    expect(lock.held).toBe(false);
    expect(lock.signal.aborted).toBe(true);
    expect((lock.signal.reason as LockLostError).why).toBe("unconfirmed");
  } finally {
    await lock.release();
  }
}, 20_000);
