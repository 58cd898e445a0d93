/** Lock: a held lock as the caller sees it. */
// The declarations name AsyncDisposable and Symbol.asyncDispose, which
// TypeScript's libs have only from esnext.disposable on: this reference
// (kept in the emitted lock.d.ts) brings them to a consumer compiling for
// es2022, as @types/node does. Node.js has Symbol.asyncDispose from 20.
/// <reference lib="esnext.disposable" preserve="true" />
import type { Claim } from "./claim.ts";

/**
 * A lock this client holds. Ownership lasts until `signal` aborts: after
 * `release()`, or the moment it stops being confirmed (an ERROR, a closed
 * connection, or 0.8 x lease since the last answered send). Stop the guarded
 * work when it aborts; `signal.reason` is a LockLostError saying why.
 *
 * @example
 * await using lock = await client.acquire("jobs/nightly", { lease: 10_000 });
 * await writeReport({ fencingToken: lock.token, signal: lock.signal });
 * // released here, at the end of the scope
 *
 * @example
 * // One of at most three holders at once: a semaphore's grant has a slot, 0..2.
 * await using permit = await client.acquire("render/gpu", { limit: 3 });
 * await render({ gpu: permit.slot!, fencingToken: permit.token, signal: permit.signal });
 */
export class Lock implements AsyncDisposable {
  constructor(
    /** The lock's name. */
    readonly name: string,
    /** Fencing token of this grant: pass it to every guarded write. */
    readonly token: bigint,
    /**
     * The slot of a semaphore's grant (`limit` above 1): 0 .. limit - 1, the
     * lowest one free when granted. A guarded resource fences each slot like
     * an exclusive lock: per slot, tokens rise. null for limit 1 (an
     * exclusive or shared lock), whose grants have no slot.
     */
    readonly slot: number | null,
    /** Aborts when ownership ends; `reason` is a LockLostError. */
    readonly signal: AbortSignal,
    private readonly claim: Claim,
  ) {}

  /**
   * True while ownership is confirmed. It checks the 0.8 x lease deadline
   * itself (after a long pause the deadline timer may not have run yet) and,
   * if it has passed, aborts the signal before returning false.
   */
  get held(): boolean {
    return this.claim.checkHeld();
  }

  /**
   * How many times this lock was reclaimed, after a clean stop of the server
   * or on its silence (docs/client.md, "Reclaim"): the same grant and token,
   * kept across the server's restart or a change of active. 0 when it never was.
   */
  get reclaims(): number {
    return this.claim.machine.reclaims;
  }

  /**
   * True while the lock is being reclaimed: the server stopped cleanly and
   * the client is claiming the grant back from its next run, or the server
   * went silent (a HEARTBEAT unanswered for lease/4) and the client is
   * reclaiming on a second connection. The lock is still held (`held` is
   * true until the deadline); the guarded work goes on.
   */
  get reclaiming(): boolean {
    const machine = this.claim.machine;
    return machine.reclaiming || machine.silent;
  }

  /**
   * Release: close the connection (the server hands the lock to the next
   * waiter at once). Resolves when the socket is closed. Idempotent.
   */
  release(): Promise<void> {
    return this.claim.release();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.claim.release();
  }
}
