// Fencing tokens across restarts of a real `lockd serve` process with the
// same data directory: after SIGTERM they continue from the last token;
// after SIGKILL they skip to the reserved floor; never back, never repeated.
// Block size 3, so the runs cross several block boundaries.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FrameType } from "../../src/protocol/index.ts";
import { readFloor } from "../../src/tokens/file.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lockd-durable-"));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const BLOCK = 3;
/** The claims' lease: short, so that the lock-delay after a SIGKILL is short too (unheartbeated, it outlives each claim). */
const LEASE = 300;

function serve(dataDir: string): ChildServer {
  return ChildServer.spawn(
    ["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--token-block", String(BLOCK)],
    { LOCKD_DATA_DIR: dataDir },
  );
}

/**
 * Take and release a lock `count` times; the tokens granted. After an
 * unclean stop the first claims wait out the lock-delay (0.8 x the 300 ms
 * lease, plus margin): WAITING, then the ACQUIRED push.
 */
async function grants(port: number, count: number): Promise<bigint[]> {
  const tokens: bigint[] = [];
  for (let i = 0; i < count; i++) {
    const peer = await WirePeer.claim(port, `lock-${i % 2}`, LEASE);
    const frame = peer.frames[0]!.type === FrameType.WAITING ? await peer.frame(1) : peer.frames[0]!;
    expect(frame.type).toBe(FrameType.ACQUIRED);
    tokens.push(frame.token!);
    peer.end();
    await peer.closed();
  }
  return tokens;
}

describe("durable fencing tokens", () => {
  test("strictly increasing across a clean restart and across SIGKILL", async () => {
    const dataDir = tempDir();
    const seen: bigint[] = [];

    {
      await using first = serve(dataDir);
      seen.push(...(await grants((await first.addresses()).listenPort, 5)));
      first.proc.kill("SIGTERM");
      expect(await first.exit()).toBe(0);
    }
    expect(seen).toEqual([1n, 2n, 3n, 4n, 5n]);
    expect(readFileSync(join(dataDir, "tokens"), "utf8")).toContain("floor=5 "); // the clean stop saved the last token

    {
      await using second = serve(dataDir);
      const port = (await second.addresses()).listenPort;
      const after = await grants(port, 4);
      expect(after).toEqual([6n, 7n, 8n, 9n]); // a clean restart skips nothing
      seen.push(...after);
      second.proc.kill("SIGKILL");
      await second.exited;
    }

    {
      await using third = serve(dataDir);
      const after = await grants((await third.addresses()).listenPort, 2);
      // Killed without saving: continue above the reserved floor, skipping at most one block.
      expect(after[0]!).toBeGreaterThan(9n);
      expect(after[0]!).toBeLessThanOrEqual(9n + BigInt(BLOCK) + 1n);
      seen.push(...after);
      third.proc.kill("SIGKILL");
      await third.exited;
    }

    for (let i = 1; i < seen.length; i++) expect(seen[i]!).toBeGreaterThan(seen[i - 1]!);
  });

  test("a corrupt token file stops start-up (exit 65) and says so; it is left as it was", async () => {
    const dataDir = tempDir();
    writeFileSync(join(dataDir, "tokens"), "lockd-tokens v1 floor=12 crc=00000000\n");
    await using child = serve(dataDir);
    expect(await child.exit()).toBe(65);
    expect(child.raw.join("\n")).toMatch(/token floor .*tokens is corrupt/);
    expect(readFileSync(join(dataDir, "tokens"), "utf8")).toBe("lockd-tokens v1 floor=12 crc=00000000\n");
  });

  test("an unusable data directory stops start-up (exit 73) and says why", async () => {
    const base = tempDir();
    const file = join(base, "not-a-dir");
    writeFileSync(file, "x");
    await using child = serve(join(file, "data"));
    expect(await child.exit()).toBe(73);
    expect(child.raw.join("\n")).toMatch(/cannot create the data directory/);
  });
});

describe("a start that fails", () => {
  test("on a port in use reserves no block: three failed starts leave the floor as it was", async () => {
    const dataDir = tempDir();
    const taken = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    try {
      for (const flag of ["--listen", "--ops", "--listen"]) {
        const args = ["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--token-block", "1000"];
        args[args.indexOf(flag) + 1] = `127.0.0.1:${taken.port}`;
        await using child = ChildServer.spawn(args, { LOCKD_DATA_DIR: dataDir });
        expect(await child.exit()).toBe(69);
        expect(child.raw.join("\n")).toContain(flag);
      }
    } finally {
      taken.stop(true);
    }
    expect(readFloor(dataDir)).toBe(0);
    await using child = serve(dataDir);
    expect(await grants((await child.addresses()).listenPort, 1)).toEqual([1n]);
  });
});

describe("lockd floor", () => {
  test("prints the floor, raises it, never lowers it; the next start issues above it", async () => {
    const dataDir = tempDir();
    const run = (args: string[]) => Bun.spawnSync([process.execPath, join(import.meta.dir, "../../src/cli/main.ts"), "floor", "--data-dir", dataDir, ...args]);
    expect(run([]).stdout.toString()).toBe("0\n");
    expect(run(["5000"]).exitCode).toBe(0);
    expect(run([]).stdout.toString()).toBe("5000\n");
    const lower = run(["10"]);
    expect(lower.exitCode).toBe(64);
    expect(lower.stderr.toString()).toContain("never goes down");
    await using child = serve(dataDir);
    expect(await grants((await child.addresses()).listenPort, 1)).toEqual([5001n]);
  });
});
