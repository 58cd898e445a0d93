import { describe, expect, test } from "bun:test";
import { FrameType } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon } from "./harness.ts";

/** Raw HTTP/1.1 over TCP, for paths fetch() would normalize or refuse. */
async function rawGet(port: number, path: string, method = "GET"): Promise<{ status: number; body: string }> {
  const chunks: Uint8Array[] = [];
  const { promise, resolve } = Promise.withResolvers<void>();
  const socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: { data: (_s, chunk) => void chunks.push(new Uint8Array(chunk)), close: () => resolve(), error: () => resolve() },
  });
  socket.write(`${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([promise, new Promise<void>((r) => (timer = setTimeout(r, 10_000)))]);
  clearTimeout(timer);
  socket.end();
  const text = Buffer.concat(chunks).toString("utf8");
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]), body: text.slice(text.indexOf("\r\n\r\n") + 4) };
}

describe("health and readiness", () => {
  test("livez and its alias healthz answer 200 JSON", async () => {
    await using ops = startDaemon();
    for (const path of ["/livez", "/healthz"]) {
      const response = await ops.get(path);
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toContain("application/json");
      expect(await body(response)).toEqual({ status: "live" });
    }
  });

  test("readyz is 200 while running", async () => {
    await using ops = startDaemon();
    const response = await ops.get("/readyz");
    expect(response.status).toBe(200);
    expect(await body(response)).toEqual({ status: "ready", shard: { name: null, shards: [], generation: 0 }, lockDelay: null });
  });

  test("metrics has the exposition content type", async () => {
    await using ops = startDaemon();
    const response = await ops.get("/metrics");
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(await response.text()).toContain("lockd_sessions{");
  });
});

describe("lock view", () => {
  test("lists holders and waiters in queue order, with owner, remote, token and times", async () => {
    await using ops = startDaemon();
    const a = await WirePeer.claim(ops.port, "jobs/nightly", 5000, { owner: "host-a/1" });
    const granted = a.frames[0]!;
    const b = await WirePeer.claim(ops.port, "jobs/nightly", 7000, { owner: "host-b/2" });
    const c = await WirePeer.claim(ops.port, "jobs/nightly", 9000, { owner: "host-c/3" });
    const d = await WirePeer.claim(ops.port, "other", 1000);

    const list = await body(await ops.get("/v1/locks"));
    expect(list.total).toBe(2);
    expect(list.truncated).toBe(false);
    expect(list.sessions).toEqual({ connected: 0, waiting: 2, owner: 2 });
    expect(list.locks.map((l: { name: string }) => l.name)).toEqual(["jobs/nightly", "other"]);

    for (const path of ["/v1/locks/jobs%2Fnightly", "/v1/locks/jobs/nightly", "/v1/locks?name=jobs%2Fnightly"]) {
      const response = await ops.get(path);
      expect(response.status).toBe(200);
      const lock = await body(response);
      expect(lock.name).toBe("jobs/nightly");
      expect(lock.holder.owner).toBe("host-a/1");
      expect(lock.holder.token).toBe(granted.token!.toString());
      expect(lock.holder.leaseMs).toBe(5000);
      expect(lock.holder.remote).toMatch(/^127\.0\.0\.1:\d+$/);
      expect(lock.holder.heldForMs).toBeGreaterThanOrEqual(0);
      expect(lock.holder.silentForMs).toBeGreaterThanOrEqual(0);
      expect(lock.waiters.map((w: { owner: string; position: number; leaseMs: number }) => [w.owner, w.position, w.leaseMs])).toEqual([
        ["host-b/2", 1, 7000],
        ["host-c/3", 2, 9000],
      ]);
      expect(lock.waiters[0].session).toBeLessThan(lock.waiters[1].session);
    }
    for (const p of [a, b, c, d]) p.end();
  });

  test("list limit: the first names, a cursor for the rest, the total; limits over 1000 and foreign cursors are 400", async () => {
    await using ops = startDaemon();
    const peers: WirePeer[] = [];
    for (const name of ["c", "a", "b"]) {
      const p = await WirePeer.claim(ops.port, name, 5000);
      peers.push(p);
    }
    const list = await body(await ops.get("/v1/locks?limit=2"));
    expect(list.locks.map((l: { name: string }) => l.name)).toEqual(["a", "b"]);
    expect(list.total).toBe(3);
    expect(list.truncated).toBe(true);
    const rest = await body(await ops.get(`/v1/locks?limit=2&cursor=${list.next}`));
    expect(rest.locks.map((l: { name: string }) => l.name)).toEqual(["c"]);
    expect(rest.next).toBeNull();
    expect(rest.truncated).toBe(false);
    for (const bad of ["limit=0", "limit=x", "limit=1001", "limit=100000"]) {
      const response = await ops.get(`/v1/locks?${bad}`);
      expect(response.status, bad).toBe(400);
      const error = (await body(response)).error;
      expect(error.code).toBe("BAD_LIMIT");
      expect(error.message).toContain("1..1000");
    }
    for (const bad of ["!!", "YQ==", "_w"]) {
      const response = await ops.get(`/v1/locks?cursor=${bad}`);
      expect(response.status, bad).toBe(400);
      expect((await body(response)).error.code).toBe("BAD_CURSOR");
    }
    for (const p of peers) p.end();
  });

  test("a lock's waiters are capped by ?limit=, with the full count in waiting", async () => {
    await using ops = startDaemon();
    const peers: WirePeer[] = [];
    for (let i = 0; i < 5; i++) {
      const p = await WirePeer.claim(ops.port, "busy", 5000, { owner: `o${i}` });
      peers.push(p);
    }
    const lock = await body(await ops.get("/v1/locks/busy?limit=2"));
    expect(lock.waiting).toBe(4);
    expect(lock.waiters.map((w: { owner: string }) => w.owner)).toEqual(["o1", "o2"]);
    expect((await body(await ops.get("/v1/locks?name=busy&limit=3"))).waiters).toHaveLength(3);
    expect((await body(await ops.get("/v1/locks/busy"))).waiters).toHaveLength(4);
    expect((await ops.get("/v1/locks/busy?limit=0")).status).toBe(400);
    expect((await ops.get("/v1/locks/busy?limit=1001")).status).toBe(400);
    for (const p of peers) p.end();
  });

  test("names with spaces, unicode, percent signs and a trailing /force-release are addressable", async () => {
    await using ops = startDaemon();
    const names = ["with space", "naïve/日本", "100%/done", "a/force-release", "?#&="];
    const peers: WirePeer[] = [];
    for (const name of names) {
      const p = await WirePeer.claim(ops.port, name, 5000);
      expect(p.frames[0]!.type).toBe(FrameType.ACQUIRED);
      peers.push(p);
    }
    for (const name of names) {
      for (const path of [`/v1/locks/${encodeURIComponent(name)}`, `/v1/locks?name=${encodeURIComponent(name)}`]) {
        const response = await ops.get(path);
        expect(response.status, path).toBe(200);
        expect((await body(response)).name).toBe(name);
      }
    }
    // The raw path form of that name is the admin action, so a GET there is 405 (not a 404 for "a").
    const action = await ops.get("/v1/locks/a/force-release");
    expect(action.status).toBe(405);
    expect(action.headers.get("allow")).toBe("POST");
    for (const p of peers) p.end();
  });

  test("the names . and .. work through ?name= (a path cannot carry them)", async () => {
    await using ops = startDaemon();
    const p = await WirePeer.claim(ops.port, "..", 5000);
    const lock = await body(await ops.get("/v1/locks?name=.."));
    expect(lock.name).toBe("..");
    p.end();
  });

  test("a lock nobody holds is 404 with a JSON error", async () => {
    await using ops = startDaemon();
    const response = await ops.get("/v1/locks/nobody");
    expect(response.status).toBe(404);
    const error = (await body(response)).error;
    expect(error.code).toBe("NO_SUCH_LOCK");
    expect(error.message).toContain("nobody");
  });

  test("malformed names are 400: bad percent-encoding, control characters, too long, empty", async () => {
    await using ops = startDaemon();
    const cases: [string, string][] = [
      ["/v1/locks/%zz", "percent"],
      ["/v1/locks/%E0%A4", "percent"],
      ["/v1/locks/a%00b", "control"],
      ["/v1/locks/a%0Ab", "control"],
      [`/v1/locks/${"x".repeat(513)}`, "513 bytes"],
      ["/v1/locks/", "empty"],
      ["/v1/locks?name=", "empty"],
    ];
    for (const [path, says] of cases) {
      const response = await rawGet(ops.daemon.ops.port, path);
      expect(response.status, path).toBe(400);
      const error = JSON.parse(response.body).error;
      expect(error.code).toBe("BAD_NAME");
      expect(error.message).toContain(says);
    }
  });
});

describe("routing errors", () => {
  test("unknown routes are 404 with a JSON error", async () => {
    await using ops = startDaemon();
    for (const path of ["/", "/nope", "/v1", "/v1/sessions/1", "/metricsx", "/v2/locks"]) {
      const response = await ops.get(path);
      expect(response.status, path).toBe(404);
      expect((await body(response)).error.code).toBe("NOT_FOUND");
    }
  });

  test("wrong methods are 405 with Allow and a JSON error", async () => {
    await using ops = startDaemon();
    const cases: [string, string, string][] = [
      ["POST", "/livez", "GET"],
      ["POST", "/healthz", "GET"],
      ["DELETE", "/readyz", "GET"],
      ["POST", "/metrics", "GET"],
      ["POST", "/v1/locks", "GET"],
      ["POST", "/v1/locks/x", "GET"],
      ["DELETE", "/v1/locks/x/force-release", "POST"],
      ["GET", "/v1/locks/x/force-release", "POST"],
      ["GET", "/v1/locks/a/b/force-release", "POST"],
      ["GET", "/v1/locks/force-release?name=x", "POST"],
      ["GET", "/v1/sessions/1/kick", "POST"],
      ["PUT", "/v1/sessions/1/kick", "POST"],
    ];
    for (const [method, path, allow] of cases) {
      const response = await fetch(ops.url(path), { method, signal: AbortSignal.timeout(10_000) });
      expect(response.status, `${method} ${path}`).toBe(405);
      expect(response.headers.get("allow")).toBe(allow);
      expect((await body(response)).error.code).toBe("METHOD_NOT_ALLOWED");
    }
  });
});
