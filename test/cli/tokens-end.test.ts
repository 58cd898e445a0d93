// The end of the token counter, at the boundary, with a real `lockd serve`:
// generation 1 and a floor two below 2^48. Two claims get the last tokens;
// the next is refused with TOKENS_EXHAUSTED at once (nothing hangs, nothing
// is left held), /readyz turns 503 with the reason, one error line is
// logged, and a metric says so.
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { GENERATION_UNIT } from "../../src/shard/tokens.ts";
import { ChildServer, runCli } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";
import { metric, readyz } from "../helpers/delay-probe.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

test("the counter's end is a clean, loud refusal: TOKENS_EXHAUSTED, nothing held, /readyz 503, one error line, a metric", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "lockd-tokens-end-"));
  dirs.push(dataDir);
  expect((await runCli(["floor", "--data-dir", dataDir, String(GENERATION_UNIT - 3)])).code).toBe(0);
  await using server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--shards-generation", "1"], { LOCKD_DATA_DIR: dataDir });
  const { listenPort, opsPort } = await server.addresses();
  const tokens: bigint[] = [];
  for (const name of ["a", "b"]) {
    const peer = await WirePeer.claim(listenPort, name, 5000);
    expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
    tokens.push(peer.frames[0]!.token!);
    peer.end();
    await peer.closed();
  }
  expect(tokens).toEqual([BigInt(2 * GENERATION_UNIT - 2), BigInt(2 * GENERATION_UNIT - 1)]);
  const refused = await WirePeer.claim(listenPort, "c", 5000);
  expect(refused.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.TOKENS_EXHAUSTED });
  expect(refused.frames[0]!.message).toContain("raise the shards generation");
  await refused.closed();
  expect(await readyz(opsPort)).toMatchObject({ status: 503, body: { status: "tokens_exhausted" } });
  expect(await metric(opsPort, "lockd_tokens_exhausted")).toBe(1);
  // Nothing kept for the refused claim: the lock view has no such lock.
  expect((await fetch(`http://127.0.0.1:${opsPort}/v1/locks/c`)).status).toBe(404);
  const again = await WirePeer.claim(listenPort, "d", 5000);
  expect(again.frames[0]!.code).toBe(ErrorCode.TOKENS_EXHAUSTED);
  expect(server.events("tokens.exhausted")).toHaveLength(1);
});
