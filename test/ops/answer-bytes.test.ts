// The exact bytes of the ops server's answers, one of each kind of error and
// of each layer that answers (the ops routes, the /ui routes, the HTTP
// layer of src/ops/http.ts, and Bun's parser itself): header order and
// spelling (Bun.serve writes the header names it knows in their usual
// capitals, before the others), JSON layout (the ops routes pretty-print,
// the page's routes do not), trailing newline. Only the Date header varies.
import { expect, test } from "bun:test";
import { startDaemon } from "./harness.ts";

/**
 * Everything the server sends on a fresh connection until it closes, with
 * the Date masked: `requests` one after the other, each sent once the
 * answers before it have arrived (a request pipelined behind an unanswered
 * one closes the connection).
 */
async function exchange(port: number, ...requests: string[]): Promise<string> {
  let text = "";
  let wake = () => {};
  let closed = false;
  const socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_socket, chunk) {
        text += Buffer.from(chunk).toString("latin1");
        wake();
      },
      close: () => {
        closed = true;
        wake();
      },
      error: () => {
        closed = true;
        wake();
      },
    },
  });
  const until = async (done: () => boolean) => {
    const deadline = performance.now() + 10_000;
    while (!done()) {
      if (performance.now() > deadline) throw new Error(`no answer (got ${JSON.stringify(text.slice(-200))})`);
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 100);
      });
    }
  };
  for (const [i, request] of requests.entries()) {
    socket.write(request);
    // Every answer here ends its body with a newline and carries Content-Length: count them by their status lines.
    if (i < requests.length - 1) await until(() => (text.match(/^HTTP\/1\.1 /gm)?.length ?? 0) > i && text.endsWith("\n"));
  }
  await until(() => closed);
  return text.replace(/\r\nDate: [^\r]*\r\n/g, "\r\nDate: D\r\n");
}

const JSON_HEAD = ["Content-Type: application/json; charset=utf-8", "Cache-Control: no-store"];
const UI_HEAD = [
  "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "Referrer-Policy: no-referrer",
  "X-Frame-Options: DENY",
  "Cache-Control: no-store",
  "Content-Type: application/json; charset=utf-8",
];

/** An answer as Bun.serve writes it: the known headers, then the others (`extra`), Date, Content-Length. */
function answer(status: string, headers: string[], body: string, last = false, extra: string[] = []): string {
  const known = [...headers, "X-Content-Type-Options: nosniff", last ? "Connection: close" : "Keep-Alive: timeout=60"];
  return `HTTP/1.1 ${status}\r\n${[...known, ...extra, "Date: D", `Content-Length: ${Buffer.byteLength(body)}`].join("\r\n")}\r\n\r\n${body}`;
}

const pretty = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
const compact = (value: unknown) => `${JSON.stringify(value)}\n`;
const error = (code: string, message: string) => ({ error: { code, message } });

test("each kind of answer, byte for byte", async () => {
  await using ops = startDaemon({ opsLimits: { idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 } });
  const port = ops.daemon.ops.port;
  const requests = [
    "GET /livez",
    "GET /nope",
    "DELETE /readyz",
    "GET /v1/locks?limit=0",
    "POST /v1/locks/force-release",
    "POST /ui",
    "GET /ui/nope",
    "GET /ui/v1/board?dir=x",
    "GET /v1/locks/nobody",
  ];
  const text = await exchange(port, ...requests.map((line, i) => `${line} HTTP/1.1\r\nHost: 127.0.0.1\r\n${i === requests.length - 1 ? "Connection: close\r\n" : ""}\r\n`));
  const shard = { name: null, shards: [], generation: 0 };
  expect(text).toBe(
    [
      answer("200 OK", JSON_HEAD, pretty({ status: "live" })),
      answer("404 Not Found", JSON_HEAD, pretty(error("NOT_FOUND", "no route /nope; see docs/operations.md"))),
      answer("405 Method Not Allowed", JSON_HEAD, pretty(error("METHOD_NOT_ALLOWED", "DELETE is not allowed here; use GET")), false, ["allow: GET"]),
      answer("400 Bad Request", JSON_HEAD, pretty(error("BAD_LIMIT", "limit must be a whole number in 1..1000 (locks per page; follow `next` for more)"))),
      answer(
        "400 Bad Request",
        JSON_HEAD,
        pretty(error("BAD_NAME", "which lock? POST /v1/locks/NAME/force-release or /v1/locks/force-release?name=NAME")),
      ),
      answer("405 Method Not Allowed", UI_HEAD, compact(error("METHOD_NOT_ALLOWED", "POST is not allowed here; use GET")), false, ["allow: GET"]),
      answer("404 Not Found", UI_HEAD, compact(error("NOT_FOUND", "no route /ui/nope; the page is /ui"))),
      answer("400 Bad Request", UI_HEAD, compact(error("BAD_QUERY", "dir must be asc or desc"))),
      answer("404 Not Found", JSON_HEAD, pretty({ ...error("NO_SUCH_LOCK", 'nobody holds or waits for "nobody"'), shard }), true),
    ].join(""),
  );

  // The HTTP layer's own answer (a request with a body framing no endpoint takes), and the parser's (an ambiguous head).
  expect(await exchange(port, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")).toBe(
    answer(
      "501 Not Implemented",
      JSON_HEAD,
      pretty(error("BODY_NOT_ACCEPTED", "no endpoint takes a request body; send none (Transfer-Encoding is not accepted)")),
      true,
    ),
  );
  expect(await exchange(port, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")).toBe("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
});
