/** The ops listener itself (Bun.serve): no connection cap, its idle timeouts, and HTTP/1.1 handling. */
import { describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import net from "node:net";
import { reservedFds } from "../../src/process/limits.ts";
import { ANSWERS_PER_TURN } from "../../src/ops/http.ts";
import { FrameType } from "../../src/protocol/index.ts";
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

  async untilClosed(ms = 10_000): Promise<void> {
    await this.events.until(() => this.closed, ms, () => `the server to close the connection (got ${JSON.stringify(this.text.slice(0, 200))})`);
  }

  async untilAnswers(n: number): Promise<void> {
    await this.events.until(() => this.statuses.length >= n && this.text.endsWith("\n"), 10_000, () => `${n} answers (got ${JSON.stringify(this.text.slice(0, 400))})`);
  }
}

describe("no connection cap (Bun.serve)", () => {
  test("many more connections than --ops-max-connections are all served, while the lock listener grants", async () => {
    await using ops = startDaemon();
    const opsPort = ops.daemon.ops.port;
    // 100 keep-alive connections, each with a request answered and left open: 64 was the old cap.
    const open = await Promise.all(Array.from({ length: 100 }, () => RawHttp.connect(opsPort)));
    for (const raw of open) raw.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await Promise.all(open.map((raw) => raw.untilAnswers(1)));
    expect(open.every((raw) => raw.statuses[0] === 200)).toBe(true);

    const peer = await WirePeer.claim(ops.port, "still-served", 5000);
    expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);

    // One of them scrapes: the requests in flight count the scrape itself; no connection gauges any more.
    open[0]!.write("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await open[0]!.untilAnswers(2);
    const text = open[0]!.text;
    const m = parseExposition(text.slice(text.lastIndexOf("\r\n\r\n") + 4));
    expect(valueOf(m, "lockd_ops_requests_in_flight", "lockd_ops_requests_in_flight")).toBeGreaterThanOrEqual(1);
    expect(m.has("lockd_ops_connections_refused_total")).toBe(false);
    for (const raw of open) raw.end();
    await Promise.all(open.map((raw) => raw.untilClosed()));
    peer.end();
  });

  test("a connection is closed once --ops-idle-timeout passes without a byte after its answer (Bun checks every 4 s)", async () => {
    await using ops = startDaemon({ opsLimits: { idleTimeoutMs: 1000, metricsMaxAgeMs: 0 } });
    const served = await RawHttp.connect(ops.daemon.ops.port);
    served.write("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await served.untilAnswers(1);
    const answered = performance.now();
    expect(served.text.toLowerCase()).toContain("keep-alive: timeout=1\r\n");
    await served.untilClosed();
    // At the first 4-second tick of Bun's clock past the timeout: between 1 and about 5 s.
    expect(performance.now() - answered).toBeGreaterThanOrEqual(900);
    expect(served.statuses).toEqual([200]);
  });

  test("a connection that never completes a request head is closed by Bun's own first-request timeout (about 10 s), even while bytes trickle in", async () => {
    await using ops = startDaemon({ opsLimits: { idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 } });
    const opened = performance.now();
    const silent = await RawHttp.connect(ops.daemon.ops.port);
    const slow = await RawHttp.connect(ops.daemon.ops.port);
    slow.write("GET /livez HTTP/1.1\r\n");
    let n = 0;
    const drip = setInterval(() => slow.write(`x-drip-${n++}: y\r\n`), 100);
    try {
      await Promise.all([silent.untilClosed(20_000), slow.untilClosed(20_000)]);
    } finally {
      clearInterval(drip);
    }
    // Not the 60 s idle timeout: Bun's timeout for a request head, whatever --ops-idle-timeout says.
    expect(performance.now() - opened).toBeLessThan(20_000);
    expect(silent.text).toBe("");
    expect(slow.statuses).toEqual([]);
  }, 30_000);
});

describe("HTTP/1.1 handling", () => {
  test("keep-alive serves several requests on one connection; pipelining more than one turn's answers closes it", async () => {
    await using ops = startDaemon();
    const raw = await RawHttp.connect(ops.daemon.ops.port);
    const requests = ["GET /livez", "GET /nope", "POST /readyz", "GET /readyz"];
    for (const [i, line] of requests.entries()) {
      raw.write(`${line} HTTP/1.1\r\nHost: 127.0.0.1\r\n${line.startsWith("POST") ? "Content-Length: 3\r\n\r\nabc" : "\r\n"}`);
      await raw.untilAnswers(i + 1);
    }
    expect(raw.statuses).toEqual([200, 404, 405, 200]);
    expect(raw.closed).toBe(false);
    raw.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(1000));
    await raw.untilClosed();
    expect(raw.statuses.length).toBeGreaterThan(4);
    expect(raw.statuses.length).toBeLessThanOrEqual(4 + ANSWERS_PER_TURN);
  });

  test("HEAD has no body; oversized heads and garbage get Bun's error and a close; a chunked body 501", async () => {
    await using ops = startDaemon();
    const port = ops.daemon.ops.port;
    const head = await RawHttp.connect(port);
    head.write("HEAD /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    await head.untilClosed();
    expect(head.statuses).toEqual([200]); // HEAD is GET without the body
    expect(head.text).toMatch(/content-length: [1-9]/i);
    expect(head.text.endsWith("\r\n\r\n")).toBe(true);

    const cases: [string, number][] = [
      [`GET /livez HTTP/1.1\r\nx-big: ${"a".repeat(16 * 1024)}\r\n\r\n`, 431],
      [`GET /livez HTTP/1.1\r\nx-big: ${"a".repeat(16 * 1024 + 10)}`, 431],
      ["POST /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n", 501],
      ["POST /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999\r\n\r\n", 413],
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
    raw.socketWriteBytes(Buffer.concat([Buffer.from("GET /v1/locks/"), Buffer.from("日本", "utf8"), Buffer.from(" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")]));
    await raw.untilClosed();
    expect(raw.statuses).toEqual([200]);
    const lock = JSON.parse(Buffer.from(raw.text.slice(raw.text.indexOf("\r\n\r\n") + 4), "latin1").toString("utf8"));
    expect(lock.name).toBe("日本");
    expect((await body(await ops.get(`/v1/locks/${encodeURIComponent("日本")}`))).holder.session).toBe(lock.holder.session);
    peer.end();
  });
});

describe("lockd serve (child process)", () => {
  test("--ops-max-connections and --ops-idle-timeout reach the startup line; more ops connections than the reserve are served", async () => {
    await using child = ChildServer.spawn([
      "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s",
      "--ops-max-connections", "2", "--ops-idle-timeout", "30s",
    ]);
    const start = await child.event("server.listening");
    expect(start.opsMaxConnections).toBe(2);
    expect(start.opsIdleTimeoutMs).toBe(30_000);
    const { opsPort, listenPort } = await child.addresses();
    const held = await Promise.all([RawHttp.connect(opsPort), RawHttp.connect(opsPort), RawHttp.connect(opsPort)]);
    for (const raw of held) raw.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await Promise.all(held.map((raw) => raw.untilAnswers(1)));
    expect(held.map((raw) => raw.statuses)).toEqual([[200], [200], [200]]);
    expect(held[0]!.text.toLowerCase()).toContain("keep-alive: timeout=30\r\n");
    const peer = await WirePeer.claim(listenPort, "child-lock", 5000);
    expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
    peer.end();
    for (const raw of held) raw.end();
    child.proc.kill("SIGTERM");
    expect(await child.exit()).toBe(0);
  });

  test("a larger --ops-max-connections makes --max-sessions auto keep as many more descriptors aside; a bad value names the flag", async () => {
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
  test("gets the answer to the request it sent, then the close", async () => {
    await using ops = startDaemon();
    // node:net, because a Bun client socket stops reading once it calls end().
    let text = "";
    const closed = new Promise<void>((resolve) => {
      const socket = net.connect({ host: "127.0.0.1", port: ops.daemon.ops.port, allowHalfOpen: true });
      socket.on("data", (chunk) => (text += chunk.toString("latin1")));
      socket.on("close", () => resolve());
      socket.on("error", () => resolve());
      socket.on("connect", () => {
        socket.write("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        socket.end();
      });
    });
    await closed;
    expect([...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]))).toEqual([200]);
  });
});
