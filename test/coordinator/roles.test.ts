/**
 * The role shell (src/failover/shell.ts) in-process, with the row in memory: the wall
 * clock lockd's process sees is shifted by hours forwards and backwards
 * while an active renews and a standby watches, and nothing happens (no
 * step-down, no takeover); lockd's coordinator code reads no wall clock.
 */
import { afterEach, expect, setSystemTime, test } from "bun:test";
import { Logger } from "../../src/log/logger.ts";
import { activeHolder, type HolderMap, ownMapOf, releasedHolder } from "../../src/failover/holder.ts";
import { FailoverShell } from "../../src/failover/shell.ts";
import { LockServer } from "../../src/server/server.ts";
import { MemoryRow, MemoryStore } from "./memory-store.ts";
import { FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { WirePeer } from "../helpers/wire.ts";

// 2 s: both roles run in this process on real timers, and an active that confirms no
// renewal for 0.8 x lease steps down; with 1 s, a stall of ~550 ms of this process (a
// loaded 2-core machine) would be a step-down the wall-clock test counts as a failure.
const LEASE = 2000;

afterEach(() => {
  setSystemTime(); // back to the real clock
});

function roles(shared: MemoryRow, instance: string, lines: string[], onRole?: (role: string) => void, map?: HolderMap): FailoverShell {
  return new FailoverShell({
    ...(onRole === undefined ? {} : { onRole }),
    ...(map === undefined ? {} : { map }),
    store: map === undefined ? new MemoryStore(shared, instance, LEASE, 1000) : new MemoryStore(shared, activeHolder(instance, map), LEASE, 1000, releasedHolder(map)),
    service: "svc",
    instance,
    leaseMs: LEASE,
    block: 1000,
    ioTimeoutMs: 5000,
    log: new Logger("info", (line) => lines.push(line)),
    listen: (tokens, guard) => new LockServer({ hostname: "127.0.0.1", port: 0, ioTimeoutMs: 5000, tokens, grantGuard: guard }),
  });
}

/** roles(...), started, once its first decision is made. */
async function started(shared: MemoryRow, instance: string, lines: string[], onRole?: (role: string) => void): Promise<FailoverShell> {
  const r = roles(shared, instance, lines, onRole);
  r.start();
  await r.started;
  return r;
}

/** Resolves after `count` more statements named `name`. */
function statements(shared: MemoryRow, name: string, count: number): Promise<void> {
  let seen = 0;
  return new Promise((resolve) => {
    shared.onStatement = (n) => {
      if (n === name && ++seen >= count) resolve();
    };
  });
}

test("a wall clock shifted by hours, both ways, changes no role: the active keeps renewing, the standby keeps watching", async () => {
  const shared = new MemoryRow();
  const lines: string[] = [];
  const a = roles(shared, "a", lines);
  const created = statements(shared, "create", 1);
  a.start();
  await created;
  await a.started;
  const b = await started(shared, "b", lines);
  expect([a.role, b.role]).toEqual(["active", "standby"]);
  try {
    for (const shift of [3_600_000, -7_200_000, 86_400_000 * 365, -86_400_000 * 3650]) {
      setSystemTime(new Date(Date.now() + shift));
      await statements(shared, "renew", 2); // two renewals (half a lease) under this wall clock
    }
    expect([a.role, b.role]).toEqual(["active", "standby"]);
    expect(a.machine.stepDowns + b.machine.stepDowns).toBe(0);
    expect(shared.row!.epoch).toBe(1);
    expect(a.machine.renewalsFailed).toBe(0);
  } finally {
    setSystemTime();
    await a.stop();
    // The clean stop released the row: the standby takes it at its next read.
    await statements(shared, "takeover", 1);
    expect(shared.row!.holder).toBe("b");
    await b.stop();
  }
});

test("the coordinator unreachable: the active steps down, the standby cannot take over, and when it is back one of them is active", async () => {
  const shared = new MemoryRow();
  const lines: string[] = [];
  let steppedDown!: () => void;
  const down = new Promise<void>((resolve) => (steppedDown = resolve));
  const a = await started(shared, "a", lines, (role) => role === "standby" && steppedDown());
  const b = await started(shared, "b", lines);
  try {
    const server = a.server!;
    shared.down = true;
    await down;
    expect(a.role).toBe("standby");
    // Stepped down, and no read answers: it shows its own term, and no active (not itself).
    expect(a.view()).toMatchObject({ role: "standby", epoch: 1, active: null, activeOps: null });
    expect(a.server).toBeNull();
    await server.stop(); // the step-down's stop: sessions ended, listener closed
    expect(a.machine.stepDowns).toBe(1);
    expect(a.mayGrant(0)).toBe(false);
    await statements(shared, "read", 4);
    expect(b.role).toBe("standby");
    shared.down = false;
    await statements(shared, "takeover", 1);
    expect(shared.row!.epoch).toBe(2);
  } finally {
    await a.stop();
    await b.stop();
  }
});

test("a standby shows the service's epoch and active as it last read the row (not its own term's epoch 0); the metrics' epoch stays its own term's", async () => {
  const shared = new MemoryRow();
  const lines: string[] = [];
  const map = ownMapOf({ shard: "alpha", shards: ["alpha", "beta"], generation: 1 });
  const a = roles(shared, "db1/pid-1/aaaa", lines, undefined, map);
  a.start();
  await a.started;
  const b = roles(shared, "db2/pid-2/bbbb", lines, undefined, map);
  b.start();
  await b.started;
  let c: FailoverShell | null = null;
  try {
    expect(a.view()).toEqual({ role: "active", epoch: 1, service: "svc", instance: "db1/pid-1/aaaa", active: "db1/pid-1/aaaa", activeOps: null });
    expect(b.view()).toEqual({ role: "standby", epoch: 1, service: "svc", instance: "db2/pid-2/bbbb", active: "db1/pid-1/aaaa", activeOps: null });
    const takeover = statements(shared, "takeover", 1);
    await a.stop();
    // Released: the stopped instance no longer names itself (nor anyone) as the active.
    expect(a.view()).toEqual({ role: "stopped", epoch: 1, service: "svc", instance: "db1/pid-1/aaaa", active: null, activeOps: null });
    await takeover;
    expect(shared.row!.epoch).toBe(2);
    // A standby started now, at the service's epoch 2: it shows 2 and the active's id without the map tag.
    c = roles(shared, "db3/pid-3/cccc", lines, undefined, map);
    c.start();
    await c.started;
    expect(c.view()).toEqual({ role: "standby", epoch: 2, service: "svc", instance: "db3/pid-3/cccc", active: "db2/pid-2/bbbb", activeOps: null });
    expect(c.metrics().epoch).toBe(0); // lockd_coordinator_epoch: this instance's own (no) term
    expect(c.machine.epoch).toBe(0); // the machine's state is untouched by what the view shows
    expect(b.view()).toMatchObject({ role: "active", epoch: 2, active: "db2/pid-2/bbbb", activeOps: null });
    // The clean stop's log claims no standby it cannot see.
    const released = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((l) => String(l.event).startsWith("failover.release"));
    expect(released.map(({ event, level, service, epoch }) => ({ event, level, service, epoch }))).toEqual([{ event: "failover.released", level: "info", service: "svc", epoch: 1 }]);
  } finally {
    await b.stop();
    await c?.stop();
  }
});

test("a standby of a plain service logs the active with the map \"none\", and a released row as released with active null (not \"(released)\")", async () => {
  const shared = new MemoryRow();
  const lines: string[] = [];
  const a = await started(shared, "a", lines);
  const b = await started(shared, "b", lines);
  try {
    const takeover = statements(shared, "takeover", 1);
    await a.stop();
    await takeover;
  } finally {
    await a.stop();
    await b.stop();
  }
  const seen = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((l) => l.event === "standby.watching" || l.event === "standby.row_released");
  expect(seen.map(({ event, active, activeOps, activeMap, releasedMap }) => ({ event, active, activeOps, activeMap, releasedMap }))).toEqual([
    // No map on either side: nothing that reads like a warning.
    { event: "standby.watching", active: "a", activeOps: null, activeMap: "none", releasedMap: undefined },
    { event: "standby.row_released", active: null, activeOps: undefined, activeMap: undefined, releasedMap: "none" },
  ]);
  expect(lines.map((line) => JSON.parse(line).event)).not.toContain("standby.map_differs");
});

test("lockd's coordinator code reads only the monotonic clock", async () => {
  const files = [...new Bun.Glob("*.ts").scanSync(new URL("../../src/failover/", import.meta.url).pathname)];
  expect(files.length).toBeGreaterThanOrEqual(4);
  for (const file of files) {
    const source = await Bun.file(new URL(`../../src/failover/${file}`, import.meta.url)).text();
    const code = source.replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
    expect({ file, wall: /\bDate\b|hrtime|Bun\.nanoseconds/.test(code) }).toEqual({ file, wall: false });
  }
});

test("a grant whose lease the row does not cover yet is answered only after the raise landed (made durable before the grant)", async () => {
  const shared = new MemoryRow();
  const lines: string[] = [];
  const raised: number[] = [];
  let listening!: () => void;
  const active = new Promise<void>((resolve) => (listening = resolve));
  const r = new FailoverShell({
    onRole: (role) => role === "active" && listening(),
    store: new MemoryStore(shared, "a", LEASE, 1000),
    service: "svc",
    instance: "a",
    leaseMs: LEASE,
    block: 1000,
    ioTimeoutMs: 5000,
    log: new Logger("info", (line) => lines.push(line)),
    listen: (tokens, guard, delay) => new LockServer({ hostname: "127.0.0.1", port: 0, ioTimeoutMs: 5000, tokens, grantGuard: guard, delay }),
  });
  shared.onStatement = (name) => {
    if (name === "raise") raised.push(shared.row!.maxLeaseMs!);
  };
  r.start();
  await r.started;
  try {
    await active; // listening, and the server set
    const covered = await WirePeer.claim(r.server!.port, "small", LEASE / 4);
    expect(covered.frames[0]!.type).toBe(FrameType.ACQUIRED);
    expect(raised).toEqual([]); // a quarter of the coordinator lease is covered from the takeover on
    const peer = await WirePeer.claim(r.server!.port, "big", 20_000);
    const frame = peer.frames[0]!;
    expect(frame).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY });
    // By the time the reply was written, the row held a largest lease covering it.
    expect(raised).toHaveLength(1);
    expect(raised[0]!).toBeGreaterThanOrEqual(20_000);
    covered.end();
    peer.end();
  } finally {
    await r.stop();
  }
});
