// The engine's grant guard: asked before every grant; a "no" grants nothing.
import { expect, test } from "bun:test";
import { SessionState } from "../../src/core/index.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { Harness } from "../helpers/engine.ts";

function guarded() {
  const guard = {
    open: true,
    confirm: true,
    asked: [] as number[],
    mayGrant(now: number) { this.asked.push(now); return this.open; },
    mayConfirm(_now: number) { return this.confirm; },
  };
  return { h: new Harness({ grantGuard: guard }), guard };
}

test("an ACQUIRE of a free lock is granted only while the guard says yes", () => {
  const { h, guard } = guarded();
  const a = h.client("L", 1000, "a");
  expect(a.sent[0]!.type).toBe(FrameType.ACQUIRED);
  expect(guard.asked).toEqual([h.now]);
  guard.open = false;
  const b = h.client("M", 1000, "b");
  expect(b.sent).toEqual([]);
  expect(b.closed).toBe(true);
  expect(b.closeFrame).toEqual({ type: FrameType.ERROR, flags: 0, code: ErrorCode.SHUTTING_DOWN });
  expect(h.engine.locks.has("M")).toBe(false);
});

test("a waiter is not promoted when the guard says no; it stays queued for the shutdown", () => {
  const { h, guard } = guarded();
  const a = h.client("L", 1000, "a");
  const b = h.client("L", 1000, "b"); // waits: no grant, no question
  expect(guard.asked).toHaveLength(1);
  guard.open = false;
  h.closePeer(a);
  expect(b.sent.map((f) => f.type)).toEqual([FrameType.WAITING]);
  expect(b.session!.state).toBe(SessionState.WAITING);
  expect(h.engine.locks.get("L")!.owner).toBeNull();
  h.engine.shutdown(h.now);
  expect(b.closeFrame?.code).toBe(ErrorCode.SHUTTING_DOWN);
  expect(h.engine.locks.size).toBe(0);
});
