// The shell's write path with a scripted socket: short writes keep their
// remainder in order, drain flushes it, and output dropped at the outbox
// limit ends the connection with a reset, never a frame glued to half a frame.
import { afterEach, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { ErrorCode, FrameType, encodeAcquire } from "../../src/protocol/index.ts";
import { Conn, LockServer } from "../../src/server/index.ts";
import { engineOf } from "../helpers/engine.ts";

class ScriptedSocket {
  taken: number[] = [];
  /** How many bytes the next writes accept (a queue; Infinity when empty). */
  accept: number[] = [];
  calls: string[] = [];
  write(bytes: Uint8Array, offset = 0, length = bytes.length - offset): number {
    const n = Math.min(length, this.accept.shift() ?? Infinity);
    this.taken.push(...bytes.subarray(offset, offset + n));
    this.calls.push(`write ${length}->${n}`);
    return n;
  }
  end(): void {
    this.calls.push("end");
  }
  terminate(): void {
    this.calls.push("terminate");
  }
}

const servers: LockServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
});

function setup(outboxLimit = 64 * 1024) {
  const server = new LockServer({ hostname: "127.0.0.1", port: 0, ioTimeoutMs: 5000, outboxLimit });
  servers.push(server);
  const socket = new ScriptedSocket();
  const conn = new Conn(socket as unknown as Socket<Conn>, server);
  conn.session = engineOf(server).open(conn, performance.now());
  const acquire = encodeAcquire({ name: "L", leaseMs: 60_000, owner: "", try: false });
  engineOf(server).frame(conn.session!, FrameType.ACQUIRE, acquire, 4, acquire.length - 4, performance.now());
  socket.calls.length = 0;
  socket.taken.length = 0;
  return { server, socket, conn };
}

describe("outbox", () => {
  test("a short write keeps the rest, later frames queue behind it, drain sends all in order", () => {
    const { server, socket, conn } = setup();
    socket.accept = [5];
    server.send(conn, new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]));
    server.send(conn, new Uint8Array([9, 10]));
    expect(conn.pendingOutput).toBe(5);
    expect(socket.calls).toEqual(["write 8->5"]); // the second frame did not overtake the first
    expect(conn.session!.writeDeadline).toBeLessThan(Infinity);
    socket.accept = [0];
    expect(conn.flush()).toBe(false);
    expect(conn.flush()).toBe(true);
    expect(socket.taken).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  test("output past the limit after a torn frame: the session ends with a reset, no ERROR frame", () => {
    const { server, socket, conn } = setup(1024);
    socket.accept = [100];
    server.send(conn, new Uint8Array(4000)); // 100 bytes out, 3900 would exceed the limit
    expect(socket.calls).toEqual(["write 4000->100", "terminate"]);
    expect(conn.session!.endReason).toBe(ErrorCode.IO_TIMEOUT);
    expect(engineOf(server).sessions.size).toBe(0);
  });

  test("an ERROR on a healthy connection is written whole, then FIN", () => {
    const { server, socket, conn } = setup();
    engineOf(server).forceRelease("L", performance.now());
    expect(socket.calls[0]).toMatch(/^write \d+->\d+$/);
    expect(socket.calls[1]).toBe("end");
    expect(socket.taken[0]).toBe(FrameType.ERROR);
    expect(socket.taken[4]).toBe(ErrorCode.FORCE_RELEASED);
  });
});
