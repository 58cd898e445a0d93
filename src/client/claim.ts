/**
 * Claim: the I/O shell around one ClaimMachine (machine.ts), for one
 * `acquire()`. Every rule of the claim lives in the machine; this file only
 * carries its decisions out and feeds it events with `performance.now()`:
 *
 * - it opens the connection the machine asks for through the runtime's
 *   Connector (Bun.connect in bun-transport.ts, node:net / node:tls in
 *   node-transport.ts), tags it with an attempt number so events of a connection
 *   the machine has dropped are never reported, and passes on bytes, the
 *   close, and the connect's outcome;
 * - it arms the machine's one timer;
 * - it passes a reclaim of the held lock on to `onReclaim`;
 * - for a reclaim on silence it opens the machine's second connection
 *   beside the first, and when the machine promotes it, closes the first and
 *   reports the second's events as the claim connection's from then on;
 * - it turns the machine's endings into the promise `start()` returns (the
 *   grant, or the error of a claim that never held) and into the lock's
 *   AbortSignal (aborted with the LockLostError the moment a held lock is
 *   lost), and passes the caller's AbortSignal in as `abort`.
 */
import type { LockLostError } from "./errors.ts";
import { ClaimMachine, type ClaimEffects, type ClaimRules, type ClaimState } from "./machine.ts";
import type { Connector, TlsSettings, Transport } from "./transport.ts";

/**
 * A claim's settings: the machine's rules (ClaimRules, every one of them,
 * passed on as they are) except the two the shell supplies itself (`secure`,
 * from `tls`; `random`, Math.random), and what only the shell uses.
 */
export interface ClaimSettings extends Omit<ClaimRules, "secure" | "random"> {
  readonly signal: AbortSignal | undefined;
  readonly tls: TlsSettings | undefined;
  readonly connect: Connector;
  /** Told before each reconnect of a claim not held yet: what failed, the pause before the next try, and whether it is a backoff (Effects.retry). */
  readonly onRetry: ((detail: string, delayMs: number, backoff: boolean) => void) | undefined;
  /** Told each time the held lock was reclaimed, after a clean stop of the server or on silence (Effects.reclaimed). */
  readonly onReclaim?: (() => void) | undefined;
}

export type { ClaimState };

/** What a claim reports to its Lock: the grant, once. */
export interface Granted {
  readonly token: bigint;
  /** The slot (0 .. limit - 1) of a claim with limit above 1, else null. */
  readonly slot: number | null;
  readonly signal: AbortSignal;
}

export class Claim implements ClaimEffects {
  /** The rules, and the claim's observable state (state, token, confirmedAt, smoothedRttMs). */
  readonly machine: ClaimMachine;
  /** Aborted the moment ownership is no longer confirmed; reason: LockLostError. */
  readonly controller = new AbortController();

  private transport: Transport | null = null;
  /** Bumped per connection (and when one is dropped), so callbacks of an old connection are ignored. */
  private attempt = 0;
  private timerHandle: ReturnType<typeof setTimeout> | null = null;
  private settle: { resolve: (g: Granted) => void; reject: (e: unknown) => void } | null = null;
  /** The second connection (reclaim on silence): whose events are the second's while it is this one, and its transport once open. */
  private second: Second | null = null;
  private secondTransport: Transport | null = null;
  private readonly onAbort = (): void => this.machine.abort(performance.now(), this.settings.signal?.reason);
  private readonly fire = (): void => {
    this.timerHandle = null;
    this.machine.timer(performance.now());
  };

  constructor(private readonly settings: ClaimSettings) {
    this.machine = new ClaimMachine({ ...settings, secure: settings.tls !== undefined && settings.tls !== false, random: Math.random }, this);
  }

  /** Start; resolves at the grant, rejects with a LockError. */
  start(): Promise<Granted> {
    const promise = new Promise<Granted>((resolve, reject) => (this.settle = { resolve, reject }));
    const signal = this.settings.signal;
    if (signal?.aborted) {
      this.machine.abort(performance.now(), signal.reason);
      return promise;
    }
    signal?.addEventListener("abort", this.onAbort, { once: true });
    this.machine.start(performance.now());
    return promise;
  }

  /** release(): close the connection; the lock's signal aborts with why "released". */
  release(): Promise<void> {
    const transport = this.transport;
    this.machine.release(performance.now());
    return transport === null ? Promise.resolve() : transport.close();
  }

  /** Held, with the 0.8 x lease deadline checked now (see ClaimMachine.checkHeld). */
  checkHeld(): boolean {
    return this.machine.checkHeld(performance.now());
  }

  // --- effects: what the machine asks for -------------------------------------------

  connect(index: number): void {
    const attempt = ++this.attempt;
    const address = this.settings.addresses[index]!;
    const machine = this.machine;
    this.settings
      .connect(address, this.settings.tls, {
        data: (chunk) => {
          if (attempt === this.attempt) machine.data(performance.now(), chunk);
        },
        closed: (error) => {
          if (attempt !== this.attempt) return;
          this.attempt++; // nothing more of this connection counts, its connect's outcome included
          this.transport = null;
          machine.closed(performance.now(), error);
        },
      })
      .then(
        (transport) => {
          if (attempt !== this.attempt) {
            void transport.close();
            return;
          }
          this.transport = transport;
          machine.connected(performance.now());
        },
        (error: unknown) => {
          if (attempt === this.attempt) machine.connectFailed(performance.now(), error);
        },
      );
  }

  send(frame: Uint8Array): void {
    this.transport?.write(frame);
  }

  disconnect(): void {
    this.attempt++;
    const transport = this.transport;
    this.transport = null;
    if (transport !== null) void transport.close();
  }

  connectSecond(index: number): void {
    const second: Second = { attempt: -1 };
    this.second = second;
    const address = this.settings.addresses[index]!;
    const machine = this.machine;
    // Whose its events are: the second connection's while it is the current one, the claim connection's once
    // promoted (until that is dropped too), nobody's once it was dropped.
    const role = (): "second" | "main" | null => (second === this.second ? "second" : second.attempt >= 0 && second.attempt === this.attempt ? "main" : null);
    this.settings
      .connect(address, this.settings.tls, {
        data: (chunk) => {
          const now = performance.now();
          const r = role();
          if (r === "second") machine.secondData(now, chunk);
          else if (r === "main") machine.data(now, chunk);
        },
        closed: (error) => {
          const now = performance.now();
          const r = role();
          if (r === "second") {
            this.second = null;
            this.secondTransport = null;
            machine.secondClosed(now, error);
          } else if (r === "main") {
            this.attempt++;
            this.transport = null;
            machine.closed(now, error);
          }
        },
      })
      .then(
        (transport) => {
          const r = role();
          if (r === "second") {
            this.secondTransport = transport;
            machine.secondConnected(performance.now());
          } else if (r === "main") {
            this.transport = transport;
            machine.connected(performance.now());
          } else void transport.close();
        },
        (error: unknown) => {
          const r = role();
          if (r === "second") {
            this.second = null;
            machine.secondConnectFailed(performance.now(), error);
          } else if (r === "main") machine.connectFailed(performance.now(), error);
        },
      );
  }

  sendSecond(frame: Uint8Array): void {
    this.secondTransport?.write(frame);
  }

  disconnectSecond(): void {
    const transport = this.secondTransport;
    this.second = null;
    this.secondTransport = null;
    if (transport !== null) void transport.close();
  }

  promoteSecond(): void {
    const second = this.second!;
    const transport = this.secondTransport;
    this.disconnect();
    second.attempt = ++this.attempt;
    this.transport = transport;
    this.second = null;
    this.secondTransport = null;
  }

  arm(at: number): void {
    if (this.timerHandle !== null) clearTimeout(this.timerHandle);
    this.timerHandle = at === Infinity ? null : setTimeout(this.fire, Math.max(0, Math.ceil(at - performance.now())));
  }

  granted(token: bigint, slot: number): void {
    const settle = this.settle!;
    this.settle = null;
    settle.resolve({ token, slot: slot < 0 ? null : slot, signal: this.controller.signal });
  }

  failed(error: unknown): void {
    this.settings.signal?.removeEventListener("abort", this.onAbort);
    const settle = this.settle;
    this.settle = null;
    settle?.reject(error);
  }

  lost(error: LockLostError): void {
    this.settings.signal?.removeEventListener("abort", this.onAbort);
    this.controller.abort(error);
  }

  retry(detail: string, delayMs: number, backoff: boolean): void {
    this.settings.onRetry?.(detail, delayMs, backoff);
  }

  reclaimed(_token: bigint, _slot: number): void {
    this.settings.onReclaim?.();
  }
}

/** A second connection: `attempt` is the claim connection's attempt number once it was promoted, -1 before. */
interface Second {
  attempt: number;
}
