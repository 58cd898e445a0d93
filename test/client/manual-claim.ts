/**
 * A ClaimMachine on a manual clock, for tests of the client's rules: the
 * harness is the machine's shell, but its "connection" is a list of effects
 * and its one timer fires only when the test moves the clock.
 */
import { ClaimMachine, type ClaimEffects, type ClaimRules } from "../../src/client/machine.ts";
import type { LockLostError } from "../../src/client/errors.ts";
import { FLAG_REPLY, FrameType, encodeAcquire, encodeAcquired, encodeAcquiredSlot, encodeError, WAITING_REPLY_FRAME } from "../../src/protocol/index.ts";

export const ACQUIRE = encodeAcquire({ name: "m/lock", leaseMs: 1000, owner: "test", try: false });

/** Every effect, in order, with the clock when the machine asked for it. */
export type Effect =
  | { readonly at: number; readonly kind: "connect"; readonly index: number }
  | { readonly at: number; readonly kind: "send"; readonly type: number }
  | { readonly at: number; readonly kind: "disconnect" }
  | { readonly at: number; readonly kind: "granted"; readonly token: bigint; readonly slot: number }
  | { readonly at: number; readonly kind: "failed"; readonly error: unknown }
  | { readonly at: number; readonly kind: "lost"; readonly error: LockLostError }
  | { readonly at: number; readonly kind: "reclaimed"; readonly token: bigint; readonly slot: number }
  | { readonly at: number; readonly kind: "retry"; readonly detail: string; readonly delay: number; readonly backoff: boolean }
  | { readonly at: number; readonly kind: "connect-second"; readonly index: number }
  | { readonly at: number; readonly kind: "send-second"; readonly type: number; readonly options: number }
  | { readonly at: number; readonly kind: "disconnect-second" }
  | { readonly at: number; readonly kind: "promote-second" };

export class ManualClaim implements ClaimEffects {
  now = 0;
  readonly effects: Effect[] = [];
  /** When the one timer is due; Infinity when none is armed. */
  armedAt = Infinity;
  readonly machine: ClaimMachine;
  /** What `random()` returns next (the jitter); tests set it. */
  randomValue = 0.5;

  constructor(rules: Partial<ClaimRules> = {}) {
    this.machine = new ClaimMachine(
      {
        name: "m/lock",
        leaseMs: 1000,
        acquireFrame: ACQUIRE,
        limit: 1,
        shared: false,
        waitMs: undefined,
        addresses: [{ host: "127.0.0.1", port: 7700 }],
        shard: undefined,
        secure: false,
        reconnectMs: 30_000,
        retryFirstConnect: false,
        try: false,
        minHeartbeatIntervalMs: 1,
        random: () => this.randomValue,
        ...rules,
      },
      this,
    );
  }

  // --- the effects ---
  connect(index: number): void {
    this.effects.push({ at: this.now, kind: "connect", index });
  }
  send(frame: Uint8Array): void {
    this.effects.push({ at: this.now, kind: "send", type: frame[0]! });
  }
  disconnect(): void {
    this.effects.push({ at: this.now, kind: "disconnect" });
  }
  arm(at: number): void {
    this.armedAt = at;
  }
  granted(token: bigint, slot: number): void {
    this.effects.push({ at: this.now, kind: "granted", token, slot });
  }
  failed(error: unknown): void {
    this.effects.push({ at: this.now, kind: "failed", error });
  }
  lost(error: LockLostError): void {
    this.effects.push({ at: this.now, kind: "lost", error });
  }
  reclaimed(token: bigint, slot: number): void {
    this.effects.push({ at: this.now, kind: "reclaimed", token, slot });
  }
  retry(detail: string, delay: number, backoff: boolean): void {
    this.effects.push({ at: this.now, kind: "retry", detail, delay, backoff });
  }
  connectSecond(index: number): void {
    this.effects.push({ at: this.now, kind: "connect-second", index });
  }
  sendSecond(frame: Uint8Array): void {
    this.effects.push({ at: this.now, kind: "send-second", type: frame[0]!, options: frame[5]! });
  }
  disconnectSecond(): void {
    this.effects.push({ at: this.now, kind: "disconnect-second" });
  }
  promoteSecond(): void {
    this.effects.push({ at: this.now, kind: "promote-second" });
  }

  // --- driving it ---

  /** Start at the current time and complete the first connect. */
  open(): this {
    this.machine.start(this.now);
    this.machine.connected(this.now);
    return this;
  }

  /** Move the clock to `to`, firing the timer at each time it is armed for on the way. */
  advance(to: number): void {
    for (let guard = 0; this.armedAt <= to; guard++) {
      if (guard > 10_000) throw new Error("the timer keeps firing: a busy loop");
      this.now = Math.max(this.now, this.armedAt);
      this.armedAt = Infinity;
      this.machine.timer(this.now);
    }
    this.now = to;
  }

  /**
   * Jump the clock to `to` without firing the timer: a process that was
   * paused (GC, SIGSTOP) and now runs whatever comes first.
   */
  pause(to: number): void {
    this.now = to;
  }

  /** Deliver server bytes at the current time. */
  read(bytes: Uint8Array): void {
    this.machine.data(this.now, bytes);
  }

  /** Deliver server bytes on the second connection (reclaim on silence) at the current time. */
  readSecond(bytes: Uint8Array): void {
    this.machine.secondData(this.now, bytes);
  }

  replyGranted(token = 7): void {
    this.read(encodeAcquired(token, FLAG_REPLY));
  }
  pushGranted(token = 7): void {
    this.read(encodeAcquired(token, 0));
  }
  /** A semaphore's grant: ACQUIRED with FLAG_SLOT, as a reply or (push) not. */
  replySlot(token: number, slot: number): void {
    this.read(encodeAcquiredSlot(token, slot, FLAG_REPLY));
  }
  pushSlot(token: number, slot: number): void {
    this.read(encodeAcquiredSlot(token, slot, 0));
  }
  replyWaiting(): void {
    this.read(WAITING_REPLY_FRAME);
  }
  error(code: number, message = "from the test"): void {
    this.read(encodeError(code, message));
  }

  /** The times of every frame of `type` sent. */
  sends(type: number = FrameType.HEARTBEAT): number[] {
    return this.effects.flatMap((e) => (e.kind === "send" && e.type === type ? [e.at] : []));
  }
  of<K extends Effect["kind"]>(kind: K): Extract<Effect, { kind: K }>[] {
    return this.effects.filter((e): e is Extract<Effect, { kind: K }> => e.kind === kind);
  }
  /** The one final effect, granted aside: lost or failed. */
  get ending(): Effect | undefined {
    return this.effects.find((e) => e.kind === "lost" || e.kind === "failed");
  }
}
