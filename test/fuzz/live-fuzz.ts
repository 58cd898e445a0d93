/**
 * Fuzz streams over real sockets into an in-process LockServer.
 *
 * A control session holds the lock "control" throughout and heartbeats
 * after every case; each fuzz connection writes its stream in random
 * pieces and must get the answers `predict` gives (over real time a short
 * lease may run out first: LEASE_EXPIRED is then accepted, never earlier
 * than the lease after the ACQUIRE was written). A stream the server should
 * not end is proven alive with a heartbeat round trip before the peer
 * closes it.
 *
 * Every stream is cut after its PIPELINE_LIMIT-th complete frame: a peer
 * writes its whole stream without waiting for answers, and the server ends
 * a session that gets more than that many frames in one read (protocol.md
 * section 7, rule 11; test/server/pipelining.test.ts), which depends on how
 * the pieces coalesce and so cannot be predicted here. Longer pipelines are
 * fuzzed against the engine directly (engine-fuzz.ts).
 *
 * Bun hands an exception thrown by a socket handler to the `error` handler,
 * and LockServer's treats it as the peer going away: a crash would look like
 * a close. So the engine's entry points are wrapped to record anything they
 * throw, and the count of sessions ended by their peer must equal the
 * closes this code made itself.
 */
import { CLOSED_BY_PEER } from "../../src/core/session.ts";
import type { LockServer } from "../../src/server/index.ts";
import { CLIENT_FRAMES, FrameType, PIPELINE_LIMIT } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";
import type { Rng } from "../sim/prng.ts";
import { fuzzStream } from "./engine-fuzz.ts";
import { judge, predict, type Prediction } from "./predict.ts";
import { FuzzFailure } from "./reader-fuzz.ts";
import { referenceParse } from "./reference.ts";
import { chunksOf, randomCuts } from "./streams.ts";
import { engineOf } from "../helpers/engine.ts";

const WRAPPED = ["open", "frame", "readProgress", "protocolError", "closed", "tick", "writeBlocked", "writeDrained", "timeOut"] as const;

export interface LiveResult {
  readonly cases: number;
  readonly ended: number;
  readonly expired: number;
  readonly crowds: number;
  readonly thrown: unknown[];
}

/** Record every exception the engine throws while `server` runs (it is rethrown as before). */
export function watchThrows(server: LockServer): unknown[] {
  const thrown: unknown[] = [];
  const engine = engineOf(server) as unknown as Record<string, (...args: unknown[]) => unknown>;
  for (const name of WRAPPED) {
    const original = engine[name]!.bind(engine);
    engine[name] = (...args: unknown[]) => {
      try {
        return original(...args);
      } catch (error) {
        thrown.push(error);
        throw error;
      }
    };
  }
  return thrown;
}

export async function liveFuzz(server: LockServer, rng: Rng, cases: number, thrown: unknown[]): Promise<LiveResult> {
  const engine = engineOf(server);
  const control = await WirePeer.claim(server.port, "control", 10_000, { owner: "control" });
  const grant = control.frames[0]!;
  if (grant.type !== FrameType.ACQUIRED) throw new FuzzFailure(`control did not get its lock: ${control.describe()}`);
  const peerClosesBefore = engine.stats.ends[CLOSED_BY_PEER]!;
  let myCloses = 0;
  /** Closes that may race a short lease's expiry: counted by the server either way. */
  let racing = 0;
  let ended = 0;
  let expired = 0;
  let crowds = 0;
  for (let n = 0; n < cases; n++) {
    const stream = withinPipelineLimit(fuzzStream(rng));
    const cuts = randomCuts(rng, Math.min(stream.length, 64));
    const prediction = predict(stream);
    const lastToken = engine.tokens.last;
    const peer = await WirePeer.connect(server.port);
    const sentAt = performance.now();
    for (const chunk of chunksOf(stream, cuts)) {
      if (chunk.length > 0) peer.write(chunk);
      if (rng.chance(0.3)) await Promise.resolve(); // let some pieces go out as their own segments
    }
    const where = (): string => `case ${n}: stream ${Array.from(stream.subarray(0, 64), (b) => b.toString(16).padStart(2, "0")).join("")} -> ${peer.describe()}`;
    try {
      const outcome = await settle(peer, prediction);
      const verdict = judge(peer.frames, peer.isClosed, outcome.prediction, Number(lastToken), true);
      if (verdict.expired) {
        // Never before the lease: the server cannot have seen the ACQUIRE before it was written.
        if (peer.closedAt - sentAt < prediction.leaseMs) throw new Error(`LEASE_EXPIRED ${peer.closedAt - sentAt} ms after the ACQUIRE, lease ${prediction.leaseMs}`);
        expired++;
      }
      if (peer.isClosed) ended++;
      else {
        peer.end();
        if (prediction.accepted && prediction.leaseMs < 5000) racing++;
        else myCloses++;
        await peer.closed();
      }
    } catch (error) {
      peer.terminate();
      throw new FuzzFailure(`${error instanceof Error ? error.message : String(error)}; ${where()}`);
    }
    // The control session keeps its lock and its token through everything.
    const index = control.frames.length;
    control.heartbeat();
    const ack = await control.frame(index);
    if (ack.type !== FrameType.ACQUIRED || ack.token !== grant.token || control.isClosed) throw new FuzzFailure(`control lost its lock after ${where()}`);
    if (thrown.length > 0) throw new FuzzFailure(`the engine threw ${String(thrown[0])} during ${where()}`);
    // Every so often: contention over real sockets, then only the control session left.
    if ((n + 1) % 50 === 0) {
      myCloses += await crowdRound(server, rng);
      crowds++;
    }
    if ((n + 1) % 100 === 0) await baseline(server, 1, `after case ${n}`);
  }
  control.end();
  await control.closed();
  myCloses++;
  await baseline(server, 0, "at the end");
  // A handler that threw would have been counted as a peer close.
  const peerCloses = engine.stats.ends[CLOSED_BY_PEER]! - peerClosesBefore;
  if (peerCloses < myCloses || peerCloses > myCloses + racing) {
    throw new FuzzFailure(`${peerCloses} sessions ended as if by their peer, but the peers closed ${myCloses} (+${racing} racing their lease)`);
  }
  return { cases, ended, expired, crowds, thrown };
}

/** `stream` up to the end of its PIPELINE_LIMIT-th complete frame (all of it when it has fewer). */
function withinPipelineLimit(stream: Uint8Array): Uint8Array {
  const frames = referenceParse(stream, CLIENT_FRAMES).frames;
  return frames.length <= PIPELINE_LIMIT ? stream : stream.subarray(0, frames[PIPELINE_LIMIT - 1]!.end);
}

/**
 * Wait until the connection has shown what it will: the close when the
 * prediction ends it, else the answers so far plus, for an accepted claim
 * on a frame boundary, one more heartbeat round trip.
 */
async function settle(peer: WirePeer, prediction: Prediction): Promise<{ prediction: Prediction }> {
  const expired = (): boolean => peer.frames.some((f) => f.type === FrameType.ERROR);
  if (prediction.ends) {
    await peer.until(() => peer.isClosed, 5000, "the close");
    return { prediction };
  }
  await peer.until(() => peer.frames.length >= prediction.replies.length || peer.isClosed, 5000, "the replies");
  if (!prediction.accepted || prediction.partial || expired() || peer.isClosed) return { prediction };
  peer.heartbeat();
  await peer.until(() => peer.frames.length > prediction.replies.length || peer.isClosed, 5000, "the heartbeat reply");
  const grant = prediction.replies.some((r) => r.kind === "grant");
  const extended: Prediction = { ...prediction, replies: [...prediction.replies, { kind: grant ? "ack" : "ack-wait" }] };
  return { prediction: extended };
}

/**
 * Wait until the server holds only `sessions` sessions (and as many connections,
 * and one lock per session). Bun reports the server side of a close a little
 * after the peer sees it and no event reaches the test for that, so poll, bounded.
 */
async function baseline(server: LockServer, sessions: number, when: string): Promise<void> {
  const engine = engineOf(server);
  const deadline = performance.now() + 5000;
  while ((server.connectionCount > sessions || engine.sessions.size > sessions) && performance.now() < deadline) await Bun.sleep(2);
  if (server.connectionCount !== sessions || engine.sessions.size !== sessions || engine.locks.size !== sessions || engine.wheel.size !== sessions) {
    throw new FuzzFailure(
      `${when}: ${server.connectionCount} connections, ${engine.sessions.size} sessions, ${engine.locks.size} locks, ` +
        `${engine.wheel.size} wheel entries; expected ${sessions} of each`,
    );
  }
}

/**
 * A crowd on one lock: 2..8 peers claim "crowd" one after another, then close
 * in random order. Whenever the owner goes, the longest waiter must get
 * ACQUIRED pushed (REPLY clear) with a larger token; a waiter that goes
 * leaves the order of the rest alone. Returns the number of peer closes.
 */
async function crowdRound(server: LockServer, rng: Rng): Promise<number> {
  const engine = engineOf(server);
  const size = rng.range(2, 8);
  const queue: WirePeer[] = [];
  let token = 0n;
  for (let i = 0; i < size; i++) {
    const peer = await WirePeer.claim(server.port, "crowd", 60_000, { owner: `crowd-${i}` });
    const reply = peer.frames[0]!;
    const expected = i === 0 ? FrameType.ACQUIRED : FrameType.WAITING;
    if (reply.type !== expected || (reply.flags & 1) !== 1) throw new FuzzFailure(`crowd peer ${i} got ${peer.describe()}`);
    if (i === 0) token = reply.token!;
    queue.push(peer);
  }
  const sessionsBefore = engine.sessions.size;
  let closes = 0;
  while (queue.length > 0) {
    const at = rng.int(queue.length);
    const [leaving] = queue.splice(at, 1);
    leaving!.end();
    await leaving!.closed();
    closes++;
    if (at === 0 && queue.length > 0) {
      const head = queue[0]!;
      const pushed = await head.frame(1);
      if (pushed.type !== FrameType.ACQUIRED || (pushed.flags & 1) !== 0 || !(pushed.token! > token)) {
        throw new FuzzFailure(`crowd: the head waiter got ${head.describe()} after the owner left (last token ${token})`);
      }
      token = pushed.token!;
    } else {
      // A waiter left: the server must have forgotten it before the owner's next close,
      // or it could be promoted as it goes. No event says so: poll, bounded.
      const deadline = performance.now() + 5000;
      while (engine.sessions.size > sessionsBefore - closes && performance.now() < deadline) await Bun.sleep(1);
      if (engine.sessions.size !== sessionsBefore - closes) {
        throw new FuzzFailure(`crowd: ${engine.sessions.size} sessions 5 s after a waiter left, expected ${sessionsBefore - closes}`);
      }
    }
    for (const peer of queue.slice(1)) {
      if (peer.frames.length !== 1) throw new FuzzFailure(`crowd: a waiter not at the head got ${peer.describe()}`);
    }
  }
  return closes;
}
