import { expect, test } from "bun:test";
import { Engine, type EngineOutput } from "../../src/core/index.ts";
import { decodeAcquire, encodeAcquire, FrameType } from "../../src/protocol/index.ts";

// protocol.md: "Lock names are compared byte for byte." A default TextDecoder
// drops a leading U+FEFF (BOM), which made "\uFEFFjobs" the lock "jobs" and
// "\uFEFF" the empty name.
function acquireBody(name: string, owner = ""): Uint8Array {
  return encodeAcquire({ name, leaseMs: 1000, owner, try: false });
}

test("a leading U+FEFF stays part of the name and the owner", () => {
  const frame = acquireBody("\ufeffjobs", "\ufeffme");
  const decoded = decodeAcquire(frame, 4, frame.length - 4);
  expect(decoded.ok && decoded.request.name).toBe("\ufeffjobs");
  expect(decoded.ok && decoded.request.owner).toBe("\ufeffme");
  const bomOnly = acquireBody("\ufeff");
  const alone = decodeAcquire(bomOnly, 4, bomOnly.length - 4);
  expect(alone.ok && alone.request.name).toBe("\ufeff");
});

test("names that differ only by a leading U+FEFF are different locks", () => {
  const sent: [number, Uint8Array][] = [];
  const transport: EngineOutput<number> = { send: (conn, frame) => sent.push([conn, frame]), close: () => {} };
  const engine = new Engine<number>(transport, { ioTimeoutMs: 5000 }, 0);
  for (const [conn, name] of [[1, "jobs"], [2, "\ufeffjobs"]] as const) {
    const session = engine.open(conn, 0)!;
    const frame = acquireBody(name);
    engine.frame(session, frame[0]!, frame, 4, frame.length - 4, 0);
  }
  expect(sent.map(([conn, frame]) => [conn, frame[0]])).toEqual([
    [1, FrameType.ACQUIRED],
    [2, FrameType.ACQUIRED],
  ]);
  expect([...engine.locks.keys()]).toEqual(["jobs", "\ufeffjobs"]);
});
