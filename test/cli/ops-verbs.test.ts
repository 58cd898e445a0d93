import { describe, expect, test } from "bun:test";
import { freePort } from "../helpers/ports.ts";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { runCli } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon } from "../ops/harness.ts";
import { engineOf } from "../helpers/engine.ts";

const TOKEN = "verb-token";

function claim(port: number, name: string, owner: string): Promise<WirePeer> {
  return WirePeer.claim(port, name, 30_000, { owner });
}

describe("lockd status", () => {
  test("a table of holders and waiters in order, for all locks and for one", async () => {
    await using ops = startDaemon();
    const a = await claim(ops.port, "jobs/nightly", "host-a/1");
    const b = await claim(ops.port, "jobs/nightly", "host-b/2");
    const c = await claim(ops.port, "other", "host-c/3");
    const opsAddr = `127.0.0.1:${ops.daemon.ops.port}`;

    const all = await runCli(["status", "--ops", opsAddr]);
    expect(all.err).toBe("");
    expect(all.code).toBe(0);
    const lines = all.out.trimEnd().split("\n");
    expect(lines[0]).toBe("2 locks; sessions: 2 holding, 1 waiting, 0 connecting");
    expect(lines[1]).toMatch(/^LOCK\s+ROLE\s+MODE\s+SLOT\s+SESSION\s+OWNER\s+REMOTE\s+TOKEN\s+FOR\s+LEASE\s+SILENT$/);
    expect(lines[2]).toMatch(new RegExp(`^jobs/nightly\\s+holder\\s+exclusive\\s+-\\s+\\d+\\s+host-a/1\\s+127\\.0\\.0\\.1:\\d+\\s+${a.frames[0]!.token}\\s+\\S+\\s+30s\\s+\\S+$`));
    expect(lines[3]).toMatch(/^\s+waiter 1\s+exclusive\s+-\s+\d+\s+host-b\/2\s+127\.0\.0\.1:\d+\s+-\s/);
    expect(lines[4]).toMatch(/^other\s+holder\s+exclusive\s+-\s+\d+\s+host-c\/3\s/);

    const one = await runCli(["status", "jobs/nightly"], { LOCKD_OPS: opsAddr });
    expect(one.code).toBe(0);
    expect(one.out).toContain("host-a/1");
    expect(one.out).toContain("host-b/2");
    expect(one.out).not.toContain("host-c/3");

    const json = await runCli(["status", "--json", "--ops", opsAddr, "other"]);
    expect(JSON.parse(json.out).holder.owner).toBe("host-c/3");

    const free = await runCli(["status", "--ops", opsAddr, "free/lock"]);
    expect(free.code).toBe(0);
    expect(free.out).toBe("free/lock: free (no holder, no waiters)\n");
    for (const p of [a, b, c]) p.end();
  });

  test("an unreachable ops server is exit 69 with the address", async () => {
    const port = await freePort(); // a port nobody listens on
    const result = await runCli(["status", "--ops", `127.0.0.1:${port}`, "--timeout", "3s"]);
    expect(result.code).toBe(69);
    expect(result.err).toContain(`lockd status: cannot reach the ops server at 127.0.0.1:${port}`);
    expect(result.err).toContain("connection refused");
  });

  test("--ops takes a list (LOCKD_OPS too): the first that answers is used; none answering names each", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const dead = await freePort();
    const list = `127.0.0.1:${dead},127.0.0.1:${ops.daemon.ops.port}`;
    const status = await runCli(["status", "--ops", list]);
    expect(status.err).toBe("");
    expect(status.code).toBe(0);
    const a = await claim(ops.port, "listed", "holder");
    const released = await runCli(["force-release", "listed"], { LOCKD_OPS: list, LOCKD_ADMIN_TOKEN: TOKEN });
    expect(released.code).toBe(0);
    expect(released.out).toContain(`released "listed"`);
    const none = await runCli(["status", "--ops", `127.0.0.1:${dead},[::1]:${dead}`, "--timeout", "3s"]);
    expect(none.code).toBe(69);
    expect(none.err).toContain(`cannot reach any ops server of 127.0.0.1:${dead},[::1]:${dead}`);
    expect(none.err).toContain(`127.0.0.1:${dead}: connection refused`);
    expect(none.err).not.toContain("cannot reach the ops server at"); // each address's reason once, not the one-address line nested
    a.end();
  });
});

describe("lockd force-release and lockd kick", () => {
  test("force-release ends the holder and reports the promotion", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const a = await claim(ops.port, "..", "first");
    const b = await claim(ops.port, "..", "second");
    const result = await runCli(["force-release", "--ops", `127.0.0.1:${ops.daemon.ops.port}`, ".."], { LOCKD_ADMIN_TOKEN: TOKEN });
    expect(result.err).toBe("");
    expect(result.code).toBe(0);
    expect(result.out).toMatch(/^released "\.\." from session \d+ \(first\), token \d+, held \S+\npromoted session \d+ \(second\), token \d+\n$/);
    expect((await a.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect((await b.frame(1)).type).toBe(FrameType.ACQUIRED);
    b.end();
  });

  test("kick ends a waiter; nothing to do is exit 1; no or wrong token is exit 77", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const opsAddr = `127.0.0.1:${ops.daemon.ops.port}`;
    const a = await claim(ops.port, "k", "holder");
    const b = await claim(ops.port, "k", "waiter");
    const waiterId = engineOf(ops.daemon.server).locks.get("k")!.head!.id;

    const denied = await runCli(["kick", "--ops", opsAddr, String(waiterId)]);
    expect(denied.code).toBe(77);
    // In the terms of the CLI (which flag gives a token), not of HTTP.
    expect(denied.err).toContain("--admin-token-file");
    expect(denied.err).toContain("LOCKD_ADMIN_TOKEN");
    expect(denied.err).not.toContain("Bearer");
    const wrong = await runCli(["kick", "--ops", opsAddr, "--admin-token", "nope", String(waiterId)]);
    expect(wrong.code).toBe(77);
    expect(wrong.err).toContain("wrong");
    expect(wrong.err).toContain("from --admin-token");
    expect(b.frames).toHaveLength(1);

    const kicked = await runCli(["kick", "--ops", opsAddr, String(waiterId)], { LOCKD_ADMIN_TOKEN: TOKEN });
    expect(kicked.code).toBe(0);
    expect(kicked.out).toBe(`kicked session ${waiterId} (waiter) from "k" (it was waiter 1, waiting ${kicked.out.match(/waiting (\S+)\)/)![1]})\n`);
    expect((await b.frame(1)).code).toBe(ErrorCode.KICKED);

    const again = await runCli(["kick", "--ops", opsAddr, String(waiterId)], { LOCKD_ADMIN_TOKEN: TOKEN });
    expect(again.code).toBe(1);
    expect(again.err).toContain(`no live session ${waiterId}`);
    const none = await runCli(["force-release", "--ops", opsAddr, "nothing-here"], { LOCKD_ADMIN_TOKEN: TOKEN });
    expect(none.code).toBe(1);
    expect(none.err).toContain("nobody holds");
    const usage = await runCli(["kick", "--ops", opsAddr]);
    expect(usage.code).toBe(64);
    a.end();
  });

  test("force-release --token/--session name the holder meant: a changed holder is exit 1 with nothing released; the right one is released", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const opsAddr = `127.0.0.1:${ops.daemon.ops.port}`;
    const env = { LOCKD_ADMIN_TOKEN: TOKEN };
    const a = await claim(ops.port, "jobs/nightly", "first");
    const b = await claim(ops.port, "jobs/nightly", "second");
    const lock = engineOf(ops.daemon.server).locks.get("jobs/nightly")!;
    const [seenId, seenToken] = [lock.owner!.id, a.frames[0]!.token!.toString()];
    a.end();
    expect((await b.frame(1)).type).toBe(FrameType.ACQUIRED);
    const [nowId, nowToken] = [lock.owner!.id, b.frames[1]!.token!.toString()];

    for (const precondition of [["--token", seenToken], ["--session", String(seenId)], ["--session", String(nowId), "--token", seenToken]]) {
      const refused = await runCli(["force-release", "--ops", opsAddr, ...precondition, "jobs/nightly"], env);
      expect(refused.code, precondition.join(" ")).toBe(1);
      expect(refused.out).toBe("");
      expect(refused.err).toContain(`"jobs/nightly" is held by session ${nowId} (owner "second") with token ${nowToken}`);
      expect(refused.err).toContain("nothing was released");
    }
    expect(b.frames).toHaveLength(2); // still the holder, no ERROR
    for (const bad of [["--token", TOKEN], ["--token", "0"], ["--session", "x"], ["--lock", "jobs/nightly"]]) {
      const usage = await runCli(["force-release", "--ops", opsAddr, ...bad, "jobs/nightly"], env);
      expect(usage.code, bad.join(" ")).toBe(64);
      expect(usage.err).not.toContain(TOKEN);
    }
    expect(b.frames).toHaveLength(2);

    const done = await runCli(["force-release", "--ops", opsAddr, "--session", String(nowId), `--token=${nowToken}`, "jobs/nightly"], env);
    expect(done.err).toBe("");
    expect(done.code).toBe(0);
    expect(done.out).toStartWith(`released "jobs/nightly" from session ${nowId} (second), token ${nowToken}`);
    expect((await b.frame(2)).code).toBe(ErrorCode.FORCE_RELEASED);
  });

  test("kick --lock: a session waiting for another lock is exit 1 with nothing kicked; the right lock kicks", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const opsAddr = `127.0.0.1:${ops.daemon.ops.port}`;
    const env = { LOCKD_ADMIN_TOKEN: TOKEN };
    const a = await claim(ops.port, "k k", "holder");
    const b = await claim(ops.port, "k k", "waiter");
    const waiterId = engineOf(ops.daemon.server).locks.get("k k")!.head!.id;
    const refused = await runCli(["kick", "--ops", opsAddr, "--lock", "k", String(waiterId)], env);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain(`session ${waiterId} waits for "k k", not for "k" as asked`);
    expect(b.frames).toHaveLength(1);
    expect((await runCli(["kick", "--ops", opsAddr, "--token", "5", String(waiterId)], env)).code).toBe(64);
    const kicked = await runCli(["kick", "--ops", opsAddr, "--lock", "k k", String(waiterId)], env);
    expect(kicked.err).toBe("");
    expect(kicked.code).toBe(0);
    expect((await b.frame(1)).code).toBe(ErrorCode.KICKED);
    a.end();
  });

  test("a server without an admin token: exit 77 and the hint how to set one", async () => {
    await using ops = startDaemon({ adminToken: null });
    const result = await runCli(["force-release", "--ops", `127.0.0.1:${ops.daemon.ops.port}`, "--admin-token", "x", "some"]);
    expect(result.code).toBe(77);
    expect(result.err).toContain("LOCKD_ADMIN_TOKEN");
  });
});
