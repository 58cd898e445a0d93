/** The ops listener itself: its connection limit, idle timeout, and HTTP/1.1 handling. */
import { describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import net from "node:net";
import { reservedFds } from "../../src/process/limits.ts";
import { FrameType } from "../../src/protocol/index.ts";
import { MAX_HEAD } from "../../src/ops/http.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { Wakeup } from "../helpers/events.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon } from "./harness.ts";
import { parseExposition, valueOf } from "./promtext.ts";

/** A raw TCP client of the ops port: what it received, and whether the server closed it. */
class RawHttp {
  text = "";
  closed = false;
  private readonly events = new Wakeup();
  private socket!: Socket<undefined>;

  static async connect(port: number): Promise<RawHttp> {
    const raw = new RawHttp();
    raw.socket = await Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        data: (_s, chunk) => {
          raw.text += Buffer.from(chunk).toString("latin1");
          raw.events.wake();
        },
        close: () => {
          raw.closed = true;
          raw.events.wake();
        },
        error: () => {
          raw.closed = true;
          raw.events.wake();
        },
      },
    });
    return raw;
  }

  write(text: string): void {
    this.socket.write(text);
  }

  socketWriteBytes(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }

  end(): void {
    this.socket.end();
  }

  /** Answers received so far: their status codes, in order. */
  get statuses(): number[] {
    return [...this.text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  }

  async untilClosed(): Promise<void> {
    await this.events.until(() => this.closed, 10_000, () => `the server to close the connection (got ${JSON.stringify(this.text.slice(0, 200))})`);
  }

  async untilAnswers(n: number): Promise<void> {
    await this.events.until(() => this.statuses.length >= n && this.text.endsWith("\n"), 10_000, () => `${n} answers (got ${JSON.stringify(this.text.slice(0, 400))})`);
  }
}

describe("connection limit", () => {
  test("beyond --ops-max-connections a connection gets 503 and is closed, while the lock listener still grants", async () => {
    await using ops = startDaemon({ opsLimits: { maxConnections: 4, idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 } });
    const opsPort = ops.daemon.ops.port;
    const idle = await Promise.all(Array.from({ length: 4 }, () => RawHttp.connect(opsPort)));
    // The first answer proves the four are accepted before the next connects.
    idle[0]!.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    await idle[0]!.untilAnswers(1);

    // Let the clock pass a whole second since start: the refusal's Date must be the time it is sent.
    await Bun.sleep(1100);
    const before = Math.floor(Date.now() / 1000) * 1000;
    const extra = await Promise.all(Array.from({ length: 3 }, () => RawHttp.connect(opsPort)));
    for (const raw of extra) {
      await raw.untilClosed();
      expect(raw.statuses).toEqual([503]);
      expect(raw.text).toContain("OPS_BUSY");
      expect(raw.text).toContain("--ops-max-connections");
      const date = /\r\ndate: ([^\r]+)\r\n/i.exec(raw.text)![1]!;
      expect(new Date(date).getTime()).toBeGreaterThanOrEqual(before);
    }
    expect(ops.daemon.ops.connections).toEqual({ open: 4, max: 4, refused: 3 });

    // The lock listener is unaffected: a fresh ACQUIRE is granted.
    const peer = await WirePeer.claim(ops.port, "still-served", 5000);
    expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);

    // The connections that were accepted still work, and they see the refusals in /metrics.
    idle[1]!.write("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    await idle[1]!.untilAnswers(1);
    const m = parseExposition(idle[1]!.text.slice(idle[1]!.text.indexOf("\r\n\r\n") + 4));
    expect(valueOf(m, "lockd_ops_connections", "lockd_ops_connections")).toBe(4);
    expect(valueOf(m, "lockd_ops_max_connections", "lockd_ops_max_connections")).toBe(4);
    expect(valueOf(m, "lockd_ops_connections_refused_total", "lockd_ops_connections_refused_total")).toBe(3);
    expect(ops.logs.some((l) => l.event === "ops.connection_refused")).toBe(true);

    // Once one closes, a new connection is served.
    idle[2]!.end();
    await idle[2]!.untilClosed();
    for (const raw of idle) raw.end();
    await Promise.all(idle.map((raw) => raw.untilClosed()));
    peer.end();
  });

  test("idle connections are closed after --ops-idle-timeout, freeing their places", async () => {
    await using ops = startDaemon({ opsLimits: { maxConnections: 2, idleTimeoutMs: 200, metricsMaxAgeMs: 0 } });
    const opsPort = ops.daemon.ops.port;
    const silent = await RawHttp.connect(opsPort);
    const served = await RawHttp.connect(opsPort);
    served.write("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
    await served.untilAnswers(1);
    // Neither sends anything more: both are closed by the server.
    await silent.untilClosed();
    await served.untilClosed();
    expect(silent.text).toBe("");
    const response = await ops.get("/livez");
    expect(response.status).toBe(200);
    expect(ops.daemon.ops.connections.refused).toBe(0);
  });

  test("a request head that trickles in is cut at the idle timeout even though bytes keep coming", async () => {
    await using ops = startDaemon({ opsLimits: { maxConnections: 4, idleTimeoutMs: 200, metricsMaxAgeMs: 0 } });
    const slow = await RawHttp.connect(ops.daemon.ops.port);
    slow.write("GET /livez HTTP/1.1\r\n");
    let n = 0;
    const drip = setInterval(() => slow.write(`x-drip-${n++}: y\r\n`), 20);
    try {
      await slow.untilClosed();
    } finally {
      clearInterval(drip);
    }
    expect(slow.statuses).toEqual([]);
  });
});

describe("HTTP/1.1 handling", () => {
  test("keep-alive serves several requests on one connection; pipelined requests are answered in order", async () => {
    await using ops = startDaemon();
    const raw = await RawHttp.connect(ops.daemon.ops.port);
    raw.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    await raw.untilAnswers(1);
    raw.write("GET /nope HTTP/1.1\r\nHost: x\r\n\r\nPOST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    await raw.untilClosed();
    expect(raw.statuses).toEqual([200, 404, 405, 200]);
    expect(raw.text).toContain("connection: close");
  });

  test("HEAD has no body; oversized heads, chunked bodies and garbage get an error and a close", async () => {
    await using ops = startDaemon();
    const port = ops.daemon.ops.port;
    const head = await RawHttp.connect(port);
    head.write("HEAD /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    await head.untilClosed();
    expect(head.statuses).toEqual([200]); // HEAD is GET without the body
    expect(head.text).toMatch(/content-length: [1-9]/);
    expect(head.text.endsWith("\r\n\r\n")).toBe(true);

    const cases: [string, number][] = [
      [`GET /livez HTTP/1.1\r\nx-big: ${"a".repeat(MAX_HEAD)}\r\n\r\n`, 431],
      [`GET /livez HTTP/1.1\r\nx-big: ${"a".repeat(MAX_HEAD + 10)}`, 431],
      ["POST /readyz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501],
      ["POST /readyz HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413],
      ["HELLO\r\n\r\n", 400],
      ["GET /livez HTTP/1.1\r\nno colon here\r\n\r\n", 400],
    ];
    for (const [request, status] of cases) {
      const raw = await RawHttp.connect(port);
      raw.write(request);
      await raw.untilClosed();
      expect(raw.statuses, request.slice(0, 40)).toEqual([status]);
    }
    expect((await ops.get("/livez")).status).toBe(200);
  });

  test("names the client did not encode reach the handler percent-encoded as UTF-8", async () => {
    await using ops = startDaemon();
    const peer = await WirePeer.claim(ops.port, "日本", 5000);
    const raw = await RawHttp.connect(ops.daemon.ops.port);
    raw.socketWriteBytes(Buffer.concat([Buffer.from("GET /v1/locks/"), Buffer.from("日本", "utf8"), Buffer.from(" HTTP/1.1\r\nConnection: close\r\n\r\n")]));
    await raw.untilClosed();
    expect(raw.statuses).toEqual([200]);
    const lock = JSON.parse(Buffer.from(raw.text.slice(raw.text.indexOf("\r\n\r\n") + 4), "latin1").toString("utf8"));
    expect(lock.name).toBe("日本");
    expect((await body(await ops.get(`/v1/locks/${encodeURIComponent("日本")}`))).holder.session).toBe(lock.holder.session);
    peer.end();
  });
});

describe("lockd serve (child process)", () => {
  test("--ops-max-connections and --ops-idle-timeout reach the listener and the startup line", async () => {
    await using child = ChildServer.spawn([
      "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s",
      "--ops-max-connections", "2", "--ops-idle-timeout", "30s",
    ]);
    const start = await child.event("server.listening");
    expect(start.opsMaxConnections).toBe(2);
    expect(start.opsIdleTimeoutMs).toBe(30_000);
    const { opsPort, listenPort } = await child.addresses();
    const held = await Promise.all([RawHttp.connect(opsPort), RawHttp.connect(opsPort)]);
    held[0]!.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    held[1]!.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    await Promise.all(held.map((raw) => raw.untilAnswers(1)));
    const third = await RawHttp.connect(opsPort);
    await third.untilClosed();
    expect(third.statuses).toEqual([503]);
    const peer = await WirePeer.claim(listenPort, "child-lock", 5000);
    expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
    peer.end();
    for (const raw of held) raw.end();
    child.proc.kill("SIGTERM");
    expect(await child.exit()).toBe(0);
  });

  test("a larger limit makes --max-sessions auto keep as many more descriptors aside; a bad value names the flag", async () => {
    await using wide = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--ops-max-connections", "500"]);
    const started = await wide.event("server.listening");
    expect(started.opsMaxConnections).toBe(500);
    const soft = started.openFileLimit.soft as number | null;
    if (soft !== null && Number.isFinite(soft)) {
      expect(started.sessionCapacity).toBe(Math.max(0, soft - reservedFds(500)));
      expect(reservedFds(500) - reservedFds()).toBe(500 - 64);
    }
    wide.proc.kill("SIGTERM");
    expect(await wide.exit()).toBe(0);
    await using bad = ChildServer.spawn(["serve", "--ops-max-connections", "0"], { LOCKD_OPS_IDLE_TIMEOUT: "forever" });
    expect(await bad.exit()).toBe(64);
    expect(bad.raw.sort()).toEqual([
      'lockd serve: --ops-idle-timeout (from LOCKD_OPS_IDLE_TIMEOUT): "forever" is not a duration (examples: 250ms, 5s, 2m)',
      'lockd serve: --ops-max-connections: "0" is not a whole number in 1..1024',
    ]);
  });
});

describe("a client that half-closes", () => {
  test("gets answers to every complete request it sent, then the close", async () => {
    await using ops = startDaemon();
    // node:net, because a Bun client socket stops reading once it calls end().
    let text = "";
    const closed = new Promise<void>((resolve) => {
      const socket = net.connect({ host: "127.0.0.1", port: ops.daemon.ops.port, allowHalfOpen: true });
      socket.on("data", (chunk) => (text += chunk.toString("latin1")));
      socket.on("close", () => resolve());
      socket.on("error", () => resolve());
      socket.on("connect", () => {
        socket.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\n");
        socket.end();
      });
    });
    await closed;
    expect([...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]))).toEqual([200, 200]);
  });
});
