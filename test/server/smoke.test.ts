import { expect, test } from "bun:test";
import { FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";

test("acquire, wait, hand over by push", async () => {
  await using server = startServer();
  const a = await WirePeer.claim(server.port, "jobs/nightly", 5000);
  const granted = a.frames[0]!;
  expect(granted.type).toBe(FrameType.ACQUIRED);
  expect(granted.flags & FLAG_REPLY).toBe(FLAG_REPLY);
  const b = await WirePeer.claim(server.port, "jobs/nightly", 5000);
  expect(b.frames[0]!.type).toBe(FrameType.WAITING);
  a.end();
  const pushed = await b.frame(1);
  expect(pushed.type).toBe(FrameType.ACQUIRED);
  expect(pushed.flags & FLAG_REPLY).toBe(0);
  expect(pushed.token!).toBeGreaterThan(granted.token!);
  b.end();
});
