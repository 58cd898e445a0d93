/**
 * A well-behaved session for tests that need one beside the misbehaving
 * ones: it holds its own lock and heartbeats on the client's schedule (one
 * heartbeat in flight, `intervalMs` after each reply), checks that every
 * reply is ACQUIRED with its token, and records each round trip.
 */
import { expect } from "bun:test";
import { FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { WirePeer } from "./wire.ts";

export interface SteadyHolder {
  /** Round trips of the heartbeats answered so far, ms. */
  readonly rtts: number[];
  /** Stop heartbeating, check the session was never ended, and close it. */
  finish(): Promise<void>;
}

export async function steadyHolder(port: number, name: string, leaseMs: number, intervalMs = leaseMs / 4, replyTimeoutMs = leaseMs): Promise<SteadyHolder> {
  const peer = await WirePeer.claim(port, name, leaseMs);
  const first = peer.frames[0]!;
  expect(first.type).toBe(FrameType.ACQUIRED);
  const rtts: number[] = [];
  let stop = false;
  const loop = (async () => {
    let next = 1;
    while (!stop) {
      await Bun.sleep(intervalMs); // the heartbeat interval of the schedule, not synchronisation
      const sent = performance.now();
      peer.heartbeat();
      const reply = await peer.frame(next++, replyTimeoutMs);
      rtts.push(reply.at - sent);
      expect([reply.type, reply.flags, reply.token]).toEqual([FrameType.ACQUIRED, FLAG_REPLY, first.token]);
    }
  })();
  return {
    rtts,
    async finish() {
      stop = true;
      await loop;
      expect(peer.isClosed).toBe(false);
      peer.end();
    },
  };
}
