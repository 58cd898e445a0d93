// The exact bytes of the ops server's answers, one of each kind of error and
// of each layer that answers (the ops routes, the /ui routes, the HTTP
// listener itself): header order, JSON layout (the ops routes pretty-print,
// the page's routes do not), trailing newline. Only the Date header varies.
import { expect, test } from "bun:test";
import { startDaemon } from "./harness.ts";

/** Everything the server sends on a fresh connection until it closes, with the Date masked. */
async function exchange(port: number, request: string): Promise<string> {
  let text = "";
  let closed!: () => void;
  const done = new Promise<void>((resolve) => (closed = resolve));
  const socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_socket, chunk) {
        text += Buffer.from(chunk).toString("latin1");
      },
      close: () => closed(),
      error: () => closed(),
    },
  });
  if (request !== "") socket.write(request);
  await done;
  return text.replace(/\r\ndate: [^\r]*\r\n/g, "\r\ndate: D\r\n");
}

const JSON_HEAD = ["content-type: application/json; charset=utf-8", "cache-control: no-store"];
const UI_HEAD = [
  "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "referrer-policy: no-referrer",
  "x-frame-options: DENY",
  "cache-control: no-store",
  "content-type: application/json; charset=utf-8",
];

function answer(status: string, headers: string[], body: string, last = false): string {
  const tail = ["x-content-type-options: nosniff", "date: D", last ? "connection: close" : "keep-alive: timeout=60"];
  return `HTTP/1.1 ${status}\r\n${[...headers, `content-length: ${Buffer.byteLength(body)}`, ...tail].join("\r\n")}\r\n\r\n${body}`;
}

const pretty = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
const compact = (value: unknown) => `${JSON.stringify(value)}\n`;
const error = (code: string, message: string) => ({ error: { code, message } });

test("each kind of answer, byte for byte", async () => {
  await using ops = startDaemon({ opsLimits: { maxConnections: 1, idleTimeoutMs: 60_000, metricsMaxAgeMs: 0 } });
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
  const text = await exchange(port, requests.map((line, i) => `${line} HTTP/1.1\r\nHost: x\r\n${i === requests.length - 1 ? "Connection: close\r\n" : ""}\r\n`).join(""));
  const shard = { name: null, shards: [], generation: 0 };
  expect(text).toBe(
    [
      answer("200 OK", JSON_HEAD, pretty({ status: "live" })),
      answer("404 Not Found", JSON_HEAD, pretty(error("NOT_FOUND", "no route /nope; see docs/operations.md"))),
      answer("405 Method Not Allowed", [...JSON_HEAD, "allow: GET"], pretty(error("METHOD_NOT_ALLOWED", "DELETE is not allowed here; use GET"))),
      answer("400 Bad Request", JSON_HEAD, pretty(error("BAD_LIMIT", "limit must be a whole number in 1..1000 (locks per page; follow `next` for more)"))),
      answer(
        "400 Bad Request",
        JSON_HEAD,
        pretty(error("BAD_NAME", "which lock? POST /v1/locks/NAME/force-release or /v1/locks/force-release?name=NAME")),
      ),
      answer("405 Method Not Allowed", [...UI_HEAD, "allow: GET"], compact(error("METHOD_NOT_ALLOWED", "POST is not allowed here; use GET"))),
      answer("404 Not Found", UI_HEAD, compact(error("NOT_FOUND", "no route /ui/nope; the page is /ui"))),
      answer("400 Bad Request", UI_HEAD, compact(error("BAD_QUERY", "dir must be asc or desc"))),
      answer("404 Not Found", JSON_HEAD, pretty({ ...error("NO_SUCH_LOCK", 'nobody holds or waits for "nobody"'), shard }), true),
    ].join(""),
  );

  // The listener's own answers: a request it refuses, and a connection over the limit.
  expect(await exchange(port, "GET /livez HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")).toBe(
    answer(
      "501 Not Implemented",
      JSON_HEAD,
      pretty(error("BODY_NOT_ACCEPTED", "no endpoint takes a request body; send none (Transfer-Encoding is not accepted)")),
      true,
    ),
  );
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const holder = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {}, close: () => release() } });
  for (let turns = 0; ops.daemon.ops.connections.open < 1 && turns < 1000; turns++) await new Promise((r) => setImmediate(r));
  expect(ops.daemon.ops.connections.open).toBe(1);
  expect(await exchange(port, "")).toBe(
    answer(
      "503 Service Unavailable",
      [...JSON_HEAD, "retry-after: 1"],
      pretty(error("OPS_BUSY", "the ops server has 1 open connections, its limit (--ops-max-connections); retry")),
      true,
    ),
  );
  holder.end();
  await held;
});
