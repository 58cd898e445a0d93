import { describe, expect, test } from "bun:test";
import { ErrorCode, FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { AdminAuth, AuthResult } from "../../src/ops/admin.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon } from "./harness.ts";
import { engineOf } from "../helpers/engine.ts";

const TOKEN = "s3cret-admin-token";

async function queue(port: number, name: string, owners: string[]): Promise<WirePeer[]> {
  const peers: WirePeer[] = [];
  for (const owner of owners) {
    const p = await WirePeer.claim(port, name, 10_000, { owner });
    peers.push(p);
  }
  return peers;
}

describe("auth matrix", () => {
  const actions = [
    ["force-release", "/v1/locks/held/force-release"],
    ["kick", "/v1/sessions/2/kick"],
  ] as const;

  test("no token configured: 403 that says how to set one, and nothing happens", async () => {
    await using ops = startDaemon({ adminToken: null });
    const [owner, waiter] = await queue(ops.port, "held", ["a", "b"]);
    for (const [, path] of actions) {
      for (const token of [null, "anything"]) {
        const response = await ops.post(path, token);
        expect(response.status).toBe(403);
        const error = (await body(response)).error;
        expect(error.code).toBe("ADMIN_DISABLED");
        expect(error.message).toContain("LOCKD_ADMIN_TOKEN");
        expect(error.message).toContain("--admin-token-file");
      }
    }
    expect(engineOf(ops.daemon.server).sessions.size).toBe(2);
    expect(owner!.frames.length).toBe(1);
    expect(waiter!.frames.length).toBe(1);
    owner!.end();
    waiter!.end();
  });

  test("missing or wrong token: 401, logged (without the token), nothing happens", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [owner, waiter] = await queue(ops.port, "held", ["a", "b"]);
    for (const [action, path] of actions) {
      for (const header of [null, "wrong", `${TOKEN}x`, TOKEN.slice(0, -1)]) {
        const response = await ops.post(path, header);
        expect(response.status).toBe(401);
        expect(response.headers.get("www-authenticate")).toContain("Bearer");
        expect((await body(response)).error.code).toBe("UNAUTHORIZED");
      }
      const basic = await fetch(ops.url(path), { method: "POST", headers: { authorization: `Basic ${btoa(`x:${TOKEN}`)}` } });
      expect(basic.status).toBe(401);
      expect(ops.logs.some((l) => l.event === "admin.refused" && l.action === action)).toBe(true);
    }
    expect(JSON.stringify(ops.logs)).not.toContain(TOKEN);
    expect(engineOf(ops.daemon.server).sessions.size).toBe(2);
    expect(ops.daemon.ops.stats.denied).toBe(10);
    owner!.end();
    waiter!.end();
  });

  test("right token: the action is done and logged with who and what", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [owner, waiter] = await queue(ops.port, "held", ["a", "b"]);
    const response = await ops.post("/v1/locks/held/force-release", TOKEN);
    expect(response.status).toBe(200);
    await owner!.closed();
    const line = ops.logs.find((l) => l.event === "admin.force_release")!;
    expect(line).toBeDefined();
    expect(line.lock).toBe("held");
    expect(line.owner).toBe("a");
    expect(String(line.by)).toMatch(/^127\.0\.0\.1:\d+$/);
    waiter!.end();
  });
});

describe("force-release", () => {
  test("ends the owner with FORCE_RELEASED and pushes ACQUIRED with a larger token to the next waiter", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [a, b, c] = await queue(ops.port, "jobs/nightly", ["a", "b", "c"]);
    const first = a!.frames[0]!;
    const response = await ops.post("/v1/locks/jobs%2Fnightly/force-release", TOKEN);
    expect(response.status).toBe(200);
    const answer = await body(response);
    expect(answer.lock).toBe("jobs/nightly");
    expect(answer.released.owner).toBe("a");
    expect(answer.released.token).toBe(first.token!.toString());
    expect(answer.promoted.owner).toBe("b");

    const ended = await a!.frame(1);
    expect(ended.type).toBe(FrameType.ERROR);
    expect(ended.code).toBe(ErrorCode.FORCE_RELEASED);
    await a!.closed();

    const pushed = await b!.frame(1);
    expect(pushed.type).toBe(FrameType.ACQUIRED);
    expect(pushed.flags & FLAG_REPLY).toBe(0);
    expect(pushed.token!).toBeGreaterThan(first.token!);
    expect(answer.promoted.token).toBe(pushed.token!.toString());

    // c stays queued behind b, and the handover was observed.
    const lock = await body(await ops.get("/v1/locks/jobs%2Fnightly"));
    expect(lock.holder.owner).toBe("b");
    expect(lock.waiters.map((w: { owner: string }) => w.owner)).toEqual(["c"]);
    expect(engineOf(ops.daemon.server).stats.handoverSeconds.count).toBe(1);
    expect(ops.daemon.ops.stats.forceReleases).toBe(1);
    b!.end();
    c!.end();
  });

  test("with no waiters the lock becomes free; ?name= form works too", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [a] = await queue(ops.port, "solo", ["a"]);
    const answer = await body(await ops.post("/v1/locks/force-release?name=solo", TOKEN));
    expect(answer.promoted).toBeNull();
    expect((await a!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect((await ops.get("/v1/locks/solo")).status).toBe(404);
  });

  test("a lock named a/force-release is released through its encoded name", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [a] = await queue(ops.port, "a/force-release", ["a"]);
    const [other] = await queue(ops.port, "a", ["other"]);
    const response = await ops.post("/v1/locks/a%2Fforce-release/force-release", TOKEN);
    expect(response.status).toBe(200);
    expect((await body(response)).lock).toBe("a/force-release");
    expect((await a!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect(other!.frames).toHaveLength(1);
    other!.end();
  });

  test("404 when nobody holds the lock, 400 for a malformed name", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const missing = await ops.post("/v1/locks/free/force-release", TOKEN);
    expect(missing.status).toBe(404);
    expect((await body(missing)).error.code).toBe("NOT_HELD");
    const bad = await ops.post("/v1/locks/a%00/force-release", TOKEN);
    expect(bad.status).toBe(400);
    expect((await body(bad)).error.code).toBe("BAD_NAME");
    expect(ops.daemon.ops.stats.forceReleases).toBe(0);
  });
});

describe("kick", () => {
  test("ends a waiter with KICKED; the others keep their order", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [a, b, c, d] = await queue(ops.port, "q", ["a", "b", "c", "d"]);
    const before = await body(await ops.get("/v1/locks/q"));
    const cId = before.waiters.find((w: { owner: string }) => w.owner === "c").session;

    const response = await ops.post(`/v1/sessions/${cId}/kick`, TOKEN);
    expect(response.status).toBe(200);
    const answer = await body(response);
    expect(answer).toMatchObject({ lock: "q", kicked: { session: cId, owner: "c", position: 2 } });
    const ended = await c!.frame(1);
    expect(ended.type).toBe(FrameType.ERROR);
    expect(ended.code).toBe(ErrorCode.KICKED);
    await c!.closed();
    expect(ops.logs.some((l) => l.event === "admin.kick" && l.session === cId)).toBe(true);

    const after = await body(await ops.get("/v1/locks/q"));
    expect(after.waiters.map((w: { owner: string; position: number }) => [w.owner, w.position])).toEqual([
      ["b", 1],
      ["d", 2],
    ]);
    // Handover still follows the queue: a leaves, b gets it; b leaves, d gets it.
    a!.end();
    const toB = await b!.frame(1);
    expect(toB.type).toBe(FrameType.ACQUIRED);
    b!.end();
    const toD = await d!.frame(1);
    expect(toD.type).toBe(FrameType.ACQUIRED);
    expect(toD.token!).toBeGreaterThan(toB.token!);
    d!.end();
  });

  test("404 for an unknown session, 409 for an owner, 400 for a malformed id", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const [a] = await queue(ops.port, "k", ["a"]);
    const ownerId = (await body(await ops.get("/v1/locks/k"))).holder.session;
    const missing = await ops.post("/v1/sessions/99999/kick", TOKEN);
    expect(missing.status).toBe(404);
    expect((await body(missing)).error.code).toBe("NO_SUCH_SESSION");
    const owner = await ops.post(`/v1/sessions/${ownerId}/kick`, TOKEN);
    expect(owner.status).toBe(409);
    expect((await body(owner)).error.message).toContain("force-release");
    for (const id of ["0", "-1", "abc", "1.5", "99999999999999999"]) {
      const bad = await ops.post(`/v1/sessions/${id}/kick`, TOKEN);
      expect(bad.status, id).toBe(400);
      expect((await body(bad)).error.code).toBe("BAD_SESSION_ID");
    }
    expect(a!.frames.length).toBe(1);
    a!.end();
  });
});

describe("AdminAuth", () => {
  test("compares bearer tokens exactly", () => {
    const auth = new AdminAuth("abc");
    expect(auth.check("Bearer abc")).toBe(AuthResult.OK);
    expect(auth.check("bearer abc")).toBe(AuthResult.OK);
    expect(auth.check("Bearer abcd")).toBe(AuthResult.WRONG);
    expect(auth.check("Bearer ab")).toBe(AuthResult.WRONG);
    expect(auth.check("Bearer")).toBe(AuthResult.MISSING);
    expect(auth.check(null)).toBe(AuthResult.MISSING);
    expect(new AdminAuth(null).check("Bearer abc")).toBe(AuthResult.UNCONFIGURED);
  });
});
