// A crowd of leases ending in the same millisecond, in a real server: the
// timer callback ends at most EXPIRY_BUDGET of them and the rest come in the
// next loop turns, with socket events served between them.
import { expect, test } from "bun:test";
import { EXPIRY_BUDGET } from "../../src/core/index.ts";
import { FrameType } from "../../src/protocol/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

const CROWD = 4 * EXPIRY_BUDGET + 10;

test("a crowd of expiries is spread over loop turns: no callback ends more than the budget, and every lease still ends", async () => {
  await using server = startServer({ ioTimeoutMs: 5000 });
  // A lease long enough that no claim's lease ends before the last claim is granted.
  const LEASE = 2000;
  const started = performance.now();
  const peers = await Promise.all(Array.from({ length: CROWD }, (_, i) => WirePeer.claim(server.port, `crowd/${i}`, LEASE)));
  const granted = performance.now();
  expect(granted - started).toBeLessThan(LEASE); // else the crowd is not one (the test would prove nothing)
  for (const peer of peers) expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
  // Hold this process (and so the in-process server) past every deadline: when the timer
  // fires, all of them are due at once, as after a pause or a crowd created in one tick.
  const busyUntil = granted + LEASE + 50;
  while (performance.now() < busyUntil) {}
  const engine = engineOf(server);
  const largest = { at: 0 };
  const tick = engine.tick.bind(engine);
  engine.tick = (now: number, budget?: number) => {
    const before = engine.sessions.size;
    const more = tick(now, budget);
    largest.at = Math.max(largest.at, before - engine.sessions.size);
    return more;
  };
  await Promise.all(peers.map((peer) => peer.closed(10_000)));
  expect(engine.sessions.size).toBe(0);
  expect(largest.at).toBeLessThanOrEqual(EXPIRY_BUDGET);
  expect(engine.wheel.cuts).toBe(Math.floor(CROWD / EXPIRY_BUDGET));
});
