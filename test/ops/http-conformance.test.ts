/**
 * The ops listener (src/ops/http.ts, on Bun.serve) as an attacker and a
 * picky HTTP client see it: framing that a proxy in front could read
 * differently (smuggling) and malformed heads, refused by Bun's parser;
 * pipelining and half-close; the bounds on a connection; the shape of every
 * answer; the admin check; and a real Node `http` client with keep-alive.
 */
import { describe, expect, test } from "bun:test";
import net from "node:net";
import tls from "node:tls";
import { ANSWERS_PER_TURN } from "../../src/ops/http.ts";
import { FrameType } from "../../src/protocol/index.ts";
import { suiteCerts, hasOpenssl } from "../helpers/certs.ts";
import { Wakeup } from "../helpers/events.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon } from "./harness.ts";
import { engineOf } from "../helpers/engine.ts";

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
 * a Content-Length, else this throws; except the answers of Bun's parser to
 * a request it refuses, which have `Connection: close` and no
 * Content-Length: their body runs to the close (and is empty).
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
    if (length === undefined && headers.get("connection") === "close") {
      answers.push({ status, reason: line[2]!, headers, body: text.slice(at) });
      break;
    }
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
  async untilAnswers(n: number, heads: readonly boolean[] = []): Promise<Answer[]> {
    return await this.events.until(
      () => {
        try {
          const answers = parseAnswers(this.text, heads).filter((a) => a.status !== 100);
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

/**
 * Send `requests` on one connection one after the other, each once the
 * answer before it has arrived (as every HTTP client but a pipelining one
 * does), the last with Connection: close; collect everything until the
 * server closes. `heads[i]`: request i is a HEAD (its answer has no body).
 */
async function sequence(port: number, requests: readonly string[], heads: readonly boolean[] = []): Promise<Raw> {
  const raw = await Raw.connect(port);
  for (let i = 0; i < requests.length; i++) {
    await raw.write(requests[i]!);
    if (i < requests.length - 1) await raw.untilAnswers(i + 1, heads);
  }
  await raw.untilClosed();
  return raw;
}

const LONG_IDLE = { idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 };

describe("framing: whatever a proxy in front might read differently is refused, and the connection closed", () => {
  // Each request is followed by a pipelined GET /readyz: a refused request must not let it through.
  const NEXT = "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  // code null: refused by Bun's parser, before the ops server sees it (a status line and Connection: close, no JSON).
  const cases: [string, string, number, string | null][] = [
    ["Content-Length and Transfer-Encoding", "POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, null],
    ["Transfer-Encoding alone (no endpoint reads a body)", "POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501, "BODY_NOT_ACCEPTED"],
    ["two different Content-Lengths", "POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n", 400, null],
    ["a Content-Length list", "POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3, 3\r\n\r\nabc", 400, null],
    ["a negative Content-Length", "POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n", 400, null],
    ["a hex Content-Length", "POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0x3\r\n\r\nabc", 400, null],
    ["a Content-Length with a trailing NBSP", "POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\xa0\r\n\r\nabc", 400, null],
    ["a bare LF inside a header line", "GET /livez HTTP/1.1\r\nX-A: a\nContent-Length: 5\r\nHost: 127.0.0.1\r\n\r\n", 400, null],
    ["a bare CR inside a header line", "GET /livez HTTP/1.1\r\nX-A: a\rContent-Length: 5\r\nHost: 127.0.0.1\r\n\r\n", 400, null],
    ["a NUL in a header value", "GET /livez HTTP/1.1\r\nX-A: a\x00b\r\nHost: 127.0.0.1\r\n\r\n", 400, null],
    ["a NUL in the target", "GET /livez\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 505, null],
    ["obs-fold", "GET /livez HTTP/1.1\r\nX-A: a\r\n b\r\nHost: 127.0.0.1\r\n\r\n", 400, null],
    ["a space before the colon", "GET /livez HTTP/1.1\r\nHost : x\r\n\r\n", 400, null],
    ["HTTP/1.1 without Host", "GET /livez HTTP/1.1\r\n\r\n", 400, null],
    ["an empty line before the request line", "\r\nGET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, null],
    ["a relative target", "GET livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, null],
    ["OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, null],
    ["an unknown expectation", "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: teapot\r\n\r\n", 417, "EXPECTATION_FAILED"],
    ["HTTP/2", "GET /livez HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505, null],
    ["a request line over the head limit", `GET /${"a".repeat(16 * 1024)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`, 431, null],
    ["too many header lines", `GET /livez HTTP/1.1\r\n${"X-A: b\r\n".repeat(101)}\r\n`, 400, null],
  ];
  for (const [what, request, status, code] of cases) {
    test(`${what}: ${status}`, async () => {
      await using ops = startDaemon({ adminToken: TOKEN, opsLimits: LONG_IDLE });
      const raw = await exchange(ops.daemon.ops.port, request + NEXT);
      const answers = raw.answers();
      expect(answers.map((a) => a.status)).toEqual([status]);
      expect(answers[0]!.headers.get("connection")).toBe("close");
      if (code === null) {
        expect(answers[0]!.body).toBe("");
      } else {
        expect(answers[0]!.headers.get("content-type")).toBe("application/json; charset=utf-8");
        expect(answers[0]!.headers.get("cache-control")).toBe("no-store");
        expect(JSON.parse(answers[0]!.body).error.code).toBe(code);
      }
    });
  }

  test("a head with bare LF line ends is refused at once, not left to a timeout", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    // No CRLFCRLF ever comes: Bun's parser refuses the request line as it arrives (with 505, oddly).
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("GET /livez HTTP/1.1\nHost: x\n\n");
    await raw.untilClosed();
    expect(raw.answers().map((a) => a.status)).toEqual([505]);
  });

  test("a TLS ClientHello on the plaintext port is answered 400 at once", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write(new Uint8Array([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]));
    await raw.untilClosed();
    expect(raw.answers().map((a) => a.status)).toEqual([400]);
  });

  test("accepted: the same Content-Length twice, a body on GET, two Hosts (joined; no route reads Host), two Authorizations (joined, so never a token: 401)", async () => {
    await using ops = startDaemon({ adminToken: TOKEN, opsLimits: LONG_IDLE });
    const raw = await sequence(ops.daemon.ops.port, [
      "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
      "GET /livez HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      `POST /v1/sessions/1/kick HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
      "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\nConnection: close\r\n\r\nGET /",
    ]);
    expect(raw.answers().map((a) => a.status)).toEqual([200, 200, 401, 200]);
  });

  test("pipelining: answered in order up to the answers of one turn of the loop, then the connection is closed", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    // Bun.serve closes a connection whose next request is parsed while its answer is pending, and lockd makes the
    // answers beyond ANSWERS_PER_TURN in a turn a turn later: one read can no longer bring thousands of answers into one turn.
    const raw = await exchange(ops.daemon.ops.port, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(1000));
    const answers = raw.answers();
    expect(answers.length).toBeGreaterThan(0);
    expect(answers.length).toBeLessThanOrEqual(ANSWERS_PER_TURN);
    expect(answers.every((a) => a.status === 200)).toBe(true);
    const after = await exchange(ops.daemon.ops.port, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    expect(after.answers().map((a) => a.status)).toEqual([200]);
  });

  test("Connection is a list: close anywhere in it (or in a repeated header) closes", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    for (const connection of ["Connection: close\r\nConnection: keep-alive", "Connection: keep-alive, Close", "Connection: keep-alive\r\nConnection: close"]) {
      const raw = await exchange(ops.daemon.ops.port, `GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n${connection}\r\n\r\n`);
      const answers = raw.answers();
      expect(answers.map((a) => a.status), connection).toEqual([200]);
      expect(answers[0]!.headers.get("connection")).toBe("close");
    }
  });

  test("HTTP/1.0 closes after its answer; HTTP/1.1 keeps the connection and says for how long", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    // Bun closes after an HTTP/1.0 answer, keep-alive asked or not (exchange waits for that close).
    const old = await exchange(ops.daemon.ops.port, "GET /livez HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    expect(old.answers().map((a) => a.status)).toEqual([200]);

    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const [answer] = await raw.untilAnswers(1);
    expect(answer!.headers.get("connection")).toBeUndefined();
    // 60 s idle timeout: clients that read the hint (undici, hence Node's fetch) drop the connection first.
    expect(answer!.headers.get("keep-alive")).toBe("timeout=60");
    raw.destroy();
  });

  test("Expect: 100-continue with a body not sent yet is answered at once (after Bun's 100 Continue); the body, when it comes, is skipped", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    // A client that waits for 100 Continue before its body: without an answer it would wait for
    // its own timeout (1 s for curl), and the server for the body.
    await raw.write("POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n");
    const [answer] = await raw.untilAnswers(1);
    expect(answer!.status).toBe(405);
    expect(raw.answers()[0]!.status).toBe(100);
    await raw.write("0123456789GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    await raw.untilClosed();
    expect(raw.answers().filter((a) => a.status !== 100).map((a) => a.status)).toEqual([405, 200]);
  });

  test("a request split byte by byte, and one whose head and body come apart, are served", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    const request = "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\nab";
    for (const byte of request) await raw.write(byte);
    const [answer] = await raw.untilAnswers(1);
    expect(answer!.status).toBe(200);
    await raw.write("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\n");
    await raw.write("abc");
    expect((await raw.untilAnswers(2)).map((a) => a.status)).toEqual([200, 200]);
    raw.destroy();
  });
});

describe("request targets", () => {
  test("absolute form is routed by its path; dot segments are resolved as in a URL (every URL client does so first), %2F is not", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const dotted = await WirePeer.claim(ops.port, "a/../b", 5000);
    const plain = await WirePeer.claim(ops.port, "b", 5000);
    expect([dotted.frames[0]!.type, plain.frames[0]!.type]).toEqual([FrameType.ACQUIRED, FrameType.ACQUIRED]);
    const raw = await sequence(ops.daemon.ops.port, [
      "GET http://lockd.example:9/livez HTTP/1.1\r\nHost: lockd.example:9\r\n\r\n",
      "GET HTTP://lockd.example HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /v1/locks/a/../b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /v1/locks/a%2F..%2Fb HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /v1/locks/../../livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /v1/locks?name=a%2F..%2Fb&name=other HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    ]);
    const answers = raw.answers();
    expect(answers.map((a) => a.status)).toEqual([200, 404, 200, 200, 200, 200]);
    // A raw `..` names the lock the resolved path names: what curl or fetch would have sent for it.
    expect(JSON.parse(answers[2]!.body).name).toBe("b");
    expect(JSON.parse(answers[3]!.body).name).toBe("a/../b");
    expect(JSON.parse(answers[4]!.body)).toEqual({ status: "live" });
    // Repeated keys: the first one counts.
    expect(JSON.parse(answers[5]!.body).name).toBe("a/../b");
    dotted.end();
    plain.end();
  });
});

describe("answers", () => {
  test("every answer has a status line, Content-Length, nosniff, and JSON errors that do not reflect HTML", async () => {
    await using ops = startDaemon({ adminToken: TOKEN, opsLimits: LONG_IDLE });
    const requests = [
      "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /<script>alert(1)</script> HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      'GET /v1/locks/%3Cimg%20src=x%20onerror=alert(1)%3E"</b> HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n',
      "HEAD /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "DELETE /v1/locks/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "POST /v1/sessions/1/kick HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    ];
    const heads = [false, false, false, false, true, false, false];
    const raw = await sequence(ops.daemon.ops.port, requests, heads);
    const answers = raw.answers(heads);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 404, 404, 200, 405, 401]); // HEAD is GET without the body
    for (const answer of answers) {
      expect(answer.headers.get("x-content-type-options")).toBe("nosniff");
      if (answer.status >= 400) expect(answer.headers.get("content-type")).toBe("application/json; charset=utf-8");
    }
    expect(answers[4]!.body).toBe("");
    expect(Number(answers[4]!.headers.get("content-length"))).toBeGreaterThan(0);
    // The reflected path is percent-encoded (as a URL), in a JSON string inside a JSON document, never served as HTML.
    expect(JSON.parse(answers[2]!.body).error.message).toContain("/%3Cscript%3Ealert(1)%3C/script%3E");
    expect(answers[2]!.body).not.toContain("<");
    expect(answers.map((a) => a.reason)).toEqual(["OK", "OK", "Not Found", "Not Found", "OK", "Method Not Allowed", "Unauthorized"]);
  });

  test("errors to a HEAD request have no body either: the parser's and the ops server's", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const refused = await exchange(ops.daemon.ops.port, "HEAD /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n");
    expect(refused.answers([true]).map((a) => a.status)).toEqual([400]);
    expect(refused.text.endsWith("\r\n\r\n")).toBe(true);
    const missing = await exchange(ops.daemon.ops.port, "HEAD /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    const [answer] = missing.answers([true]);
    expect(answer!.status).toBe(404);
    expect(Number(answer!.headers.get("content-length"))).toBeGreaterThan(0);
    expect(missing.text.endsWith("\r\n\r\n")).toBe(true);
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
        await raw.write(`POST ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${authorization === null ? "" : `Authorization: ${authorization}\r\n`}\r\n`);
        const answers = await raw.untilAnswers(++n);
        expect(answers[n - 1]!.status, `${target} with ${JSON.stringify(authorization)?.slice(0, 40)}`).toBe(401);
      }
    }
    raw.destroy();
    expect(engineOf(ops.daemon.server).locks.get("held")?.owner?.id).toBe(1);
    expect(engineOf(ops.daemon.server).sessions.size).toBe(2);
    // And the token still works, in either case of the scheme.
    const ok = await exchange(ops.daemon.ops.port, `POST /v1/sessions/2/kick HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: bearer ${TOKEN}\r\nConnection: close\r\n\r\n`);
    expect(ok.answers().map((a) => a.status)).toEqual([200]);
    for (const peer of peers) peer.end();
  });
});

describe("connections", () => {
  test("a body that trickles in after its answer is cut at the idle timeout however it trickles", async () => {
    await using ops = startDaemon({ opsLimits: { idleTimeoutMs: 1000, metricsMaxAgeMs: 0 } });
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 16000\r\n\r\n");
    // Answered on its head: no endpoint reads a body.
    expect((await raw.untilAnswers(1)).map((a) => a.status)).toEqual([405]);
    let sent = 0;
    const drip = setInterval(() => void raw.write("x").then(() => sent++), 20);
    try {
      await raw.untilClosed();
    } finally {
      clearInterval(drip);
    }
    expect(sent).toBeLessThan(16000);
    const next = await exchange(ops.daemon.ops.port, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    expect(next.answers().map((a) => a.status)).toEqual([200]);
  });

  test("a client that asks for a big answer and does not read it holds it in its socket; others are served meanwhile, and it gets the whole answer when it reads", async () => {
    await using ops = startDaemon({ opsLimits: { idleTimeoutMs: 1000, metricsMaxAgeMs: 0 } });
    const peers = await Promise.all(Array.from({ length: 200 }, (_, i) => WirePeer.claim(ops.port, `${"n".repeat(400)}/${i}`, 30_000)));
    let text = "";
    let closed = false;
    const events = new Wakeup();
    const socket = net.connect({ host: "127.0.0.1", port: ops.daemon.ops.port });
    socket.on("data", (chunk) => {
      text += chunk.toString("latin1");
      events.wake();
    });
    socket.on("close", () => {
      closed = true;
      events.wake();
    });
    socket.on("error", () => {});
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    socket.pause(); // not reading: the answer (about 150 KB) waits in the sockets' buffers
    socket.write("GET /v1/locks HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    // Bun.serve has no write timeout: the connection stays until its client reads or goes. Others are served meanwhile.
    for (let i = 0; i < 3; i++) expect((await ops.get("/livez")).status).toBe(200);
    socket.resume();
    await events.until(() => closed, 10_000, () => `the answer and the close (got ${text.length} bytes)`);
    const [answer] = parseAnswers(text);
    expect(answer!.status).toBe(200);
    expect(JSON.parse(answer!.body).total).toBe(200);
    for (const peer of peers) peer.end();
  });

  test("a body far over the limit sent in one go gets its 413 and a close", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const request = Buffer.concat([Buffer.from("POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4000000\r\n\r\n"), Buffer.alloc(4_000_000, 0x61)]);
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
      // Bun closes with the rest of the body unread: the kernel may then reset, after the answer was sent.
      expect(parseAnswers(outcome.text).map((a) => a.status)).toEqual([413]);
    }
  });

  test("a client that half-closes mid-request gets the answer to its complete request only", async () => {
    await using ops = startDaemon({ opsLimits: LONG_IDLE });
    const raw = await Raw.connect(ops.daemon.ops.port);
    await raw.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /readyz HTTP/1.1\r\nHo");
    raw.end();
    await raw.untilClosed();
    expect(raw.answers().map((a) => a.status)).toEqual([200]);
  });

  test("many connections at once, ending every way a client can end one: each is closed, and the listener still serves", async () => {
    await using ops = startDaemon({ opsLimits: { idleTimeoutMs: 1000, metricsMaxAgeMs: 0 } });
    const port = ops.daemon.ops.port;
    const endings: ((socket: net.Socket) => void)[] = [
      (s) => s.end("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), // half-close after a request
      (s) => s.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"), // server closes
      (s) => s.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", () => s.destroy()), // vanishes mid-answer
      (s) => s.resetAndDestroy(), // RST
      (s) => s.write("BAD\r\n\r\n"), // refused with 400 and closed
      (s) => s.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), // answered, then the idle timeout
      (s) => s.write("POST /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc"), // a body never finished: the idle timeout
    ];
    const closed: Promise<void>[] = [];
    for (let i = 0; i < 42; i++) {
      const socket = net.connect({ host: "127.0.0.1", port });
      socket.on("data", () => {});
      socket.on("error", () => {});
      closed.push(new Promise((resolve) => socket.on("close", () => resolve())));
      socket.on("connect", () => endings[i % endings.length]!(socket));
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const all = await Promise.race([Promise.all(closed).then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 15_000)))]);
    clearTimeout(timer);
    expect(all).toBe(true);
    const raw = await exchange(port, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    expect(raw.answers().map((a) => a.status)).toEqual([200]);
  });

  describe.skipIf(!hasOpenssl)("over HTTPS (--ops-tls-cert)", () => {
    const certs = suiteCerts();

    test("failed handshakes do not stop the listener; a half-closing HTTPS client is answered", async () => {
      await using ops = startDaemon({
        opsTls: { cert: certs.serverCert, key: certs.serverKey },
        opsLimits: { idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 },
      });
      const port = ops.daemon.ops.port;
      const settled = (socket: net.Socket) => new Promise<void>((resolve) => {
        socket.on("close", () => resolve());
        socket.on("error", () => resolve());
        socket.on("data", () => {});
      });
      // Plain HTTP to the HTTPS port, a client that refuses the certificate, a client that hangs up mid-handshake.
      for (let i = 0; i < 3; i++) {
        const plain = net.connect({ host: "127.0.0.1", port });
        plain.on("connect", () => plain.write("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
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
          socket.write("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
          socket.end();
        });
        socket.on("data", (chunk) => (got += chunk.toString("latin1")));
        socket.on("close", () => resolve(got));
        socket.on("error", (error) => resolve(got + String(error)));
      });
      expect(parseAnswers(text).map((a) => a.status)).toEqual([200]);
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
