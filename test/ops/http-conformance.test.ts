/**
 * The ops listener (src/ops/http.ts) as an attacker and a picky HTTP
 * client see it: framing that a proxy in front could read differently
 * (smuggling), malformed heads, pipelining and half-close, the bounds on
 * connections, the shape of every answer, the admin check, and a real Node
 * `http` client with keep-alive.
 */
import { describe, expect, test } from "bun:test";
import net from "node:net";
import tls from "node:tls";
import { FrameType } from "../../src/protocol/index.ts";
import { MAX_HEAD } from "../../src/ops/http.ts";
import { suiteCerts, hasOpenssl } from "../helpers/certs.ts";
import { Wakeup } from "../helpers/events.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon } from "./harness.ts";

const TOKEN = "conformance-admin-token";

interface Answer {
  readonly status: number;
  readonly reason: string;
  /** Header names in lower case; a repeated header keeps its last value. */
  readonly headers: Map<string, string>;
  readonly body: string;
}

/**
 * Split a byte stream of answers (latin1 text) by their Content-Length, as a
 * strict client would: every answer must have a well-formed status line and
 * a Content-Length, else this throws.
 */
function parseAnswers(text: string, heads: readonly boolean[] = []): Answer[] {
  const answers: Answer[] = [];
  let at = 0;
  while (at < text.length) {
    const end = text.indexOf("\r\n\r\n", at);
    if (end < 0) throw new Error(`an incomplete answer head: ${JSON.stringify(text.slice(at, at + 200))}`);
    const lines = text.slice(at, end).split("\r\n");
    const line = /^HTTP\/1\.1 ([1-5]\d\d) ([A-Za-z][A-Za-z -]*)$/.exec(lines[0]!);
    if (line === null) throw new Error(`a malformed status line: ${JSON.stringify(lines[0])}`);
    const headers = new Map<string, string>();
    for (const h of lines.slice(1)) {
      const m = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+): ?(.*)$/.exec(h);
      if (m === null) throw new Error(`a malformed answer header: ${JSON.stringify(h)}`);
      headers.set(m[1]!.toLowerCase(), m[2]!);
    }
    const status = Number(line[1]);
    at = end + 4;
    if (status === 100) {
      answers.push({ status, reason: line[2]!, headers, body: "" });
      continue;
    }
    const length = headers.get("content-length");
    if (length === undefined || !/^\d+$/.test(length)) throw new Error(`an answer without Content-Length: ${JSON.stringify(lines)}`);
    const isHead = heads[answers.filter((a) => a.status !== 100).length] === true;
    const n = isHead ? 0 : Number(length);
    if (at + n > text.length) throw new Error(`an answer body shorter than its Content-Length ${n}`);
    answers.push({ status, reason: line[2]!, headers, body: text.slice(at, at + n) });
    at += n;
  }
  return answers;
}

/** A raw client of the ops port (node:net, so it can half-close and keep reading). */
class Raw {
  text = "";
  closed = false;
  private readonly events = new Wakeup();
  private readonly socket: net.Socket;

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.on("data", (chunk) => {
      this.text += chunk.toString("latin1");
      this.events.wake();
    });
    const gone = () => {
      this.closed = true;
      this.events.wake();
    };
    // The server's FIN is its close: with allowHalfOpen the socket itself stays open until we end too.
    socket.on("end", () => {
      gone();
      socket.end();
    });
    socket.on("close", gone);
    socket.on("error", gone);
  }

  static connect(port: number): Promise<Raw> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: "127.0.0.1", port, allowHalfOpen: true });
      socket.once("connect", () => resolve(new Raw(socket)));
      socket.once("error", reject);
    });
  }

  write(data: string | Uint8Array): Promise<void> {
    return new Promise((resolve) => this.socket.write(typeof data === "string" ? Buffer.from(data, "latin1") : data, () => resolve()));
  }

  end(): void {
    this.socket.end();
  }

  destroy(): void {
    this.socket.destroy();
  }

  answers(heads?: readonly boolean[]): Answer[] {
    return parseAnswers(this.text, heads);
  }

  async untilClosed(): Promise<void> {
    await this.events.until(() => this.closed, 10_000, () => `the server to close (got ${JSON.stringify(this.text.slice(0, 300))})`);
  }

  /** Until `n` complete answers (by Content-Length) have arrived. */
  async untilAnswers(n: number): Promise<Answer[]> {
    return await this.events.until(
      () => {
        try {
          const answers = parseAnswers(this.text).filter((a) => a.status !== 100);
          return answers.length >= n ? answers : null;
        } catch {
          return null;
        }
      },
      10_000,
      () => `${n} answers (got ${JSON.stringify(this.text.slice(0, 400))})`,
    );
  }
}

/** Send `request` on a fresh connection and collect everything until the server closes. */
async function exchange(port: number, request: string | Uint8Array): Promise<Raw> {
  const raw = await Raw.connect(port);
  await raw.write(request);
  await raw.untilClosed();
  return raw;
}

const LONG_IDLE = { maxConnections: 16, idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 };

describe("framing: whatever a proxy in front might read differently is refused, and the connection closed", () => {
  // Each request is followed by a pipelined GET /readyz: a refused request must not let it through.
  const NEXT = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
  const cases: [string, string, number, string][] = [
    ["Content-Length and Transfer-Encoding", "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501, "BODY_NOT_ACCEPTED"],
    ["two different Content-Lengths", "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n", 400, "BAD_REQUEST"],
    ["a Content-Length list", "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc", 400, "BAD_REQUEST"],
    ["a negative Content-Length", "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "BAD_REQUEST"],
    ["a hex Content-Length", "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc", 400, "BAD_REQUEST"],
    ["a Content-Length with a trailing NBSP", "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 3\xa0\r\n\r\nabc", 400, "BAD_REQUEST"],
    ["a bare LF inside a header line", "GET /livez HTTP/1.1\r\nX-A: a\nContent-Length: 5\r\nHost: x\r\n\r\n", 400, "BAD_REQUEST"],
    ["a bare CR inside a header line", "GET /livez HTTP/1.1\r\nX-A: a\rContent-Length: 5\r\nHost: x\r\n\r\n", 400, "BAD_REQUEST"],
    ["a NUL in a header value", "GET /livez HTTP/1.1\r\nX-A: a\x00b\r\nHost: x\r\n\r\n", 400, "BAD_REQUEST"],
    ["a NUL in the target", "GET /livez\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "BAD_REQUEST"],
    ["obs-fold", "GET /livez HTTP/1.1\r\nX-A: a\r\n b\r\nHost: x\r\n\r\n", 400, "BAD_REQUEST"],
    ["a space before the colon", "GET /livez HTTP/1.1\r\nHost : x\r\n\r\n", 400, "BAD_REQUEST"],
    ["two different Hosts", "GET /livez HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "BAD_REQUEST"],
    ["two different Authorizations", "POST /v1/sessions/1/kick HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n", 400, "BAD_REQUEST"],
    ["a relative target", "GET livez HTTP/1.1\r\nHost: x\r\n\r\n", 400, "BAD_REQUEST"],
    ["an unknown expectation", "GET /livez HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", 417, "EXPECTATION_FAILED"],
    ["HTTP/2", "GET /livez HTTP/2.0\r\nHost: x\r\n\r\n", 505, "VERSION_NOT_SUPPORTED"],
    ["a request line over the head limit", `GET /${"a".repeat(MAX_HEAD)} HTTP/1.1\r\nHost: x\r\n\r\n`, 414, "URI_TOO_LONG"],
    ["too many header lines", `GET /livez HTTP/1.1\r\n${"X-A: b\r\n".repeat(101)}\r\n`, 431, "HEAD_TOO_LARGE"],
  ];
  for (const [what, request, status, code] of cases) {
    test(`${what}: ${status}`, async () => {
      await using ops = startDaemon({ adminToken: TOKEN, opsLimits: LONG_IDLE });
      const raw = await exchange(ops.daemon.ops.port, request + NEXT);
      const answers = raw.answers();
      expect(answers.map((a) => a.status)).toEqual([status]);
      expect(answers[0]!.headers.get("connection")).toBe("close");
      expect(answers[0]!.headers.get("content-type")).toBe("application/json; charset=utf-8");
      expect(answers[0]!.headers.get("cache-control")).toBe("no-store");
      expect(JSON.parse(answers[0]!.body).error.code).toBe(code);
    });
  }

  test("a head with bare LF line ends is refused at once, not left to the idle timeout", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    // No CRLFCRLF ever comes: without the check this waits a minute for the idle timeout.
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("GET /livez HTTP/1.1\nHost: x\n\n");
    await raw.untilClosed();
    expect(raw.answers().map((a) => a.status)).toEqual([400]);
  });

  test("a TLS ClientHello on the plaintext port is answered 400 at once (as main does since b709e32)", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write(new Uint8Array([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]));
    await raw.untilClosed();
    expect(raw.answers().map((a) => a.status)).toEqual([400]);
  });

  test("accepted leniencies: an empty line before the request line, the same Content-Length twice, a body on GET", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await exchange(
      ops.daemon.ops.port,
      "\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n" +
        "GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc" +
        "GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nGET /",
    );
    expect(raw.answers().map((a) => a.status)).toEqual([200, 200, 200]);
  });

  test("Connection is a list: close anywhere in it (or in a repeated header) closes", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    for (const connection of ["Connection: close\r\nConnection: keep-alive", "Connection: keep-alive, Close", "Connection: keep-alive\r\nConnection: close"]) {
      const raw = await exchange(ops.daemon.ops.port, `GET /livez HTTP/1.1\r\nHost: x\r\n${connection}\r\n\r\n`);
      const answers = raw.answers();
      expect(answers.map((a) => a.status), connection).toEqual([200]);
      expect(answers[0]!.headers.get("connection")).toBe("close");
    }
  });

  test("HTTP/1.0 closes after its answer; HTTP/1.1 keeps the connection and says for how long", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const old = await exchange(ops.daemon.ops.port, "GET /livez HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    expect(old.answers().map((a) => [a.status, a.headers.get("connection")])).toEqual([[200, "close"]]);

    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    const [answer] = await raw.untilAnswers(1);
    expect(answer!.headers.get("connection")).toBeUndefined();
    // 60 s idle timeout: clients that read the hint (undici, hence Node's fetch) drop the connection first.
    expect(answer!.headers.get("keep-alive")).toBe("timeout=60");
    raw.destroy();
  });

  test("Expect: 100-continue with a body not sent yet is answered at once, then closed", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    // A client that waits for 100 Continue before its body: without an answer it would wait for
    // its own timeout (1 s for curl), and the server for the body.
    await raw.write("POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n");
    await raw.untilClosed();
    const answers = raw.answers();
    expect(answers.map((a) => a.status)).toEqual([405]);
    expect(answers[0]!.headers.get("connection")).toBe("close");
  });

  test("a request split byte by byte, and one whose head and body come apart, are served", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    const request = "GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab";
    for (const byte of request) await raw.write(byte);
    const [answer] = await raw.untilAnswers(1);
    expect(answer!.status).toBe(200);
    await raw.write("GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n");
    await raw.write("abc");
    expect((await raw.untilAnswers(2)).map((a) => a.status)).toEqual([200, 200]);
    raw.destroy();
  });
});

describe("request targets", () => {
  test("absolute form is routed by its path; OPTIONS * is answered; .. and percent-encoding are not resolved", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const peer = await WirePeer.claim(ops.port, "a/../b", 5000);
    expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
    const raw = await exchange(
      ops.daemon.ops.port,
      "GET http://lockd.example:9/livez HTTP/1.1\r\nHost: lockd.example:9\r\n\r\n" +
        "GET HTTP://lockd.example HTTP/1.1\r\nHost: x\r\n\r\n" +
        "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" +
        "GET /v1/locks/a/../b HTTP/1.1\r\nHost: x\r\n\r\n" +
        "GET /v1/locks/a%2F..%2Fb HTTP/1.1\r\nHost: x\r\n\r\n" +
        "GET /v1/locks/../metrics HTTP/1.1\r\nHost: x\r\n\r\n" +
        "GET /v1/locks?name=a%2F..%2Fb&name=other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    const answers = raw.answers();
    expect(answers.map((a) => a.status)).toEqual([200, 404, 200, 200, 200, 404, 200]);
    expect(answers[2]!.headers.get("allow")).toBe("GET, POST");
    expect(JSON.parse(answers[3]!.body).name).toBe("a/../b");
    expect(JSON.parse(answers[4]!.body).name).toBe("a/../b");
    expect(JSON.parse(answers[5]!.body).error.code).toBe("NO_SUCH_LOCK");
    // Repeated keys: the first one counts.
    expect(JSON.parse(answers[6]!.body).name).toBe("a/../b");
    peer.end();
  });
});

describe("answers", () => {
  test("every answer has a status line, Content-Length, nosniff, and JSON errors that do not reflect HTML", async () => {
    await using ops = startDaemon({ adminToken: TOKEN, opsLimits: LONG_IDLE });
    const requests = [
      "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /<script>alert(1)</script> HTTP/1.1\r\nHost: x\r\n\r\n",
      'GET /v1/locks/%3Cimg%20src=x%20onerror=alert(1)%3E"</b> HTTP/1.1\r\nHost: x\r\n\r\n',
      "HEAD /livez HTTP/1.1\r\nHost: x\r\n\r\n",
      "DELETE /v1/locks/x HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /v1/sessions/1/kick HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ];
    const raw = await exchange(ops.daemon.ops.port, requests.join(""));
    const answers = raw.answers([false, false, false, false, true, false, false]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 404, 404, 200, 405, 401]); // HEAD is GET without the body
    for (const answer of answers) {
      expect(answer.headers.get("x-content-type-options")).toBe("nosniff");
      if (answer.status >= 400) expect(answer.headers.get("content-type")).toBe("application/json; charset=utf-8");
    }
    expect(answers[4]!.body).toBe("");
    expect(Number(answers[4]!.headers.get("content-length"))).toBeGreaterThan(0);
    // The reflected path is a JSON string inside a JSON document, never served as HTML.
    expect(JSON.parse(answers[2]!.body).error.message).toContain("<script>");
    expect(answers.map((a) => a.reason)).toEqual(["OK", "OK", "Not Found", "Not Found", "OK", "Method Not Allowed", "Unauthorized"]);
  });

  test("errors from the parser to a HEAD request have no body either", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await exchange(ops.daemon.ops.port, "HEAD /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n");
    const [answer] = raw.answers([true]);
    expect(answer!.status).toBe(413);
    expect(raw.text.endsWith("\r\n\r\n")).toBe(true);
  });
});

describe("admin actions", () => {
  test("every spelling of an admin action needs the token; malformed Authorization headers get 401, never 500", async () => {
    await using ops = startDaemon({ adminToken: TOKEN, opsLimits: LONG_IDLE });
    const peers = [await WirePeer.connect(ops.port), await WirePeer.connect(ops.port)];
    peers[0]!.acquire("held", 10_000);
    await peers[0]!.frame(0);
    peers[1]!.acquire("held", 10_000);
    await peers[1]!.frame(0);
    const targets = [
      "/v1/locks/held/force-release",
      "/v1/locks/force-release?name=held",
      "/v1/locks/%68eld/force-release",
      "http://x/v1/locks/held/force-release",
      "/v1/locks/held/force-release#frag",
      "/v1/sessions/2/kick",
      "/v1/sessions/2/kick?x=1",
      "HTTP://x/v1/sessions/2/kick",
    ];
    const authorizations = [
      null,
      "",
      "Bearer",
      "Bearer ",
      `Bearer  ${TOKEN} x`,
      `Basic ${btoa(`admin:${TOKEN}`)}`,
      `Bearer ${TOKEN}\xff`,
      `bearer\t${TOKEN}x`,
      `Bearer ${"A".repeat(8000)}`,
      `Bearer ${TOKEN.slice(0, -1)}`,
    ];
    const raw = await Raw.connect(ops.daemon.ops.port);
    let n = 0;
    for (const target of targets) {
      for (const authorization of authorizations) {
        await raw.write(`POST ${target} HTTP/1.1\r\nHost: x\r\n${authorization === null ? "" : `Authorization: ${authorization}\r\n`}\r\n`);
        const answers = await raw.untilAnswers(++n);
        expect(answers[n - 1]!.status, `${target} with ${JSON.stringify(authorization)?.slice(0, 40)}`).toBe(401);
      }
    }
    raw.destroy();
    expect(ops.daemon.server.engine.locks.get("held")?.owner?.id).toBe(1);
    expect(ops.daemon.server.engine.sessions.size).toBe(2);
    // And the token still works, in either case of the scheme.
    const ok = await exchange(ops.daemon.ops.port, `POST /v1/sessions/2/kick HTTP/1.1\r\nHost: x\r\nAuthorization: bearer ${TOKEN}\r\nConnection: close\r\n\r\n`);
    expect(ok.answers().map((a) => a.status)).toEqual([200]);
    for (const peer of peers) peer.end();
  });
});

describe("connections", () => {
  test("a slow body is cut at the idle timeout however it trickles, and its place is freed", async () => {
    await using ops = startDaemon({ opsLimits: { maxConnections: 1, idleTimeoutMs: 200, metricsMaxAgeMs: 0 } });
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 16000\r\n\r\n");
    let sent = 0;
    const drip = setInterval(() => void raw.write("x").then(() => sent++), 20);
    try {
      await raw.untilClosed();
    } finally {
      clearInterval(drip);
    }
    expect(raw.text).toBe("");
    expect(sent).toBeLessThan(16000);
    const next = await exchange(ops.daemon.ops.port, "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    expect(next.answers().map((a) => a.status)).toEqual([200]);
  });

  test("a client that pipelines requests and never reads its answers is cut at the idle timeout", async () => {
    await using ops = startDaemon({ opsLimits: { maxConnections: 2, idleTimeoutMs: 200, metricsMaxAgeMs: 60_000 } });
    const socket = net.connect({ host: "127.0.0.1", port: ops.daemon.ops.port });
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    socket.pause(); // never reads: the answers (about 8 KiB each) fill both kernel buffers
    socket.on("error", () => {});
    // ~2,000 requests, under the 112 KiB of input a connection may hold, ~16 MB of answers.
    socket.write("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000));
    const events = new Wakeup();
    const tick = setInterval(() => events.wake(), 10);
    try {
      await events.until(() => ops.daemon.ops.connections.open === 0, 10_000, () => `the unread connection to be closed (open ${ops.daemon.ops.connections.open})`);
    } finally {
      clearInterval(tick);
      socket.destroy();
    }
    const next = await exchange(ops.daemon.ops.port, "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    expect(next.answers().map((a) => a.status)).toEqual([200]);
  });

  test("a body far over the limit sent in one go gets its 413, then a clean close and no reset", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    // Megabytes arrive in reads larger than the bytes a connection may hold behind an answer, and
    // keep arriving after the answer: neither may turn into a reset that destroys the answer.
    const request = Buffer.concat([Buffer.from("POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000\r\n\r\n"), Buffer.alloc(4_000_000, 0x61)]);
    for (let i = 0; i < 3; i++) {
      const outcome = await new Promise<{ text: string; error: string | null }>((resolve) => {
        let text = "";
        let error: string | null = null;
        const socket = net.connect({ host: "127.0.0.1", port: ops.daemon.ops.port });
        socket.on("connect", () => socket.write(request, () => {}));
        socket.on("data", (chunk) => (text += chunk.toString("latin1")));
        socket.on("error", (e) => (error = e.message));
        socket.on("close", () => resolve({ text, error }));
      });
      expect(outcome.error).toBeNull();
      expect(parseAnswers(outcome.text).map((a) => a.status)).toEqual([413]);
    }
  });

  test("after a refusal, what the client keeps sending is discarded, and the connection still counts until the idle timeout", async () => {
    await using ops = startDaemon({ opsLimits: { maxConnections: 1, idleTimeoutMs: 2000, metricsMaxAgeMs: 0 } });
    // A client that never closes its side (Raw would answer the server's FIN with its own).
    const socket = net.connect({ host: "127.0.0.1", port: ops.daemon.ops.port, allowHalfOpen: true });
    const events = new Wakeup();
    let text = "";
    socket.on("data", (chunk) => {
      text += chunk.toString("latin1");
      events.wake();
    });
    socket.on("error", () => {});
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    socket.write("POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n");
    await events.until(() => text.endsWith("}\n"), 10_000, () => `the 413 (got ${JSON.stringify(text)})`);
    expect(parseAnswers(text).map((a) => a.status)).toEqual([413]);
    // Our FIN is sent, the body may still come: the connection is open and counted until the idle timeout.
    expect(ops.daemon.ops.connections.open).toBe(1);
    const drip = setInterval(() => socket.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"), 20);
    const tick = setInterval(() => events.wake(), 10);
    try {
      await events.until(() => ops.daemon.ops.connections.open === 0, 10_000, () => "the draining connection to be closed");
    } finally {
      clearInterval(tick);
      clearInterval(drip);
      socket.destroy();
    }
    // Nothing it sent after the refusal was answered.
    expect(parseAnswers(text).map((a) => a.status)).toEqual([413]);
  });

  test("a client that half-closes mid-request gets the answers to its complete requests only", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\nPOST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nabc");
    raw.end();
    await raw.untilClosed();
    expect(raw.answers().map((a) => a.status)).toEqual([200, 200]);
    expect(ops.daemon.ops.connections.open).toBe(0);
  });

  test("many connections at once, ending every way a connection can: the open count returns to zero", async () => {
    await using ops = startDaemon({ opsLimits: { maxConnections: 12, idleTimeoutMs: 300, metricsMaxAgeMs: 0 } });
    const port = ops.daemon.ops.port;
    const endings: ((socket: net.Socket) => void)[] = [
      (s) => s.end("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"), // half-close after a request
      (s) => s.write("GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), // server closes
      (s) => s.write("GET /livez HTTP/1.1\r\nHo"), // incomplete head: idle timeout
      (s) => s.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n", () => s.destroy()), // vanishes mid-answer
      (s) => s.resetAndDestroy(), // RST
      (s) => s.write("BAD\r\n\r\n"), // refused with 400, then drained
      (s) => s.write("POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"), // slow body: idle timeout
      () => {}, // silent: idle timeout
    ];
    const closed: Promise<void>[] = [];
    for (let i = 0; i < 40; i++) {
      const socket = net.connect({ host: "127.0.0.1", port });
      socket.on("data", () => {});
      socket.on("error", () => {});
      closed.push(new Promise((resolve) => socket.on("close", () => resolve())));
      socket.on("connect", () => endings[i % endings.length]!(socket));
    }
    await Promise.all(closed);
    const events = new Wakeup();
    const tick = setInterval(() => events.wake(), 10);
    try {
      await events.until(() => ops.daemon.ops.connections.open === 0, 10_000, () => `open ${ops.daemon.ops.connections.open}`);
    } finally {
      clearInterval(tick);
    }
    // And the listener still serves.
    const raw = await exchange(port, "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    expect(raw.answers().map((a) => a.status)).toEqual([200]);
  });

  describe.skipIf(!hasOpenssl)("over HTTPS (--ops-tls-cert)", () => {
    const certs = suiteCerts();

    test("failed handshakes leave no connection counted; a half-closing HTTPS client is answered", async () => {
      await using ops = startDaemon({
        opsTls: { cert: certs.serverCert, key: certs.serverKey },
        opsLimits: { maxConnections: 2, idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 },
      });
      const port = ops.daemon.ops.port;
      const settled = (socket: net.Socket) => new Promise<void>((resolve) => {
        socket.on("close", () => resolve());
        socket.on("error", () => resolve());
        socket.on("data", () => {});
      });
      // Plain HTTP to the HTTPS port, a client that refuses the certificate, a client that hangs up mid-handshake:
      // more of them than the limit, one after the other.
      for (let i = 0; i < 3; i++) {
        const plain = net.connect({ host: "127.0.0.1", port });
        plain.on("connect", () => plain.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"));
        await settled(plain);
        await settled(tls.connect({ host: "127.0.0.1", port, rejectUnauthorized: true }));
        const hangup = net.connect({ host: "127.0.0.1", port });
        hangup.on("connect", () => hangup.write(Buffer.from([0x16, 0x03, 0x01, 0x00])));
        hangup.on("connect", () => hangup.end());
        await settled(hangup);
      }
      const text = await new Promise<string>((resolve) => {
        let got = "";
        const options: tls.ConnectionOptions = { host: "127.0.0.1", port, ca: certs.caCert };
        const socket = tls.connect(Object.assign(options, { allowHalfOpen: true }));
        socket.on("secureConnect", () => {
          socket.write("GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
          socket.end();
        });
        socket.on("data", (chunk) => (got += chunk.toString("latin1")));
        socket.on("close", () => resolve(got));
        socket.on("error", (error) => resolve(got + String(error)));
      });
      expect(parseAnswers(text).map((a) => a.status)).toEqual([200, 200]);
      // The server's close callbacks may run after the clients saw the close: wait for the count, bounded.
      const events = new Wakeup();
      const tick = setInterval(() => events.wake(), 10);
      try {
        await events.until(() => ops.daemon.ops.connections.open === 0, 5000, () => `open ${ops.daemon.ops.connections.open}`);
      } finally {
        clearInterval(tick);
      }
      expect(ops.daemon.ops.connections.refused).toBe(0);
    });
  });
});

describe("a real Node http client", () => {
  test("keep-alive: one connection serves sequential requests, honours Connection: close, and reads every answer", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const script = `
      import http from "node:http";
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      const port = Number(process.argv[1]);
      const get = (path, headers = {}, method = "GET") => new Promise((resolve, reject) => {
        const req = http.request({ host: "127.0.0.1", port, path, agent, method, headers }, (res) => {
          let body = "";
          res.setEncoding("latin1");
          res.on("data", (d) => (body += d));
          res.on("end", () => resolve({ status: res.statusCode, reused: req.reusedSocket, keepAlive: res.headers["keep-alive"] ?? null,
            connection: res.headers.connection ?? null, length: Number(res.headers["content-length"]), body: body.length, local: req.socket.localPort }));
        });
        req.on("error", reject);
        req.setTimeout(10000, () => req.destroy(new Error("timeout")));
        req.end();
      });
      const out = [];
      out.push(await get("/livez"));
      out.push(await get("/metrics"));
      out.push(await get("/livez", {}, "HEAD"));
      out.push(await get("/nope"));
      out.push(await get("/readyz", { connection: "close" }));
      out.push(await get("/livez"));
      console.log(JSON.stringify(out));
      agent.destroy();
    `;
    const child = Bun.spawn(["node", "--input-type=module", "-e", script, String(ops.daemon.ops.port)], { stdout: "pipe", stderr: "pipe" });
    const timer = setTimeout(() => child.kill(), 15_000);
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    clearTimeout(timer);
    expect(stderr).toBe("");
    expect(code).toBe(0);
    const results = JSON.parse(stdout) as { status: number; reused: boolean; keepAlive: string | null; connection: string | null; length: number; body: number; local: number }[];
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 404, 200, 200]); // the HEAD: GET without the body
    // The first five share one connection; after Connection: close the sixth needs a new one.
    expect(results.map((r) => r.reused)).toEqual([false, true, true, true, true, false]);
    expect(new Set(results.slice(0, 5).map((r) => r.local)).size).toBe(1);
    expect(results[5]!.local).not.toBe(results[0]!.local);
    expect(results[4]!.connection).toBe("close");
    expect(results[0]!.keepAlive).toBe("timeout=60");
    for (const [i, r] of results.entries()) if (i !== 2) expect(r.body).toBe(r.length);
    expect(results[2]!.body).toBe(0);
  });
});
