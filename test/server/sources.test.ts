// --max-sessions-per-source over real sockets: sessions past the limit from
// one address get ERROR OVERLOADED and a close, other addresses (127.0.0.2
// here) are served, a closed session gives its place back, and `lockd serve`
// takes the flag and shows it in its startup line.
import { ENGINE_WORDS } from "../../src/cli/words.ts";
import { describe, expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import type { LockServer } from "../../src/server/index.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { BoundPeer } from "../helpers/bound.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

/** Bun reports the server side of a close a little after the peer sees it, with no event the test can await: poll, bounded. */
async function sessionsFrom(server: LockServer, source: string, count: number): Promise<void> {
  const deadline = performance.now() + 5000;
  while ((engineOf(server).sources.get(source) ?? 0) !== count) {
    if (performance.now() > deadline) throw new Error(`${source} still has ${engineOf(server).sources.get(source)} sessions, want ${count}`);
    await Bun.sleep(1);
  }
}

describe("--max-sessions-per-source", () => {
  test("the third session from 127.0.0.1 is refused with OVERLOADED; 127.0.0.2 is served; a close frees a place", async () => {
    await using server = startServer({ maxSessionsPerSource: 2, words: ENGINE_WORDS }); // the words lockd serve gives: its flag
    const first = await WirePeer.connect(server.port);
    const second = await WirePeer.connect(server.port);
    first.acquire("a", 60_000);
    second.acquire("b", 60_000);
    expect((await first.frame(0)).type).toBe(FrameType.ACQUIRED);
    expect((await second.frame(0)).type).toBe(FrameType.ACQUIRED);

    const third = await WirePeer.connect(server.port);
    const refused = await third.frame(0);
    expect([refused.type, refused.code]).toEqual([FrameType.ERROR, ErrorCode.OVERLOADED]);
    expect(refused.message).toContain("--max-sessions-per-source");
    await third.closed();

    const other = await BoundPeer.connect(server.port, "127.0.0.2");
    other.acquire("c");
    await other.until(() => other.frames[0], "the answer from 127.0.0.2's ACQUIRE");
    expect(other.frames[0]!.type).toBe(FrameType.ACQUIRED);
    expect(Object.fromEntries(engineOf(server).sources)).toEqual({ "127.0.0.1": 2, "127.0.0.2": 1 });
    expect(engineOf(server).stats.refusedSourceLimit).toBe(1);

    first.end();
    await sessionsFrom(server, "127.0.0.1", 1);
    const fourth = await WirePeer.claim(server.port, "d", 60_000);
    expect(fourth.frames[0]!.type).toBe(FrameType.ACQUIRED);
    second.end();
    fourth.end();
    other.end();
  });

  test("lockd serve: the flag reaches the lock listener and the startup line", async () => {
    await using child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--max-sessions-per-source", "1"]);
    const start = await child.event("server.listening");
    expect(start.maxSessionsPerSource).toBe(1);
    const { listenPort } = await child.addresses();
    const one = await WirePeer.claim(listenPort, "x", 60_000);
    expect(one.frames[0]!.type).toBe(FrameType.ACQUIRED);
    const two = await WirePeer.connect(listenPort);
    expect((await two.frame(0)).code).toBe(ErrorCode.OVERLOADED);
    one.end();
  });

  test("lockd serve: off by default", async () => {
    await using child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"]);
    expect((await child.event("server.listening")).maxSessionsPerSource).toBe("off");
  });
});
