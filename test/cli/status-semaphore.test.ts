// `lockd status` and `lockd force-release` with semaphores and shared
// locks: every holder (MODE, SLOT, token, owner, held for) and each
// waiter's mode, human and --json; NAME's holders followed past a page;
// force-release of the holder named among several. Against an in-process
// daemon; the CLI as a child process, and status() in-process for the
// big lock.
import { describe, expect, test } from "bun:test";
import { status } from "../../src/cli/status.ts";
import { decodeSlot, ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { runCli } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";
import { startDaemon, type TestDaemon } from "../ops/harness.ts";

const TOKEN = "status-semaphore-token";

async function claims(ops: TestDaemon, name: string, n: number, options: { limit?: number; shared?: boolean }, prefix: string): Promise<WirePeer[]> {
  const peers: WirePeer[] = [];
  for (let i = 0; i < n; i++) peers.push(await WirePeer.claim(ops.port, name, 30_000, { ...options, owner: `${prefix}${i}` }));
  return peers;
}

const token = (peer: WirePeer, frame = 0): string => peer.frames[frame]!.token!.toString();
const slot = (peer: WirePeer, frame = 0): number => decodeSlot(peer.frames[frame]!.body, 0, peer.frames[frame]!.body.length);

describe("lockd status with semaphores and shared locks", () => {
  test("every holder with its mode and slot, and each waiter's mode; --json has limit, mode, holders", async () => {
    await using ops = startDaemon();
    const pool = await claims(ops, "pool", 2, { limit: 2 }, "p");
    const poolWaiter = await claims(ops, "pool", 1, { limit: 2 }, "pw");
    const readers = await claims(ops, "rw", 2, { shared: true }, "r");
    const writer = await claims(ops, "rw", 1, {}, "writer");
    const late = await claims(ops, "rw", 1, { shared: true }, "late");
    expect(late[0]!.frames[0]!.type).toBe(FrameType.WAITING);
    const opsAddr = `127.0.0.1:${ops.daemon.ops.port}`;

    const all = await runCli(["status", "--ops", opsAddr]);
    expect(all.err).toBe("");
    expect(all.code).toBe(0);
    const lines = all.out.trimEnd().split("\n");
    expect(lines[0]).toBe("2 locks; sessions: 4 holding, 3 waiting, 0 connecting");
    expect(lines[1]).toMatch(/^LOCK\s+ROLE\s+MODE\s+SLOT\s+SESSION\s+OWNER\s+REMOTE\s+TOKEN\s+FOR\s+LEASE\s+SILENT$/);
    expect(lines[2]).toMatch(new RegExp(`^pool\\s+holder\\s+limit 2\\s+${slot(pool[0]!)}\\s+\\d+\\s+p0\\s+127\\.0\\.0\\.1:\\d+\\s+${token(pool[0]!)}\\s+\\S+\\s+30s\\s+\\S+$`));
    expect(lines[3]).toMatch(new RegExp(`^\\s+holder\\s+limit 2\\s+${slot(pool[1]!)}\\s+\\d+\\s+p1\\s+127\\.0\\.0\\.1:\\d+\\s+${token(pool[1]!)}\\s`));
    expect(lines[4]).toMatch(/^\s+waiter 1\s+limit 2\s+-\s+\d+\s+pw0\s+127\.0\.0\.1:\d+\s+-\s/);
    expect(lines[5]).toMatch(new RegExp(`^rw\\s+holder\\s+shared\\s+-\\s+\\d+\\s+r0\\s+\\S+\\s+${token(readers[0]!)}\\s`));
    expect(lines[6]).toMatch(new RegExp(`^\\s+holder\\s+shared\\s+-\\s+\\d+\\s+r1\\s+\\S+\\s+${token(readers[1]!)}\\s`));
    expect(lines[7]).toMatch(/^\s+waiter 1\s+exclusive\s+-\s+\d+\s+writer0\s/);
    expect(lines[8]).toMatch(/^\s+waiter 2\s+shared\s+-\s+\d+\s+late0\s/);
    expect(lines).toHaveLength(9);

    const json = await runCli(["status", "--json", "--ops", opsAddr, "pool"]);
    expect(json.code).toBe(0);
    const view = JSON.parse(json.out);
    expect(view).toMatchObject({ name: "pool", limit: 2, mode: "semaphore", holding: 2, waiting: 1, holdersNext: null });
    expect(view.holders.map((h: { owner: string; slot: number; token: string }) => [h.owner, h.slot, h.token])).toEqual([
      ["p0", slot(pool[0]!), token(pool[0]!)],
      ["p1", slot(pool[1]!), token(pool[1]!)],
    ]);
    expect(view.waiters[0]).toMatchObject({ owner: "pw0", limit: 2, shared: false });
    const list = JSON.parse((await runCli(["status", "--json", "--ops", opsAddr])).out);
    expect(list.locks.map((l: { name: string; mode: string; limit: number }) => [l.name, l.mode, l.limit])).toEqual([["pool", "semaphore", 2], ["rw", "shared", 1]]);
    for (const p of [...pool, ...poolWaiter, ...readers, ...writer, ...late]) p.end();
  });

  test("NAME with more holders than a page: every one is shown (holdersNext followed)", async () => {
    await using ops = startDaemon();
    const peers: WirePeer[] = [];
    for (let i = 0; i < 1050; i += 150) {
      const batch = await Promise.all(Array.from({ length: 150 }, (_, j) => WirePeer.claim(ops.port, "crowd", 30_000, { shared: true, owner: `r${i + j}` })));
      peers.push(...batch);
    }
    const out = { text: "", write(text: string) { this.text += text; } };
    const err = { text: "", write(text: string) { this.text += text; } };
    const env = { LOCKD_OPS: `127.0.0.1:${ops.daemon.ops.port}` };
    expect(await status(["--json", "crowd"], env, out, err)).toBe(0);
    const view = JSON.parse(out.text);
    expect(view.holding).toBe(1050);
    expect(view.holders).toHaveLength(1050);
    expect(new Set(view.holders.map((h: { owner: string }) => h.owner)).size).toBe(1050);
    expect(view.holdersNext).toBeNull();
    out.text = "";
    expect(await status(["crowd"], env, out, err)).toBe(0);
    // The header and a row per holder; no "more holding" line.
    expect(out.text.trimEnd().split("\n")).toHaveLength(1051);
    expect(out.text).not.toContain("more holding");
    // The list shows each lock's first 100 and says how many more.
    out.text = "";
    expect(await status([], env, out, err)).toBe(0);
    expect(out.text).toContain("(+950 more holding)");
    expect(err.text).toBe("");
    for (const p of peers) p.end();
  }, 60_000);
});

describe("lockd force-release of one holder", () => {
  test("--session releases that holder of a semaphore; a waiter gets its slot; a holder gone is exit 1", async () => {
    await using ops = startDaemon({ adminToken: TOKEN });
    const pool = await claims(ops, "pool", 3, { limit: 3 }, "p");
    const [waiter] = await claims(ops, "pool", 1, { limit: 3 }, "w");
    const env = { LOCKD_OPS: `127.0.0.1:${ops.daemon.ops.port}`, LOCKD_ADMIN_TOKEN: TOKEN };
    const view = await (await ops.get("/v1/locks/pool")).json();
    const middle = view.holders[1];
    const done = await runCli(["force-release", "--session", String(middle.session), "pool"], env);
    expect(done.err).toBe("");
    expect(done.code).toBe(0);
    expect(done.out).toMatch(new RegExp(`^released "pool" from session ${middle.session} \\(p1\\), slot 1, token ${middle.token}, held \\S+\\n`));
    expect(done.out).toMatch(/\npromoted session \d+ \(w0\), slot 1, token \d+\n$/);
    expect((await pool[1]!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect((await waiter!.frame(1)).type).toBe(FrameType.ACQUIRED);
    expect(slot(waiter!, 1)).toBe(1);
    expect(pool[0]!.frames).toHaveLength(1);
    expect(pool[2]!.frames).toHaveLength(1);
    // The same holder again: it holds no more; nothing is released.
    const again = await runCli(["force-release", "--session", String(middle.session), "pool"], env);
    expect(again.code).toBe(1);
    expect(again.err).toContain(`"pool" has 3 holders and none is the session ${middle.session} asked for`);
    // --token of the newest holder: that one; the others still hold it.
    const newest = view.holders[2];
    const byToken = await runCli(["force-release", "--token", newest.token, "pool"], env);
    expect(byToken.code).toBe(0);
    expect(byToken.out).toContain(`from session ${newest.session} (p2), slot 2, token ${newest.token}`);
    expect(byToken.out).toContain("no waiter was granted: 2 other holders still hold it\n");
    expect((await pool[2]!.frame(1)).code).toBe(ErrorCode.FORCE_RELEASED);
    expect(pool[0]!.frames).toHaveLength(1);
    for (const p of [...pool, waiter!]) p.end();
  });
});
