/**
 * Shards end to end, with real `lockd serve` processes: the server's guard
 * (ERROR WRONG_SHARD on the wire), a client with a two-shard map holding
 * locks on both shards, a client with a stale map refused rather than
 * granted, and tokens after a map change above every earlier token.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LockClient } from "../../src/client/client.ts";
import { WrongShardError, type LockError } from "../../src/client/errors.ts";
import type { Lock } from "../../src/client/lock.ts";
import { ErrorCode, FrameType } from "../../src/protocol/constants.ts";
import { encodeAcquire } from "../../src/protocol/frames.ts";
import { Placement } from "../../src/shard/placement.ts";
import { GENERATION_UNIT } from "../../src/shard/tokens.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { namesOn } from "../helpers/names-on.ts";

interface Running {
  readonly child: ChildServer;
  readonly port: number;
  readonly opsPort: number;
}

const started: ChildServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((child) => child[Symbol.asyncDispose]()));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function shard(args: readonly string[], dataDir?: string): Promise<Running> {
  const child = ChildServer.spawn(
    ["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", ...args],
    dataDir === undefined ? {} : { LOCKD_DATA_DIR: dataDir },
  );
  started.push(child);
  const { listenPort, opsPort } = await child.addresses();
  return { child, port: listenPort, opsPort };
}

/** Stop a shard the way an operator does (SIGTERM: the token floor is saved). */
async function stop(running: Running): Promise<void> {
  running.child.proc.kill("SIGTERM");
  expect(await running.child.exit()).toBe(0);
}

/** Who holds `name` on this server, from its ops server (null: nobody). */
async function holderToken(running: Running, name: string): Promise<string | null> {
  const answer = await fetch(`http://127.0.0.1:${running.opsPort}/v1/locks?name=${encodeURIComponent(name)}`);
  if (answer.status === 404) return null;
  const body = (await answer.json()) as { holder: { token: string } | null };
  return body.holder?.token ?? null;
}

/** One ACQUIRE on a raw connection: the first frame the server answers with (type, code or token, message). */
async function rawAcquire(port: number, name: string): Promise<{ type: number; code?: number; message?: string; token?: bigint }> {
  const chunks: Uint8Array[] = [];
  let done!: () => void;
  const closed = new Promise<void>((resolve) => (done = resolve));
  const socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_, chunk) {
        chunks.push(new Uint8Array(chunk));
        const total = chunks.reduce((n, c) => n + c.length, 0);
        const bytes = Buffer.concat(chunks);
        if (total >= 4 && total >= 4 + ((bytes[2]! << 8) | bytes[3]!)) done();
      },
      close() {
        done();
      },
    },
  });
  socket.write(encodeAcquire({ name, leaseMs: 5000, owner: "raw", try: false }));
  await closed;
  socket.end();
  const bytes = Buffer.concat(chunks);
  const type = bytes[0]!;
  const length = (bytes[2]! << 8) | bytes[3]!;
  if (type === FrameType.ERROR) return { type, code: bytes[4]!, message: bytes.subarray(5, 4 + length).toString("utf8") };
  return { type, token: bytes.readBigUInt64BE(4) };
}

describe("shards", () => {
  const two = new Placement(["alpha", "beta"]);

  test("a shard answers an ACQUIRE for another shard's name with ERROR WRONG_SHARD, and grants its own", async () => {
    const alpha = await shard(["--shard", "alpha", "--shards", "alpha,beta"]);
    const start = await alpha.child.event("server.listening");
    expect({ shard: start.shard, shards: start.shards, shardsGeneration: start.shardsGeneration }).toEqual({ shard: "alpha", shards: "alpha,beta", shardsGeneration: 0 });
    const [theirs] = namesOn(two, "beta", 1);
    const [ours] = namesOn(two, "alpha", 1);
    const refused = await rawAcquire(alpha.port, theirs!);
    expect(refused.type).toBe(FrameType.ERROR);
    expect(refused.code).toBe(ErrorCode.WRONG_SHARD);
    expect(refused.message).toContain("this server is shard alpha of alpha,beta (generation 0), where this lock belongs to shard beta");
    const granted = await rawAcquire(alpha.port, ours!);
    expect(granted.type).toBe(FrameType.ACQUIRED);
    expect(await holderToken(alpha, theirs!)).toBeNull();
    const metrics = await (await fetch(`http://127.0.0.1:${alpha.opsPort}/metrics`)).text();
    expect(metrics).toContain('lockd_session_ends_total{reason="wrong_shard"} 1');
    expect(metrics).toContain('lockd_shard_info{shard="alpha",generation="0"} 1');
  });

  test("a client with a two-shard map holds locks on both shards at once, each on its own shard", async () => {
    const alpha = await shard(["--shard", "alpha", "--shards", "alpha,beta"]);
    const beta = await shard(["--shard", "beta", "--shards", "alpha,beta"]);
    const client = new LockClient({ servers: `alpha=127.0.0.1:${alpha.port};beta=127.0.0.1:${beta.port}` });
    const names = [...namesOn(two, "alpha", 3), ...namesOn(two, "beta", 3)];
    const locks: Lock[] = await Promise.all(names.map((name) => client.acquire(name, { lease: 10_000 })));
    try {
      for (const lock of locks) {
        const home = client.shardOf(lock.name) === "alpha" ? alpha : beta;
        const other = home === alpha ? beta : alpha;
        expect(await holderToken(home, lock.name)).toBe(String(lock.token));
        expect(await holderToken(other, lock.name)).toBeNull();
      }
    } finally {
      await Promise.all(locks.map((lock) => lock.release()));
    }
  });

  test("a client with a stale map gets WrongShardError naming both maps, never a grant on the wrong shard", async () => {
    // The servers run the new map (gamma added, generation 1); the client still has alpha,beta at generation 0.
    const three = new Placement(["alpha", "beta", "gamma"]);
    const args = (name: string) => ["--shard", name, "--shards", "alpha,beta,gamma", "--shards-generation", "1"];
    const alpha = await shard(args("alpha"));
    const beta = await shard(args("beta"));
    const client = new LockClient({ servers: `alpha=127.0.0.1:${alpha.port};beta=127.0.0.1:${beta.port}` });
    const [moved] = namesOn(two, "alpha", 1, (name) => three.shardOf(name) === "gamma");
    const error = (await client.acquire(moved!, { lease: 5000 }).then(
      () => null,
      (e: LockError) => e,
    )) as WrongShardError;
    expect(error).toBeInstanceOf(WrongShardError);
    expect(error.code).toBe("WRONG_SHARD");
    expect(error.class).toBe("client");
    expect(error.clientShard).toBe("alpha");
    expect(error.clientMap).toBe("alpha,beta (generation 0)");
    expect(error.serverMessage).toContain("this server is shard alpha of alpha,beta,gamma (generation 1), where this lock belongs to shard gamma");
    expect({ server: error.server, serverShard: error.serverShard, serverMap: error.serverMap }).toEqual({
      server: `127.0.0.1:${alpha.port}`,
      serverShard: "alpha",
      serverMap: "alpha,beta,gamma (generation 1)",
    });
    // What differs, named: the shards (and how many) and the generation; the address is right.
    expect(error.message).toBe(
      `lock ${JSON.stringify(moved)}: the client's map alpha,beta (generation 0) places it on shard alpha and sent it to 127.0.0.1:${alpha.port}, ` +
        `but the server there is shard alpha of alpha,beta,gamma (generation 1), where it belongs to shard gamma: ` +
        `what differs is the shards (2 in the client's map, 3 in the server's; gamma only in the server's), and the generation (0 in the client's map, 1 in the server's); ` +
        `fix the map (LOCKD_SERVER) and claim again`,
    );
    expect(await holderToken(alpha, moved!)).toBeNull();
    // Names that did not move still work with the old map.
    const [stayed] = namesOn(two, "beta", 1, (name) => three.shardOf(name) === "beta");
    await using lock = await client.acquire(stayed!, { lease: 5000 });
    expect(await holderToken(beta, stayed!)).toBe(String(lock.token));
  });

  test("a map with the two shards' addresses swapped: the refusal names the address listed under the wrong shard, not two identical maps", async () => {
    const alpha = await shard(["--shard", "alpha", "--shards", "alpha,beta", "--shards-generation", "1"]);
    const beta = await shard(["--shard", "beta", "--shards", "alpha,beta", "--shards-generation", "1"]);
    const client = new LockClient({ servers: `gen=1;alpha=127.0.0.1:${beta.port};beta=127.0.0.1:${alpha.port}` });
    const [name] = namesOn(two, "alpha", 1);
    const error = (await client.acquire(name!, { lease: 5000 }).then(
      () => null,
      (e: LockError) => e,
    )) as WrongShardError;
    expect(error).toBeInstanceOf(WrongShardError);
    expect({ clientShard: error.clientShard, clientMap: error.clientMap, server: error.server, serverShard: error.serverShard, serverMap: error.serverMap }).toEqual({
      clientShard: "alpha",
      clientMap: "alpha,beta (generation 1)",
      server: `127.0.0.1:${beta.port}`,
      serverShard: "beta",
      serverMap: "alpha,beta (generation 1)",
    });
    expect(error.message).toBe(
      `lock ${JSON.stringify(name)}: the client's map alpha,beta (generation 1) places it on shard alpha and sent it to 127.0.0.1:${beta.port}, ` +
        `but the server there is shard beta of the same shards and generation: ` +
        `what differs is the addresses: the client's map lists 127.0.0.1:${beta.port}, a server of shard beta, under shard alpha; ` +
        `fix the map (LOCKD_SERVER) and claim again`,
    );
    expect(error.message).not.toContain("differs from the servers'");
    expect(await holderToken(beta, name!)).toBeNull();
  });

  test("after a map change with a higher generation every token is above every token before it", async () => {
    const dataAlpha = mkdtempSync(join(tmpdir(), "lockd-shard-alpha-"));
    const dataBeta = mkdtempSync(join(tmpdir(), "lockd-shard-beta-"));
    const dataGamma = mkdtempSync(join(tmpdir(), "lockd-shard-gamma-"));
    dirs.push(dataAlpha, dataBeta, dataGamma);
    // Generation 0: two shards, each issues tokens from its own data directory.
    let alpha = await shard(["--shard", "alpha", "--shards", "alpha,beta", "--token-block", "1000"], dataAlpha);
    let beta = await shard(["--shard", "beta", "--shards", "alpha,beta", "--token-block", "1000"], dataBeta);
    const before = new LockClient({ servers: `alpha=127.0.0.1:${alpha.port};beta=127.0.0.1:${beta.port}` });
    let highest = 0n;
    for (const name of [...namesOn(two, "alpha", 20), ...namesOn(two, "beta", 20)]) {
      const lock = await before.acquire(name, { lease: 5000 });
      if (lock.token > highest) highest = lock.token;
      await lock.release();
    }
    expect(highest).toBeLessThan(BigInt(GENERATION_UNIT)); // generation 0: today's tokens
    await Promise.all([stop(alpha), stop(beta)]);
    // Generation 1: gamma joins with a fresh data directory (its counter starts at 1).
    const three = new Placement(["alpha", "beta", "gamma"]);
    // The servers take the clients' whole map too; they read only its names and generation.
    const map = "gen=1;alpha=10.0.0.1:7700;beta=10.0.0.2:7700;gamma=10.0.0.3:7700";
    const args = (name: string, dir: string) => shard(["--shard", name, "--shards", map], dir);
    alpha = await args("alpha", dataAlpha);
    beta = await args("beta", dataBeta);
    const gamma = await args("gamma", dataGamma);
    const after = new LockClient({ servers: `gen=1;alpha=127.0.0.1:${alpha.port};beta=127.0.0.1:${beta.port};gamma=127.0.0.1:${gamma.port}` });
    const moved = namesOn(two, "alpha", 5, (name) => three.shardOf(name) === "gamma");
    const stayed = namesOn(three, "beta", 5);
    for (const name of [...moved, ...stayed]) {
      await using lock = await after.acquire(name, { lease: 5000 });
      expect(lock.token).toBeGreaterThan(highest);
      expect(lock.token >> 48n).toBe(1n);
    }
  }, 60_000);

  test("bad shard flags exit 64 with one line naming the flag", async () => {
    const cases: [string[], string][] = [
      [["--shard", "alpha"], "--shard needs --shards"],
      [["--shards", "alpha,beta"], "--shards needs --shard NAME"],
      [["--shard", "gamma", "--shards", "alpha,beta"], '--shard "gamma" is not one of --shards alpha,beta'],
      [["--shard", "alpha", "--shards", "alpha,Beta"], '--shards: shard name "Beta" must be'],
      [["--shard", "alpha", "--shards", "gen=2;alpha=10.0.0.1:7700;beta=10.0.0.2:7700", "--shards-generation", "1"], "--shards says generation 2 and --shards-generation says 1"],
      [["--shards-generation", "32"], "--shards-generation"],
    ];
    for (const [args, message] of cases) {
      const child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", ...args]);
      started.push(child);
      expect(await child.exit()).toBe(64);
      expect(child.raw.join("\n")).toContain(message);
    }
  });
});
