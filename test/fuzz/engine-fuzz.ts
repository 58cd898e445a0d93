/**
 * Fuzz streams through a FrameReader into one Engine, exactly as the
 * server's data handler feeds it (frames to `frame`, a bad header to
 * `protocolError`, the partial flag to `readProgress`), with a control
 * session that holds the lock "control" and heartbeats between cases.
 * Each case's answers are held to `predict`; afterwards the engine must be
 * back to its baseline: one session, one lock, one wheel entry, no waiter.
 */
import { Engine, type Session, SessionState, type EngineOutput } from "../../src/core/index.ts";
import { CLIENT_FRAMES, encodeAcquire, FrameLimits, FrameReader, FrameType, ReadResult } from "../../src/protocol/index.ts";
import type { Rng } from "../sim/prng.ts";
import { judge, predict, type Received } from "./predict.ts";
import { FuzzFailure } from "./reader-fuzz.ts";
import { chunksOf, clientFrame, clientSession, frames, HEARTBEAT, mutate, randomCuts, withBadHeader } from "./streams.ts";

interface FuzzConn {
  readonly received: Received[];
  closed: boolean;
  session: Session<FuzzConn> | null;
}

const LIMITS = new FrameLimits(CLIENT_FRAMES);

/** A stream for one fuzz connection: a plausible session, mutated or not, or worse. */
export function fuzzStream(rng: Rng): Uint8Array {
  switch (rng.weighted([2, 4, 2, 2, 1])) {
    case 0:
      return clientSession(rng);
    case 1: {
      let stream = rng.chance(0.5) ? clientSession(rng) : frames(rng, clientFrame, 4);
      const rounds = rng.range(1, 3);
      for (let i = 0; i < rounds; i++) stream = mutate(rng, stream, () => frames(rng, clientFrame, 2));
      return stream;
    }
    case 2:
      return frames(rng, clientFrame, 5);
    case 3:
      return withBadHeader(rng, rng.chance(0.7) ? clientSession(rng) : new Uint8Array(0)).stream;
    default:
      return rng.bytes(rng.int(100));
  }
}

export class EngineFuzz implements EngineOutput<FuzzConn> {
  readonly engine: Engine<FuzzConn>;
  private now = 1000;
  private readonly control: FuzzConn = { received: [], closed: false, session: null };
  private readonly controlToken: number;
  cases = 0;

  constructor() {
    this.engine = new Engine<FuzzConn>(this, { ioTimeoutMs: 5000 }, this.now);
    const session = this.engine.open(this.control, this.now)!;
    this.control.session = session;
    const acquire = encodeAcquire({ name: "control", leaseMs: 10_000, owner: "control", try: false });
    this.engine.frame(session, FrameType.ACQUIRE, acquire, 4, acquire.length - 4, this.now);
    this.controlToken = session.token;
    if (this.control.received.length !== 1 || session.state !== SessionState.OWNER) throw new FuzzFailure("the control session did not get its lock");
  }

  send(conn: FuzzConn, frame: Uint8Array): void {
    if (conn.closed) throw new FuzzFailure("a frame was sent after the close");
    conn.received.push({ type: frame[0]!, flags: frame[1]!, body: frame.slice(4) });
  }

  close(conn: FuzzConn, frame: Uint8Array | null): void {
    if (conn.closed) throw new FuzzFailure("a connection was closed twice");
    if (frame !== null) conn.received.push({ type: frame[0]!, flags: frame[1]!, body: frame.slice(4) });
    conn.closed = true;
  }

  /** One connection: `stream` in chunks cut at `cuts`, then (if still open) the peer closes. */
  run(stream: Uint8Array, cuts: readonly number[]): void {
    const engine = this.engine;
    const failure = (message: string): FuzzFailure =>
      new FuzzFailure(`${message}; stream ${Array.from(stream.subarray(0, 64), (b) => b.toString(16).padStart(2, "0")).join("")}${stream.length > 64 ? `...(${stream.length})` : ""} cut at [${cuts.join(",")}]`);
    const prediction = predict(stream);
    const lastToken = engine.tokens.last;
    const conn: FuzzConn = { received: [], closed: false, session: null };
    const reader = new FrameReader(LIMITS);
    try {
      const session = engine.open(conn, this.now)!;
      conn.session = session;
      const sink = {
        onFrame: (type: number, _flags: number, bytes: Uint8Array, offset: number, length: number): boolean =>
          engine.frame(session, type, bytes, offset, length, this.now),
      };
      for (const chunk of chunksOf(stream, cuts)) {
        if (conn.closed) break; // the shell reads nothing more for a closed connection
        this.now += 0.25;
        const result = reader.push(chunk, sink);
        if (result === ReadResult.ERROR) engine.protocolError(session, reader.errorMessage, this.now);
        else if (result === ReadResult.OK) engine.readProgress(session, reader.partial, this.now);
      }
      const verdict = judge(conn.received, conn.closed, prediction, lastToken);
      if (verdict.token !== 0 && engine.tokens.last !== verdict.token) throw failure(`token ${engine.tokens.last} issued, the session got ${verdict.token}`);
      if (!conn.closed) engine.closed(session, this.now);
      if (session.state !== SessionState.ENDED) throw failure("the session is still live after its close");
    } catch (error) {
      if (error instanceof FuzzFailure) throw error;
      throw failure(error instanceof Error ? error.message : String(error));
    }
    this.cases++;
    this.checkBaseline(failure);
  }

  /** The control session heartbeats (keeping its lease) and the engine holds nothing else. */
  private checkBaseline(failure: (message: string) => FuzzFailure): void {
    const engine = this.engine;
    const control = this.control.session!;
    this.now += 1;
    engine.frame(control, FrameType.HEARTBEAT, HEARTBEAT, 4, 0, this.now);
    const ack = this.control.received.at(-1)!;
    if (this.control.closed || ack.type !== FrameType.ACQUIRED || (ack.flags & 1) !== 1) throw failure("the control session lost its lock");
    if (new DataView(ack.body.buffer, ack.body.byteOffset).getUint32(4) !== this.controlToken) throw failure("the control session's token changed");
    this.control.received.length = 0;
    engine.tick(this.now);
    const lock = engine.locks.get("control");
    if (engine.sessions.size !== 1 || engine.locks.size !== 1 || engine.wheel.size !== 1 || lock?.owner !== control || lock.waiting !== 0) {
      throw failure(`not back to baseline: ${engine.sessions.size} sessions, ${engine.locks.size} locks, ${engine.wheel.size} wheel entries`);
    }
  }

  /** One random case. */
  randomCase(rng: Rng): void {
    const stream = fuzzStream(rng);
    this.run(stream, randomCuts(rng, stream.length));
  }
}


