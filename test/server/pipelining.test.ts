// Pipelining (protocol.md section 7, rule 11): the frames of one read were
// all sent before the client could have read an answer to any of them. At
// most PIPELINE_LIMIT of them are handled; one more ends the session with
// PROTOCOL_ERROR, in the same write as the replies to the others. A peer
// that floods heartbeats is cut at its first oversized read, so it cannot
// hold the event loop, and sessions around it keep their schedule.
import { describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { ErrorCode, FLAG_REPLY, FrameType, PIPELINE_LIMIT, encodeAcquire } from "../../src/protocol/index.ts";
import type { Conn, LockServer } from "../../src/server/index.ts";
import { SCRATCH_SIZE } from "../../src/server/server.ts";
import { watchEnds } from "../helpers/ends.ts";
import { Wakeup } from "../helpers/events.ts";
import { steadyHolder } from "../helpers/steady.ts";
import { WirePeer, startServer } from "../helpers/wire.ts";
import { engineOf } from "../helpers/engine.ts";

const HEARTBEAT = [FrameType.HEARTBEAT, 0, 0, 0];

function heartbeats(count: number): number[] {
  const bytes: number[] = [];
  for (let i = 0; i < count; i++) bytes.push(...HEARTBEAT);
  return bytes;
}

function acquireBytes(name: string, leaseMs: number): number[] {
  return [...encodeAcquire({ name, leaseMs, owner: "", try: false })];
}

/** The server-side Conn of the only session on lock `name`. */
function connOf(server: LockServer, name: string): Conn {
  return [...engineOf(server).sessions.values()].find((s) => s.lock?.name === name)!.conn;
}

/** Record every write the server makes to `conn`'s socket (the calls still go through). */
function spyWrites(conn: Conn): number[] {
  const lengths: number[] = [];
  const socket = conn.socket as Socket<Conn> & { write: Socket<Conn>["write"] };
  const write = socket.write.bind(socket);
  socket.write = ((bytes: Uint8Array, offset = 0, length = bytes.length - offset) => {
    lengths.push(length);
    return write(bytes, offset, length);
  }) as Socket<Conn>["write"];
  return lengths;
}

/**
 * A raw peer that sends ACQUIRE, waits for its answer, then writes
 * `02 00 00 00` as fast as the socket takes it, reading the replies (and
 * dropping them) or not reading at all, until the server has ended its
 * session (a paused socket does not see the close) or `maxBytes` are out.
 */
async function pipeliner(server: LockServer, name: string, reading: boolean, maxBytes = 64 * 1024 * 1024) {
  const port = server.port;
  const events = new Wakeup();
  let received = 0;
  let closed = false;
  const socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      binaryType: "uint8array",
      data(_s, chunk: Uint8Array) {
        received += chunk.length;
        events.wake();
      },
      drain() {
        events.wake();
      },
      close() {
        closed = true;
        events.wake();
      },
      error() {
        events.wake();
      },
    },
  });
  socket.write(new Uint8Array(acquireBytes(name, 60_000)));
  await events.until(() => received >= 4 || closed, 5000, () => "the answer to ACQUIRE");
  if (!reading) socket.pause();
  const flood = new Uint8Array(64 * 1024);
  for (let i = 0; i < flood.length; i += 4) flood[i] = FrameType.HEARTBEAT;
  let sent = 0;
  const deadline = performance.now() + 10_000;
  const session = [...engineOf(server).sessions.values()].find((s) => s.lock?.name === name)!;
  const ended = () => closed || session.endReason >= 0;
  while (!ended() && sent < maxBytes && performance.now() < deadline) {
    const written = socket.write(flood, sent % 4, flood.length - (sent % 4)); // keep frames aligned
    if (written < 0) break;
    sent += written;
    if (written < flood.length) await Bun.sleep(1); // the socket is full: let the server read (no drain event on a paused socket)
  }
  socket.terminate();
  return { ended: ended(), reason: session.endReason, sent };
}

describe("pipelining", () => {
  test("ACQUIRE and PIPELINE_LIMIT - 1 heartbeats in one write are all answered, in one write", async () => {
    await using server = startServer();
    const peer = await WirePeer.connect(server.port);
    peer.write([...acquireBytes("L", 60_000), ...heartbeats(PIPELINE_LIMIT - 1)]);
    await peer.frame(PIPELINE_LIMIT - 1);
    expect(peer.frames.map((f) => [f.type, f.flags])).toEqual(Array(PIPELINE_LIMIT).fill([FrameType.ACQUIRED, FLAG_REPLY]));
    expect(peer.isClosed).toBe(false);
    expect(engineOf(server).stats.pipeliningCuts).toBe(0);
    peer.end();
  });

  test("one read of PIPELINE_LIMIT heartbeats: one write; one frame more: the replies and PROTOCOL_ERROR in one write, then close", async () => {
    await using server = startServer();
    const peer = await WirePeer.claim(server.port, "L", 60_000);
    const writes = spyWrites(connOf(server, "L"));
    peer.write(heartbeats(PIPELINE_LIMIT));
    await peer.frame(PIPELINE_LIMIT);
    expect(writes).toEqual([PIPELINE_LIMIT * 12]);

    writes.length = 0;
    peer.write(heartbeats(PIPELINE_LIMIT + 1));
    await peer.closed();
    const last = peer.frames.slice(PIPELINE_LIMIT + 1);
    expect(last.slice(0, PIPELINE_LIMIT).every((f) => f.type === FrameType.ACQUIRED && f.flags === FLAG_REPLY)).toBe(true);
    const error = last[PIPELINE_LIMIT]!;
    expect([error.type, error.code]).toEqual([FrameType.ERROR, ErrorCode.PROTOCOL_ERROR]);
    expect(error.message).toContain("pipelining");
    expect(last.length).toBe(PIPELINE_LIMIT + 1); // the frame past the limit was not answered
    expect(writes.length).toBe(1);
    expect(writes[0]).toBeLessThanOrEqual(SCRATCH_SIZE);
    expect(engineOf(server).stats.pipeliningCuts).toBe(1);
    expect(engineOf(server).stats.heartbeats).toBe(2 * PIPELINE_LIMIT);
  });

  test("a bad header after valid heartbeats in one read: their replies and the PROTOCOL_ERROR in one write", async () => {
    await using server = startServer();
    const peer = await WirePeer.claim(server.port, "L", 60_000);
    const writes = spyWrites(connOf(server, "L"));
    peer.write([...heartbeats(3), 0x47, 0x45, 0x54, 0x20]); // then "GET "
    await peer.closed();
    expect(peer.frames.slice(1).map((f) => f.type)).toEqual([FrameType.ACQUIRED, FrameType.ACQUIRED, FrameType.ACQUIRED, FrameType.ERROR]);
    expect(peer.frames.at(-1)!.code).toBe(ErrorCode.PROTOCOL_ERROR);
    expect(writes.length).toBe(1);
  });

  for (const reading of [true, false]) {
    test(`a peer flooding heartbeats ${reading ? "and reading" : "without reading"} is cut at once; a holder heartbeating every 50 ms keeps its lock and fresh ACQUIREs are answered`, async () => {
      await using server = startServer();
      const ends = watchEnds(server);
      // Every reply within 2 s and no expiry: a flood that held up the loop would show here.
      // (A 200 ms lease and reply bound also tripped on the 100-300 ms stalls a loaded
      // 2-core machine gives any process now and then, flood or not.)
      const held = await steadyHolder(server.port, "holder", 2000, 50, 2000);
      // Reconnect and flood again, several times: each is cut with PROTOCOL_ERROR.
      for (let round = 0; round < 5; round++) {
        const flood = await pipeliner(server, `flood-${round}`, reading);
        expect([flood.ended, flood.reason]).toEqual([true, ErrorCode.PROTOCOL_ERROR]);
        const fresh = await WirePeer.connect(server.port);
        fresh.acquire(`fresh-${round}`, 5000);
        expect((await fresh.frame(0, 2000)).type).toBe(FrameType.ACQUIRED);
        fresh.end();
      }
      await ends.until((e) => e.filter((x) => x.code === ErrorCode.PROTOCOL_ERROR).length === 5);
      expect(engineOf(server).stats.pipeliningCuts).toBe(5);
      expect(ends.ends.filter((x) => x.code === ErrorCode.LEASE_EXPIRED)).toEqual([]);
      await held.finish();
      expect(held.rtts.length).toBeGreaterThan(0);
      // Each flood was cut after at most PIPELINE_LIMIT heartbeats per read, well before its output could pile up.
      expect(engineOf(server).stats.outboxCuts).toBe(0);
    });
  }
});
