// The /ui board's `lockDelay` field (what the page's lock-delay banner
// shows): null without a delay; while one runs, the DelayView as it stands
// at each answer, also when the rest of the answer is a view shared for the
// interval; null again, in the same interval, once it is over. A real
// LockDelay (core/delay.ts) on the harness's manual clock.
import { EngineLocks } from "../../src/server/locks.ts";
import { afterEach, expect, test } from "bun:test";
import { type DelayView, LockDelay } from "../../src/core/delay.ts";
import type { Engine } from "../../src/core/index.ts";
import type { Conn } from "../../src/server/conn.ts";
import type { HttpReply } from "../../src/ops/http.ts";
import { Board, INTERVAL_MS } from "../../src/ops/ui/board.ts";
import { Harness } from "../helpers/engine.ts";

const boards: Board[] = [];
afterEach(() => {
  for (const board of boards.splice(0)) board.stop();
});

function board(h: Harness, lockDelay?: () => DelayView | null): Board {
  const b = new Board({
    locks: new EngineLocks(h.engine as unknown as Engine<Conn>),
    scanSlice: 16_384,
    version: "0.0.0-test",
    now: () => h.now,
    ...(lockDelay === undefined ? {} : { lockDelay }),
  });
  boards.push(b);
  return b;
}

async function answer(b: Board, query = "sort=name"): Promise<{ reply: HttpReply; body: any }> {
  const reply = await b.handle("GET", "/ui/v1/board", query)!;
  expect(reply.status).toBe(200);
  const text = typeof reply.body === "string" ? reply.body : new TextDecoder().decode(reply.body);
  return { reply, body: JSON.parse(text) };
}

test("without a lock-delay (none given, or none running) the field is null and the built view is shared as it was", async () => {
  const h = new Harness();
  expect((await answer(board(h))).body.lockDelay).toBeNull();
  const b = board(h, () => null);
  const [one, two] = await Promise.all([answer(b), answer(b)]);
  expect(one.body.lockDelay).toBeNull();
  expect(two.reply.body).toBe(one.reply.body); // the same bytes, built once
  expect(b.viewsBuilt).toBe(1);
  expect(Object.keys(one.body).at(-1)).toBe("lockDelay");
});

test("after an unclean restart every name waits: the field counts down at each answer within one shared view, and is null once over", async () => {
  const h = new Harness();
  // As a single server builds it after a run that did not stop cleanly: every name, 0.82 x 20 s.
  const delay = new LockDelay({ why: "restart", until: h.now + 16_400, durableMaxMs: 20_000, raise: () => true });
  const b = board(h, () => delay.view(h.now));
  const first = await answer(b);
  expect(first.body.lockDelay).toEqual({ why: "restart", remainingMs: 16_400, names: 0, everyName: true });

  h.now += 300; // within the interval: the same snapshot and built view, the delay as it stands now
  const second = await answer(b);
  expect(b.snapshotsBuilt).toBe(1);
  expect(b.viewsBuilt).toBe(1);
  expect(second.body.lockDelay).toEqual({ why: "restart", remainingMs: 16_100, names: 0, everyName: true });
  // Everything else is the shared view's.
  expect({ ...second.body, lockDelay: null }).toEqual({ ...first.body, lockDelay: null });

  h.now += 16_100 - 1;
  expect((await answer(b)).body.lockDelay).toEqual({ why: "restart", remainingMs: 1, names: 0, everyName: true });
  h.now += 1;
  const over = await answer(b);
  expect(over.body.lockDelay).toBeNull();
  expect(over.body.version).toBe("0.0.0-test"); // the rest of the answer intact
});

test("after a clean stop only the published names wait: the field says how many are left, each until its own moment", async () => {
  const h = new Harness();
  const names = new Map([
    ["jobs/a", h.now + 4_100],
    ["jobs/b", h.now + 8_200],
    ["jobs/c", h.now + 8_200],
  ]);
  const delay = new LockDelay({ why: "clean-restart", until: 0, names, durableMaxMs: 10_000, raise: () => true });
  const b = board(h, () => delay.view(h.now));
  expect((await answer(b)).body.lockDelay).toEqual({ why: "clean-restart", remainingMs: 8_200, names: 3, everyName: false });
  h.now += INTERVAL_MS * 5; // jobs/a is granted from now on
  expect((await answer(b, "sort=held&dir=desc")).body.lockDelay).toEqual({ why: "clean-restart", remainingMs: 3_200, names: 2, everyName: false });
  h.now += 3_200;
  expect((await answer(b)).body.lockDelay).toBeNull();
});

test("a takeover's delay of every name, then of the names the clean stop published, as the board shows them", async () => {
  const h = new Harness();
  // A takeover of a released row whose active was itself still in its delay: every name 2 s, the published one 6 s.
  const delay = new LockDelay({ why: "released", until: h.now + 2_000, names: new Map([["pay/1", h.now + 6_000]]), durableMaxMs: 1_000, raise: () => false });
  const b = board(h, () => delay.view(h.now));
  expect((await answer(b)).body.lockDelay).toEqual({ why: "released", remainingMs: 6_000, names: 0, everyName: true });
  h.now += 2_000;
  expect((await answer(b)).body.lockDelay).toEqual({ why: "released", remainingMs: 4_000, names: 1, everyName: false });
});
