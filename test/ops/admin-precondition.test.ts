// Admin actions name the target they mean: force-release's ?session= and
// ?token= (the holder as the operator saw it), kick's ?lock= (the lock the
// session was seen waiting for). A changed target is 409 with nothing done;
// without them the action is on whoever holds (or that id) now.
import { describe, expect, test } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { holderPrecondition, parseFencingToken } from "../../src/ops/admin.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon } from "./harness.ts";

const TOKEN = "precondition-admin-token";

function claim(port: number, name: string, owner: string): Promise<WirePeer> {
  return WirePeer.claim(port, name, 30_000, { owner });
}

interface Holder {
  session: number;
  token: string;
  owner: string;
}

describe("force-release with a precondition", () => {
  test("the holder named left and a waiter was promoted: 409 HOLDER_CHANGED, nothing released; the new holder's session and token release it", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const a = await claim(ops.port, "jobs/nightly", "first-A");
    const b = await claim(ops.port, "jobs/nightly", "second-B");
    const c = await claim(ops.port, "jobs/nightly", "third-C");
    // What the operator saw: A holds.
    const seen: Holder = (await body(await ops.get("/v1/locks/jobs%2Fnightly"))).holder;
    expect(seen.owner).toBe("first-A");
    expect(seen.token).toBe(a.frames[0]!.token!.toString());

    // A leaves, B is promoted, and then the operator's click arrives.
    a.end();
    await a.closed();
    expect((await b.frame(1)).type).toBe(FrameType.ACQUIRED);
    const now: Holder = (await body(await ops.get("/v1/locks/jobs%2Fnightly"))).holder;
    expect(now.owner).toBe("second-B");

    for (const query of [`session=${seen.session}&token=${seen.token}`, `session=${seen.session}`, `token=${seen.token}`, `session=${now.session}&token=${seen.token}`]) {
      const refused = await ops.post(`/v1/locks/jobs%2Fnightly/force-release?${query}`, TOKEN);
      expect(refused.status, query).toBe(409);
      const answer = await body(refused);
      expect(answer.error.code).toBe("HOLDER_CHANGED");
      // One line that says who holds it now and that nothing was released.
      expect(answer.error.message).not.toContain("\n");
      expect(answer.error.message).toContain(`"jobs/nightly" is held by session ${now.session} (owner "second-B") with token ${now.token}`);
      expect(answer.error.message).toContain("nothing was released");
      expect(answer.holder).toMatchObject({ session: now.session, token: now.token, owner: "second-B" });
    }
    // The ?name= form takes them too.
    expect((await ops.post(`/v1/locks/force-release?name=jobs%2Fnightly&token=${seen.token}`, TOKEN)).status).toBe(409);
    // Nothing happened: B holds, C waits, no ERROR was sent, no action counted; each refusal is logged.
    expect(b.frames).toHaveLength(2);
    expect(c.frames).toHaveLength(1);
    expect(b.isClosed).toBe(false);
    expect(ops.daemon.ops.stats.forceReleases).toBe(0);
    expect((await body(await ops.get("/v1/locks/jobs%2Fnightly"))).holder.session).toBe(now.session);
    const logged = ops.logs.filter((l) => l.event === "admin.target_changed");
    expect(logged).toHaveLength(5);
    expect(logged[0]).toMatchObject({ action: "force-release", lock: "jobs/nightly", session: now.session, asked: `session ${seen.session}, token ${seen.token}` });

    // The holder as it is now: released, C promoted.
    const done = await ops.post(`/v1/locks/jobs%2Fnightly/force-release?session=${now.session}&token=${now.token}`, TOKEN);
    expect(done.status).toBe(200);
    const answer = await body(done);
    expect(answer.released).toMatchObject({ session: now.session, token: now.token });
    expect(answer.promoted.owner).toBe("third-C");
    expect((await b.frame(2)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect((await c.frame(1)).type).toBe(FrameType.ACQUIRED);
    c.end();
  });

  test("a token alone is enough; without a precondition whoever holds it is released", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const a = await claim(ops.port, "solo", "A");
    const b = await claim(ops.port, "solo", "B");
    const ok = await ops.post(`/v1/locks/solo/force-release?token=${a.frames[0]!.token}`, TOKEN);
    expect(ok.status).toBe(200);
    expect((await a.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect((await b.frame(1)).type).toBe(FrameType.ACQUIRED);
    // The precondition-free form: B, whoever it is.
    const any = await ops.post("/v1/locks/solo/force-release", TOKEN);
    expect(any.status).toBe(200);
    expect((await body(any)).released.owner).toBe("B");
    expect((await b.frame(2)).code).toBe(ErrorCode.FORCE_RELEASED);
  });

  test("a free lock with a precondition is 404 naming what was asked; malformed values are 400 and nothing is released", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const free = await ops.post("/v1/locks/free/force-release?session=4&token=77", TOKEN);
    expect(free.status).toBe(404);
    expect((await body(free)).error.message).toBe(`nobody holds "free" now (not the session 4, token 77 asked for): nothing to release`);
    const a = await claim(ops.port, "held", "A");
    for (const query of ["session=0", "session=abc", "session=1.5", "token=-1", "token=0", "token=18446744073709551616", "token=x", `token=${TOKEN}`, "session=1&session=2", "token=%ZZ"]) {
      const bad = await ops.post(`/v1/locks/held/force-release?${query}`, TOKEN);
      expect(bad.status, query).toBe(400);
      const error = (await body(bad)).error;
      expect(error.code).toBe("BAD_PRECONDITION");
      expect(error.message).not.toContain(TOKEN);
    }
    expect(a.frames).toHaveLength(1);
    expect(ops.daemon.ops.stats.forceReleases).toBe(0);
    a.end();
  });

  test("the precondition's parser: canonical tokens up to 2^64-1", () => {
    expect(parseFencingToken("18446744073709551615")).toBe("18446744073709551615");
    expect(parseFencingToken("007")).toBe("7");
    expect(parseFencingToken("18446744073709551616")).toBeNull();
    expect(holderPrecondition("")).toEqual({ session: null, token: null });
    expect(holderPrecondition("name=x&token=12&session=3")).toEqual({ session: 3, token: "12" });
  });
});

describe("kick with a precondition", () => {
  test("?lock= names the lock the session waits for: another lock is 409 SESSION_CHANGED and nothing kicked; the right one kicks", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const holder = await claim(ops.port, "q", "holder");
    const waiter = await claim(ops.port, "q", "waiter");
    const id: number = (await body(await ops.get("/v1/locks/q"))).waiters[0].session;
    const refused = await ops.post(`/v1/sessions/${id}/kick?lock=other`, TOKEN);
    expect(refused.status).toBe(409);
    const error = (await body(refused)).error;
    expect(error.code).toBe("SESSION_CHANGED");
    expect(error.message).toBe(`session ${id} waits for "q", not for "other" as asked: not the session meant, nothing was kicked`);
    expect(waiter.frames).toHaveLength(1);
    expect(ops.daemon.ops.stats.kicks).toBe(0);
    expect((await ops.post(`/v1/sessions/${id}/kick?lock=%ZZ`, TOKEN)).status).toBe(400);

    const done = await ops.post(`/v1/sessions/${id}/kick?lock=q`, TOKEN);
    expect(done.status).toBe(200);
    expect((await body(done)).kicked.owner).toBe("waiter");
    expect((await waiter.frame(1)).code).toBe(ErrorCode.KICKED);
    holder.end();
  });
});
