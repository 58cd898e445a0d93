/**
 * With --coordinator, an instance that is not the active serves no locks:
 * every lock route answers 503 NOT_ACTIVE with its role (never "nobody
 * holds it" from an empty or last-term table), and answers as usual again
 * once it is the active. The role is switched by hand here; the real
 * roles are in test/coordinator/failover.test.ts.
 */
import { OPS_WORDS } from "../../src/cli/words.ts";
import { afterEach, expect, test } from "bun:test";
import { Logger } from "../../src/log/logger.ts";
import { AdminAuth } from "../../src/ops/admin.ts";
import { OpsServer } from "../../src/ops/server.ts";
import type { CoordinatorMetrics, RoleView } from "../../src/ops/sources.ts";
import { engineOf } from "../helpers/engine.ts";
import { startServer, WirePeer } from "../helpers/wire.ts";
import { runCli } from "../fixtures/ops-child.ts";

const TOKEN = "not-active-token";
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

test("a standby's lock routes answer 503 NOT_ACTIVE with its role; the active's answer from its table", async () => {
  const server = startServer();
  cleanups.push(() => server.stop());
  let role: RoleView["role"] = "standby";
  let active: string | null = "db1/pid-42/9f3a01bc";
  let activeOps: string | null = null;
  const view = (): RoleView => ({ role, epoch: role === "active" ? 4 : 3, service: "svc", instance: "test", active: role === "active" ? "test" : active, activeOps });
  const ops = new OpsServer({
    hostname: "127.0.0.1",
    port: 0,
    locks: server.locks,
    roles: { view, metrics: () => ({ ...view() }) as CoordinatorMetrics },
    auth: new AdminAuth(TOKEN),
    log: new Logger("error", () => {}),
    version: "0.0.0-test",
    isReady: () => role === "active",
    words: OPS_WORDS, // as lockd serve words them
  });
  cleanups.push(() => ops.stop());
  // The lock server's table has a holder and a waiter: the standby must not show them (nor say "free").
  const holder = await WirePeer.claim(server.port, "held");
  const waiter = await WirePeer.claim(server.port, "held");
  cleanups.push(() => (holder.end(), waiter.end()));
  const waiterId = [...engineOf(server).sessions.keys()].at(-1)!;
  const base = `http://127.0.0.1:${ops.port}`;
  const auth = { authorization: `Bearer ${TOKEN}` };
  const routes: [string, string][] = [
    ["GET", "/v1/locks"],
    ["GET", "/v1/locks/held"],
    ["GET", "/v1/locks?name=free"],
    ["POST", "/v1/locks/held/force-release"],
    ["POST", `/v1/sessions/${waiterId}/kick`],
  ];
  for (const [method, path] of routes) {
    const answer = await fetch(base + path, { method, headers: auth });
    const body = (await answer.json()) as { error?: { code: string; message: string }; role?: string; epoch?: number; active?: string | null; service?: string };
    expect({ path, status: answer.status, code: body.error?.code, role: body.role, epoch: body.epoch, active: body.active, service: body.service }).toEqual({
      path,
      status: 503,
      code: "NOT_ACTIVE",
      role: "standby",
      epoch: 3,
      active: "db1/pid-42/9f3a01bc",
      service: "svc",
    });
    expect(body.error!.message).toBe(
      // The active advertises no ops address (activeOps null): the message says so, and what fixes it.
      "this instance of service svc is a standby (epoch 3): it serves no locks; ask the active instance, db1/pid-42/9f3a01bc (its /readyz answers 200); it gives no ops address (set --advertise-ops on it)",
    );
  }
  // lockd force-release given a lone standby's address: exit 69 (the service's active was not asked), not "nothing to do".
  const cli = await runCli(["force-release", "--ops", `127.0.0.1:${ops.port}`, "held"], { LOCKD_ADMIN_TOKEN: TOKEN });
  expect(cli.code).toBe(69);
  expect(cli.err).toStartWith("lockd force-release: this instance of service svc is a standby");
  expect(cli.err).toEndWith("; --ops, LOCKD_OPS: list every instance\n");
  // /readyz names the same epoch and active.
  expect(await (await fetch(`${base}/readyz`)).json()).toMatchObject({ status: "standby", role: "standby", epoch: 3, active: "db1/pid-42/9f3a01bc", activeOps: null });
  // An active that advertises its ops address (ops= in the row): the answer and the message name it.
  activeOps = "10.0.0.5:7701";
  const located = (await (await fetch(`${base}/v1/locks/held`)).json()) as { error: { message: string }; active: unknown; activeOps: unknown };
  expect({ active: located.active, activeOps: located.activeOps }).toEqual({ active: "db1/pid-42/9f3a01bc", activeOps: "10.0.0.5:7701" });
  expect(located.error.message).toEndWith("ask the active instance, db1/pid-42/9f3a01bc, at 10.0.0.5:7701 (its /readyz answers 200)");
  expect(await (await fetch(`${base}/readyz`)).json()).toMatchObject({ active: "db1/pid-42/9f3a01bc", activeOps: "10.0.0.5:7701" });
  // No active (the row released or absent): the message says so instead of naming one.
  active = null;
  activeOps = null;
  const none = (await (await fetch(`${base}/v1/locks/held`)).json()) as { error: { message: string }; active: unknown };
  expect(none.active).toBeNull();
  expect(none.error.message).toBe(
    "this instance of service svc is a standby (epoch 3): it serves no locks; the coordinator row names no active now (released, or not created yet): ask again once an instance's /readyz answers 200",
  );
  // Nothing was acted on.
  expect(engineOf(server).locks.get("held")?.owner).not.toBeNull();
  expect(engineOf(server).locks.get("held")?.waiting).toBe(1);
  // The admin token is still checked first: a wrong token is 401, whatever the role.
  expect((await fetch(`${base}/v1/locks/held/force-release`, { method: "POST", headers: { authorization: "Bearer wrong" } })).status).toBe(401);

  role = "active";
  expect((await fetch(`${base}/v1/locks/held`)).status).toBe(200);
  expect((await fetch(`${base}/v1/locks?name=free`)).status).toBe(404);
  const kicked = await fetch(`${base}/v1/sessions/${waiterId}/kick`, { method: "POST", headers: auth });
  expect(kicked.status).toBe(200);
  const released = await fetch(`${base}/v1/locks/held/force-release`, { method: "POST", headers: auth });
  expect(released.status).toBe(200);
  expect(engineOf(server).locks.get("held")).toBeUndefined();
});
