import { expect, test } from "bun:test";
import { FrameType } from "../../src/protocol/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

// setTimeout takes at most 2^31 - 1 ms (24.8 days); a longer delay fires after
// 1 ms instead. Leases go up to 2^32 - 1 ms, so the wheel's next tick can be
// that far away, and a timer armed for it must not turn into a 1 ms spin.
test("a lease beyond setTimeout's 24.8-day limit does not make the wheel timer spin", async () => {
  await using server = startServer({ ioTimeoutMs: 20 });
  const engine = engineOf(server);
  let ticks = 0;
  const tick = engine.tick.bind(engine);
  engine.tick = (now: number, budget?: number) => {
    ticks++;
    return tick(now, budget);
  };
  const peer = await WirePeer.claim(server.port, "long-lease", 2 ** 32 - 1);
  expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
  // The session stays filed at its first-frame deadline (20 ms) until the wheel
  // re-files it at its lease; no event announces that, so poll, bounded.
  const deadline = performance.now() + 5000;
  while (engine.wheel.nextTick() - performance.now() < 2 ** 31 && performance.now() < deadline) await Bun.sleep(5);
  expect(engine.wheel.nextTick() - performance.now()).toBeGreaterThan(2 ** 31);
  // The timer does fire here: it ran the wheel that re-filed the session at its lease.
  const before = ticks;
  expect(before).toBeGreaterThan(0);
  // Nothing is due for weeks: over the next 200 ms the timer must stay quiet.
  await Bun.sleep(200);
  expect(ticks - before).toBeLessThan(5);
  peer.end();
  await peer.closed();
});
