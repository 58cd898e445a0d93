/** Fuzz streams through a FrameReader into the engine (see engine-fuzz.ts): CI-sized and seeded. */
import { describe, expect, test } from "bun:test";
import { CLOSED_BY_PEER } from "../../src/core/session.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { Rng } from "../sim/prng.ts";
import { EngineFuzz } from "./engine-fuzz.ts";
import { judge, predict } from "./predict.ts";
import { goodAcquire, HEARTBEAT, concat } from "./streams.ts";

describe("engine fuzz", () => {
  test("20,000 fuzz connections get the answers protocol.md gives, and leave nothing behind", () => {
    const fuzz = new EngineFuzz();
    const rng = new Rng(11);
    for (let i = 0; i < 20_000; i++) fuzz.randomCase(rng);
    const ends = fuzz.engine.stats.ends;
    // The mix reaches every way a bad stream ends.
    for (const code of [ErrorCode.PROTOCOL_ERROR, ErrorCode.BAD_REQUEST, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.LOCK_BUSY]) {
      expect(ends[code]!).toBeGreaterThan(100);
    }
    expect(ends[CLOSED_BY_PEER]!).toBeGreaterThan(1000); // and many stay alive until their peer closes
  }, 30_000); // about 1 s here; generous for a loaded 2-core machine

  test("the judge refuses answers that differ from the prediction", () => {
    const acquire = goodAcquire(new Rng(5));
    const p = predict(concat([acquire, HEARTBEAT]));
    const waiting = { type: FrameType.WAITING, flags: 1, body: new Uint8Array(0) };
    const error = { type: FrameType.ERROR, flags: 0, body: new Uint8Array([ErrorCode.BAD_REQUEST]) };
    expect(() => judge([waiting, waiting, waiting], false, p, 0)).toThrow();
    expect(() => judge([error], true, predict(HEARTBEAT), 0)).toThrow();
    expect(() => judge([{ ...error, body: new Uint8Array([ErrorCode.PROTOCOL_ERROR]) }], true, predict(HEARTBEAT), 0)).not.toThrow();
  });
});
