/**
 * `lockd run`'s fast start (src/cli/run-fast.ts): what it takes for its
 * own agrees with the full command (run.ts, the option table, the address
 * grammar, encodeAcquire), and a run it takes behaves as every run does
 * when the claim needs the client's rules, before the grant (the
 * connection handed over, replayed) and while COMMAND runs (the client
 * taking the held lock over: heartbeats, loss, reclaim). The full command's
 * behaviour is test/cli/run.test.ts, many of whose runs take the fast start.
 */
import { afterEach, expect, test } from "bun:test";
import { resolve } from "node:path";
import { hostname } from "node:os";
import { FakeServer } from "../client/fake-server.ts";
import { Wakeup } from "../helpers/events.ts";
import { FAST_BLOCKING_ENV, FAST_DEFAULTS, fastPlan, immediateGrant, plainAcquire, plainAddress } from "../../src/cli/run-fast.ts";
import { RUN_OPTIONS } from "../../src/cli/options/run-options.ts";
import { parseServerMap } from "../../src/shard/map.ts";
import { ErrorCode, FLAG_RECLAIM, FLAG_RECLAIMABLE, FLAG_REPLY, FrameType, WAITING_REPLY_FRAME, decodeAcquire, encodeAcquire, encodeAcquired, encodeAcquiredSlot, encodeError } from "../../src/protocol/index.ts";
import { DEFAULT_LEASE_MS } from "../../src/client/client.ts";

const ROOT = resolve(import.meta.dir, "../..");
const MAIN = resolve(ROOT, "src/cli/main.ts");
const CHILD = resolve(ROOT, "test/fixtures/run-child.ts");

test("the fast start's defaults and environment are the option table's", () => {
  expect(FAST_DEFAULTS.server).toBe(RUN_OPTIONS.server.default);
  const parsed = (schema: { safeParse(text: string): { success: boolean } }, text: string) => (schema.safeParse(text) as { data?: unknown }).data;
  expect(parsed(RUN_OPTIONS.lease.schema, RUN_OPTIONS.lease.default)).toBe(FAST_DEFAULTS.leaseMs);
  expect(DEFAULT_LEASE_MS).toBe(FAST_DEFAULTS.leaseMs);
  expect(parsed(RUN_OPTIONS.killAfter.schema, RUN_OPTIONS.killAfter.default)).toBe(FAST_DEFAULTS.killAfterMs);
  // Every option with a default the fast start does not read defaults to what a plain claim sends.
  expect(RUN_OPTIONS.limit.default).toBe("1");
  const variables = Object.values(RUN_OPTIONS).flatMap((spec) => ("env" in spec && spec.env !== undefined ? [spec.env] : []));
  expect([...FAST_BLOCKING_ENV].sort()).toEqual(variables.filter((v) => v !== "LOCKD_SERVER").sort());
});

test("an address the fast start takes is the one the full grammar reads", () => {
  const taken = ["127.0.0.1:7700", "0.0.0.0:1", "255.255.255.255:65535", "10.1.2.3:07700", "localhost:7700", "lock-1.example.com:80", "A.b-c.D:9", `${"a".repeat(63)}.b:1`];
  for (const text of taken) {
    const fast = plainAddress(text);
    expect({ text, fast }).toEqual({ text, fast: parseServerMap(text).shards[0]!.addresses[0]! });
    expect(parseServerMap(text).shards).toHaveLength(1);
    expect(parseServerMap(text).shards[0]!.addresses).toHaveLength(1);
  }
  const left = [
    "", ":7700", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:123456", "127.0.0.01:7700", "256.0.0.1:7700", "1.2.3:7700",
    "1.2.3.4.5:7700", "[::1]:7700", "::1:7700", " 127.0.0.1:7700", "127.0.0.1:7700 ", "a:1,b:2", "alpha=a:1;beta=b:2", "gen=1;a:1", "-a:1", "a-:1", "a..b:1",
    "1a.b:1", "a_b:1", "é.com:1", `${"a".repeat(64)}:1`, "127.0.0.1:+80", "127.0.0.1:8e1",
  ];
  for (const text of left) expect({ text, fast: plainAddress(text) }).toEqual({ text, fast: null });
});

test("the fast start's ACQUIRE is encodeAcquire's for the same claim, byte for byte", () => {
  for (const [name, owner] of [
    ["bench/run", "host/pid-1"],
    ["jobs/nightly", `${hostname()}/pid-${process.pid}`],
    ["ünïcode/名前", "hôte/pid-2"],
    ["x".repeat(512), "o".repeat(256)],
    ["n", ""],
  ] as const) {
    expect(plainAcquire(name, owner, 5000)).toEqual(encodeAcquire({ name, owner, leaseMs: 5000, try: false, limit: 1, shared: false }));
  }
  // What encodeAcquire refuses, the fast start leaves to run.ts (which says why).
  expect(plainAcquire("", "o", 5000)).toBeNull();
  expect(plainAcquire("x".repeat(513), "o", 5000)).toBeNull();
  expect(plainAcquire("n", "o".repeat(257), 5000)).toBeNull();
  expect(() => encodeAcquire({ name: "x".repeat(513), owner: "o", leaseMs: 5000, try: false })).toThrow();
});

test("only one whole ACQUIRED answering the ACQUIRE is an immediate grant", () => {
  expect(immediateGrant(encodeAcquired(7, FLAG_REPLY))).toBe(7n);
  expect(immediateGrant(encodeAcquired(2 ** 40, FLAG_REPLY | FLAG_RECLAIMABLE))).toBe(2n ** 40n);
  expect(immediateGrant(encodeAcquired(7, 0))).toBe(0n); // a push, not the answer
  expect(immediateGrant(encodeAcquired(0, FLAG_REPLY))).toBe(0n);
  expect(immediateGrant(encodeAcquiredSlot(7, 0, FLAG_REPLY))).toBe(0n);
  expect(immediateGrant(WAITING_REPLY_FRAME)).toBe(0n);
  expect(immediateGrant(encodeError(ErrorCode.LOCK_BUSY, "held"))).toBe(0n);
  const two = new Uint8Array(24);
  two.set(encodeAcquired(7, FLAG_REPLY));
  two.set(encodeError(ErrorCode.SHUTTING_DOWN, ""), 12);
  expect(immediateGrant(two)).toBe(0n); // ACQUIRED and more in one chunk
  expect(immediateGrant(encodeAcquired(7, FLAG_REPLY).subarray(0, 11))).toBe(0n);
  expect(immediateGrant(encodeAcquired(7, FLAG_REPLY | 0x08))).toBe(0n); // an unknown flag
});

test("the fast start takes only a plain run: one address, a name, a command, every other option at its default", () => {
  const plan = (argv: string[], env: Record<string, string> = {}) => fastPlan(argv, env);
  expect(plan(["--server", "127.0.0.1:9", "jobs/a", "--", "true", "x"])).toEqual({ host: "127.0.0.1", port: 9, name: "jobs/a", command: ["true", "x"] });
  expect(plan(["--server=localhost:9", "jobs/a", "--", "true"])).toEqual({ host: "localhost", port: 9, name: "jobs/a", command: ["true"] });
  expect(plan(["jobs/a", "--", "true"])).toEqual({ host: "127.0.0.1", port: 7700, name: "jobs/a", command: ["true"] });
  expect(plan(["jobs/a", "--", "true"], { LOCKD_SERVER: "10.0.0.1:1" })).toEqual({ host: "10.0.0.1", port: 1, name: "jobs/a", command: ["true"] });
  expect(plan(["--server", "127.0.0.1:9", "jobs/a", "--", "true"], { LOCKD_SERVER: "10.0.0.1:1", LOCKD_LEASE: "" })?.port).toBe(9);
  for (const argv of [
    ["jobs/a"],
    ["jobs/a", "--"],
    ["--", "true"],
    ["-n", "jobs/a", "--", "true"],
    ["--lease", "2s", "jobs/a", "--", "true"],
    ["-w", "1s", "jobs/a", "--", "true"],
    ["--help", "jobs/a", "--", "true"],
    ["jobs/a", "jobs/b", "--", "true"],
    ["--server", "127.0.0.1:9", "--server", "127.0.0.1:8", "jobs/a", "--", "true"],
    ["--server", "127.0.0.1:9,127.0.0.1:8", "jobs/a", "--", "true"],
    ["--server", "--", "true"],
    ["-", "--", "true"],
  ]) {
    expect({ argv, plan: plan(argv) }).toEqual({ argv, plan: null });
  }
  for (const variable of FAST_BLOCKING_ENV) expect(plan(["jobs/a", "--", "true"], { [variable]: "x" })).toBeNull();
  expect(plan(["jobs/a", "--", "true"], { LOCKD_SERVER: "alpha=127.0.0.1:1;beta=127.0.0.1:2" })).toBeNull();
});

// --- runs the fast start takes, against a scripted server ---------------------------------------

interface Run {
  readonly proc: Bun.Subprocess<"ignore", "pipe", "pipe">;
  readonly out: string[];
  stderr: string;
  readonly done: Promise<number>;
  until(check: () => boolean, ms: number, what: string): Promise<void>;
}

const runs: Run[] = [];
afterEach(() => {
  for (const run of runs.splice(0)) run.proc.kill("SIGKILL");
});

/** `lockd run --server 127.0.0.1:PORT NAME -- bun run-child.ts ARGS...`: a run the fast start takes. */
function fastRun(port: number, name: string, ...childArgs: string[]): Run {
  const argv = ["--server", `127.0.0.1:${port}`, name, "--", process.execPath, CHILD, ...childArgs];
  const env: Record<string, string | undefined> = { ...process.env, LOCKD_LEASE: "", LOCKD_LIMIT: "", LOCKD_OWNER: "", LOCKD_TLS_CA: "", LOCKD_CLIENT_TLS_CERT: "", LOCKD_CLIENT_TLS_KEY: "" };
  expect(fastPlan(argv, env)).not.toBeNull(); // a run the fast start takes (else these tests would test run.ts alone)
  const proc = Bun.spawn([process.execPath, MAIN, "run", ...argv], { stdin: "ignore", stdout: "pipe", stderr: "pipe", env });
  const wake = new Wakeup();
  const out: string[] = [];
  const run = {
    proc,
    out,
    stderr: "",
    until: (check: () => boolean, ms: number, what: string) => wake.until(() => check() || undefined, ms, () => `${what}; stdout ${JSON.stringify(out)}; stderr ${run.stderr}`).then(() => {}),
  } as Run & { done?: Promise<number> };
  const read = async (stream: ReadableStream<Uint8Array>, into: (text: string) => void) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      into(decoder.decode(chunk, { stream: true }));
      wake.wake();
    }
  };
  let partial = "";
  const stdout = read(proc.stdout, (text) => {
    const lines = (partial + text).split("\n");
    partial = lines.pop()!;
    out.push(...lines);
  });
  const stderr = read(proc.stderr, (text) => (run.stderr += text));
  (run as { done: Promise<number> }).done = Promise.all([stdout, stderr, proc.exited]).then(([, , code]) => code);
  runs.push(run as Run);
  return run as Run;
}

async function exitOf(run: Run, ms = 15_000): Promise<number> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`did not exit in ${ms} ms; stderr: ${run.stderr}`)), ms)));
  try {
    return await Promise.race([run.done, limit]);
  } finally {
    clearTimeout(timer);
  }
}

/** Grants every ACQUIRE at once with `token`, and answers every HEARTBEAT as a holder's. */
const granting = (token: number) => (conn: { socket: { write(b: Uint8Array): number } }, frame: { type: number }) => {
  if (frame.type === FrameType.ACQUIRE || frame.type === FrameType.HEARTBEAT) conn.socket.write(encodeAcquired(token, FLAG_REPLY));
};

test("granted at once: COMMAND runs, the client takes the lock over and heartbeats on the same connection on the protocol's schedule", async () => {
  using server = new FakeServer(granting(41));
  const run = fastRun(server.port, "fast/held", "hold");
  await run.until(() => run.out.length > 0, 10_000, "COMMAND's first line");
  expect(JSON.parse(run.out[0]!)).toMatchObject({ token: "41", lock: "fast/held", slot: null });
  const conn = () => server.conns[0]!;
  await server.until(() => conn().frames.filter((f) => f.type === FrameType.HEARTBEAT).length >= 2, 10_000, "two heartbeats");
  expect(server.conns).toHaveLength(1);
  const [acquire, first, second] = conn().frames;
  expect(acquire!.type).toBe(FrameType.ACQUIRE);
  const decoded = decodeAcquire(acquire!.body, 0, acquire!.body.length);
  expect(decoded.ok && decoded.request).toMatchObject({ name: "fast/held", leaseMs: 5000, owner: expect.stringMatching(/\/pid-\d+$/) });
  // lease/4 - 2 x RTT after each answer (protocol.md section 8.2), loopback: 1.25 s, give or take the RTTs.
  expect(first!.at - acquire!.at).toBeGreaterThan(1100);
  expect(first!.at - acquire!.at).toBeLessThan(1400);
  expect(second!.at - first!.at).toBeGreaterThan(1100);
  run.proc.kill("SIGTERM"); // passed on to COMMAND, which exits 42
  expect(await exitOf(run)).toBe(42);
  await server.until(() => conn().closed, 5000, "the release");
  expect(run.stderr).toBe("");
}, 20_000);

for (const afterMs of [20, 600]) {
  test(`the connection closed ${afterMs} ms after the grant (${afterMs < FAST_DEFAULTS.leaseMs / 20 ? "before" : "after"} the client took over): the lock is lost, COMMAND gets SIGTERM, exit 76`, async () => {
    using server = new FakeServer((conn, frame) => {
      granting(5)(conn, frame);
      if (frame.type === FrameType.ACQUIRE) setTimeout(() => conn.socket.end(), afterMs);
    });
    const run = fastRun(server.port, "fast/lost", "hold");
    expect(await exitOf(run)).toBe(76);
    expect(run.out.slice(1)).toEqual(["SIGTERM"]);
    expect(run.stderr).toMatch(/^lockd run: lock "fast\/lost" lost \(closed\): the server closed the connection; sending SIGTERM to process group \d+\n$/);
  });
}

for (const pushAfterMs of [1, 200]) {
  test(`WAITING, then a grant pushed ${pushAfterMs} ms later (${pushAfterMs === 1 ? "while run.ts loads" : "to the client"}): the client goes on from the handed-over connection, COMMAND runs once with the pushed token`, async () => {
    let pushed = false;
    using server = new FakeServer((conn, frame) => {
      if (frame.type === FrameType.ACQUIRE) {
        conn.socket.write(WAITING_REPLY_FRAME);
        setTimeout(() => {
          pushed = true;
          conn.socket.write(encodeAcquired(77, 0));
        }, pushAfterMs);
      } else if (frame.type === FrameType.HEARTBEAT) conn.socket.write(pushed ? encodeAcquired(77, FLAG_REPLY) : WAITING_REPLY_FRAME);
    });
    const run = fastRun(server.port, "fast/queued", "exit", "3");
    expect(await exitOf(run)).toBe(3);
    expect(run.out.map((line) => JSON.parse(line))).toEqual([expect.objectContaining({ token: "77", lock: "fast/queued" })]);
    expect(server.conns).toHaveLength(1); // one connection: queued once, never claimed again
    expect(server.conns[0]!.frames.filter((f) => f.type === FrameType.ACQUIRE)).toHaveLength(1);
    expect(run.stderr).toBe("");
  });
}

test("SIGINT before the server answers: the claim is cancelled as in every run (exit 130), COMMAND never runs", async () => {
  using server = new FakeServer(() => {});
  const run = fastRun(server.port, "fast/never", "exit", "0");
  await server.until(() => server.conns[0]?.frames.length === 1, 10_000, "the ACQUIRE");
  run.proc.kill("SIGINT");
  expect(await exitOf(run)).toBe(130);
  expect(run.out).toEqual([]);
  expect(run.stderr).toBe('lockd run: claim on lock "fast/never" aborted\n');
  await server.until(() => server.conns[0]!.closed, 5000, "the connection closed");
});

test("a clean stop of a server with reclaim on, while COMMAND runs: the client reclaims on a new connection, COMMAND goes on", async () => {
  const grant = encodeAcquired(9, FLAG_REPLY | FLAG_RECLAIMABLE);
  using server = new FakeServer((conn, frame) => {
    if (frame.type === FrameType.ACQUIRE || frame.type === FrameType.HEARTBEAT) conn.socket.write(grant);
  });
  const run = fastRun(server.port, "fast/reclaim", "hold");
  await run.until(() => run.out.length > 0, 10_000, "COMMAND's first line");
  // Within the fast start's hold (before lease/20): the stop's frame is what hands the lock to the client.
  const stop = encodeError(ErrorCode.SHUTTING_DOWN, "server is shutting down cleanly");
  stop[1] = FLAG_RECLAIM;
  server.conns[0]!.socket.write(stop);
  server.conns[0]!.socket.end();
  await run.until(() => run.stderr.includes("reclaimed with the same token 9, COMMAND goes on"), 10_000, "the reclaim line");
  const reclaim = server.conns[1]!.frames[0]!;
  const decoded = decodeAcquire(reclaim.body, 0, reclaim.body.length);
  expect(decoded.ok && decoded.request.reclaim).toEqual({ token: 9, slot: -1 });
  expect(run.out.slice(1)).toEqual([]); // COMMAND untouched
  run.proc.kill("SIGTERM");
  expect(await exitOf(run)).toBe(42);
});
