// Admin actions take only the query parameters they know: a typo such as
// ?Session= must not be read as "no precondition" and release whoever holds
// the lock now; kick's ?lock= (and ?shard=) must be given once.
import { expect, test } from "bun:test";
import { FrameType } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";
import { body, startDaemon } from "./harness.ts";

const TOKEN = "params-admin-token";

test("force-release refuses an unknown query parameter (400 BAD_REQUEST naming it) and releases nothing", async () => {
  await using ops = startDaemon({ adminToken: TOKEN });
  const a = await WirePeer.claim(ops.port, "jobs", 30_000, { owner: "A" });
  try {
    expect(a.frames[0]!.type).toBe(FrameType.ACQUIRED);
    const seen = (await body(await ops.get("/v1/locks/jobs"))).holder;
    for (const path of [`/v1/locks/jobs/force-release?Session=${seen.session}`, `/v1/locks/force-release?name=jobs&sesion=${seen.session}`, "/v1/locks/force-release?name=jobs&name=other"]) {
      const response = await ops.post(path, TOKEN);
      expect(response.status).toBe(400);
      const error = (await body(response)).error;
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message).toMatch(/Session|sesion|name is given 2 times/);
    }
    // Still held by A.
    expect((await body(await ops.get("/v1/locks/jobs"))).holder.session).toBe(seen.session);
    // The known parameters still work.
    const done = await ops.post(`/v1/locks/jobs/force-release?session=${seen.session}&token=${seen.token}`, TOKEN);
    expect(done.status).toBe(200);
  } finally {
    a.end();
  }
});

test("kick refuses an unknown query parameter and a repeated ?lock=, and kicks nothing", async () => {
  await using ops = startDaemon({ adminToken: TOKEN });
  const holder = await WirePeer.claim(ops.port, "q", 30_000, { owner: "h" });
  const waiter = await WirePeer.claim(ops.port, "q", 30_000, { owner: "w" });
  try {
    expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);
    const id = (await body(await ops.get("/v1/locks/q"))).waiters[0].session;
    const cases: [string, RegExp][] = [
      [`/v1/sessions/${id}/kick?Lock=q`, /"Lock"/],
      [`/v1/sessions/${id}/kick?lock=q&lock=other`, /lock is given 2 times/],
      [`/v1/sessions/${id}/kick?lock=q&shard=&shard=`, /shard is given 2 times/],
    ];
    for (const [path, message] of cases) {
      const response = await ops.post(path, TOKEN);
      expect(response.status).toBe(400);
      const error = (await body(response)).error;
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message).toMatch(message);
    }
    expect((await body(await ops.get("/v1/locks/q"))).waiting).toBe(1);
    const done = await ops.post(`/v1/sessions/${id}/kick?lock=q`, TOKEN);
    expect(done.status).toBe(200);
  } finally {
    holder.end();
    waiter.end();
  }
});
