/**
 * The simulation's EngineOutput: it records every frame the engine sends and
 * every connection it closes, in call order, for the model to judge. Like
 * the real shell it may re-enter the engine from inside `send`: a short
 * write calls `writeBlocked`, an outbox over its limit calls `timeOut`
 * (LockServer.write / stashOrCut do exactly that). Those re-entries are
 * logged too, at the point where they happen, so the log is one linear
 * story the model can replay.
 */
import type { Engine, Session, EngineOutput } from "../../src/core/index.ts";
import type { Rng } from "./prng.ts";

/** The simulation's connection handle: which model client it belongs to. */
export interface SimConn {
  readonly client: number;
  session: Session<SimConn> | null;
}

export type SimEvent =
  | { readonly kind: "send"; readonly conn: SimConn; readonly frame: Uint8Array }
  | { readonly kind: "close"; readonly conn: SimConn; readonly frame: Uint8Array | null }
  /** The fake socket took only part of a write: the transport called writeBlocked. */
  | { readonly kind: "blocked"; readonly conn: SimConn }
  /** The fake outbox overflowed: the transport called timeOut. */
  | { readonly kind: "cut"; readonly conn: SimConn };

export class SimTransport implements EngineOutput<SimConn> {
  log: SimEvent[] = [];
  engine: Engine<SimConn> | null = null;
  now = 0;
  /** Per send: probability of a short write (writeBlocked) and of an outbox overflow (timeOut). */
  blockChance = 0;
  cutChance = 0;

  constructor(private readonly rng: Rng) {}

  send(conn: SimConn, frame: Uint8Array): void {
    // Copy: the frame is valid only during this call (the engine reuses its push frame).
    this.log.push({ kind: "send", conn, frame: frame.slice() });
    const session = conn.session;
    const engine = this.engine;
    if (session === null || engine === null) return;
    if (this.cutChance > 0 && this.rng.chance(this.cutChance)) {
      this.log.push({ kind: "cut", conn });
      engine.timeOut(session, this.now);
    } else if (this.blockChance > 0 && this.rng.chance(this.blockChance)) {
      this.log.push({ kind: "blocked", conn });
      engine.writeBlocked(session, this.now);
    }
  }

  close(conn: SimConn, frame: Uint8Array | null): void {
    this.log.push({ kind: "close", conn, frame: frame === null ? null : frame.slice() });
  }

  /** The events since the last call. */
  take(): SimEvent[] {
    const events = this.log;
    this.log = [];
    return events;
  }
}
