/**
 * Reclaim on a coordinated service (protocol.md section 14), with real
 * processes and a real PostgreSQL: two `lockd serve --coordinator
 * --reclaim-max-lease 10s` instances, one active and one standby.
 *
 * - A clean stop of the active (a rolling upgrade step): the release
 *   publishes its reclaimable holders in the coordinator row before any of
 *   them hears; they get SHUTTING_DOWN with RECLAIM, the standby takes the
 *   released row, and each reclaims its grant with its own token (an
 *   exclusive lock, shared holders, semaphore slots), while a name nobody
 *   held is granted at once and a held one waits. A TypeScript client's work
 *   runs through it (its signal never fires), told by onReclaim.
 * - A step-down forced by stopping PostgreSQL: the holders get SHUTTING_DOWN
 *   with RECLAIM, and once an instance takes the row over (expired, nothing
 *   published) they reclaim during its lock-delay with their tokens; a token
 *   above what was issued before the term is refused.
 *
 * - A SIGSTOP of the active (frozen, its connections open, silent): the
 *   standby takes the expired row over on its own port; a TypeScript
 *   client and a `lockd run` holder, both listing both addresses, hear
 *   nothing for lease/4, reclaim on a second connection at the new active
 *   (protocol.md section 14.3, "On silence") and keep their tokens, their
 *   work and COMMAND never told to stop; on SIGCONT the old active grants
 *   nothing.
 *
 * Every wait is for an event (a log line, a frame, a grant), bounded.
 */
import { describe, expect, test } from "bun:test";
import { LockClient, type Lock } from "../../src/client/index.ts";
import { ErrorCode, FLAG_RECLAIM, FLAG_RECLAIMABLE, FLAG_REPLY, FLAG_SLOT, FrameType, encodeAcquire } from "../../src/protocol/index.ts";
import { join } from "node:path";
import { FencedResource } from "../faults/fence.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { Wakeup } from "../helpers/events.ts";
import { forEachLine } from "../helpers/lines.ts";
import { WirePeer } from "../helpers/wire.ts";
import { freePort, freePorts, type Postgres, suitePostgres } from "./pg.ts";

let pg: Postgres;
suitePostgres((started) => (pg = started));

let serial = 0;
const nextService = () => `reclaim-${process.pid}-${++serial}`;

function instance(service: string, listenPort: number, coordinatorLease: number): ChildServer {
  return ChildServer.spawn([
    "serve",
    "--service", service,
    "--coordinator-lease", `${coordinatorLease}ms`,
    "--listen", `127.0.0.1:${listenPort}`,
    "--ops", "127.0.0.1:0",
    "--shutdown-grace", "0s",
    "--reclaim-max-lease", "10s",
  ], { LOCKD_COORDINATOR: pg.url() });
}

/** Two instances on one lock port: the first active (it creates the row), the second standby. */
async function pair(service: string, port: number, coordinatorLease: number): Promise<{ a: ChildServer; b: ChildServer }> {
  const a = instance(service, port, coordinatorLease);
  expect((await a.event("failover.active")).why).toBe("created");
  const b = instance(service, port, coordinatorLease);
  expect((await b.event("server.started")).role).toBe("standby");
  return { a, b };
}

interface Claim {
  readonly name: string;
  readonly leaseMs: number;
  readonly limit?: number;
  readonly shared?: boolean;
}

const peers: WirePeer[] = [];

/** Connect and send ACQUIRE (a reclaim of `token`/`slot` when given); resolves with the first answer in. */
async function claim(port: number, c: Claim, reclaim?: { token: bigint; slot?: number }): Promise<WirePeer> {
  const peer = await WirePeer.connect(port);
  peers.push(peer);
  peer.write(encodeAcquire({ name: c.name, leaseMs: c.leaseMs, owner: "coordinated-reclaim", try: false, limit: c.limit ?? 1, shared: c.shared ?? false, ...(reclaim === undefined ? {} : { reclaim }) }));
  await peer.frame(0);
  return peer;
}

/** The slot of a peer's first ACQUIRED (a semaphore's: the u16 after the token). */
function slotOf(peer: WirePeer): number {
  const body = peer.frames[0]!.body!;
  return (body[8]! << 8) | body[9]!;
}

const MAIN = join(import.meta.dir, "../../src/cli/main.ts");
const CHILD = join(import.meta.dir, "../fixtures/run-child.ts");

/** `lockd run` as a child process, its stdout lines and stderr collected as they arrive. */
function lockdRun(args: readonly string[]) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LOCKD_"))) as Record<string, string>;
  const proc = Bun.spawn([process.execPath, MAIN, "run", ...args], { stdin: "ignore", stdout: "pipe", stderr: "pipe", env: base });
  const wakeup = new Wakeup();
  const out: string[] = [];
  let err = "";
  void forEachLine(proc.stdout, (line) => out.push(line), () => wakeup.wake());
  void forEachLine(proc.stderr, (line) => (err += `${line}\n`), () => wakeup.wake());
  const describe = () => `stdout ${JSON.stringify(out)}, stderr ${err}`;
  return {
    proc,
    out,
    err: () => err,
    /** The first stdout line that `check` accepts (bounded). */
    line: (check: (line: string) => boolean, ms = 10_000) => wakeup.until(() => out.find(check), ms, () => `a line; ${describe()}`),
    /** Waits until stderr contains `text` (bounded). */
    errContains: (text: string, ms = 10_000) => wakeup.until(() => err.includes(text), ms, () => `${JSON.stringify(text)} on stderr; ${describe()}`),
  };
}

function cleanup(): void {
  for (const peer of peers.splice(0)) peer.terminate();
}

describe("coordinated reclaim", () => {
  test("a clean stop of the active: its holders reclaim at the standby with their tokens; unpublished names are granted at once", async () => {
    const service = nextService();
    const port = await freePort();
    const { a, b } = await pair(service, port, 2000);
    await using _a = a;
    await using _b = b;
    try {
      const exclusive: Claim = { name: "x", leaseMs: 5000 };
      const shared: Claim = { name: "rw", leaseMs: 5000, shared: true };
      const pool: Claim = { name: "pool", leaseMs: 5000, limit: 3 };
      const long: Claim = { name: "long", leaseMs: 20_000 };
      const x = await claim(port, exclusive);
      const r1 = await claim(port, shared);
      const r2 = await claim(port, shared);
      const s0 = await claim(port, pool);
      const s1 = await claim(port, pool);
      const big = await claim(port, long);
      const waiter = await claim(port, exclusive);
      for (const holder of [x, r1, r2]) expect(holder.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE });
      expect(s1.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_SLOT | FLAG_RECLAIMABLE });
      expect([slotOf(s0), slotOf(s1)]).toEqual([0, 1]);
      expect(big.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY }); // above the cap: not reclaimable
      expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);

      // A TypeScript client holds "lib" with work running on its signal.
      const client = new LockClient({ servers: `127.0.0.1:${port}` });
      let told!: (lock: Lock) => void;
      const reclaimed = new Promise<Lock>((resolve) => (told = resolve));
      const lib = await client.acquire("lib", { lease: 5000, onReclaim: (lock) => told(lock) });
      const libToken = lib.token;

      a.proc.kill("SIGTERM");
      expect(await a.exit()).toBe(0);
      expect(await a.event("reclaim.published")).toMatchObject({ grants: 6, names: 4 });
      await Promise.all([x, r1, r2, s0, s1, big, waiter].map((p) => p.closed()));
      for (const holder of [x, r1, r2, s0, s1]) expect(holder.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: FLAG_RECLAIM });
      for (const other of [big, waiter]) expect(other.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: 0 });

      const active = await b.event("failover.active");
      expect(active).toMatchObject({ why: "released", reclaimMaxLeaseMs: 10_000, reclaimPublished: 6 });

      // A name nobody held is granted at once; a held one queues (behind its reclaim).
      const free = await claim(port, { name: "free", leaseMs: 5000 });
      expect(free.frames[0]!.type).toBe(FrameType.ACQUIRED);
      const fresh = await claim(port, exclusive);
      expect(fresh.frames[0]!.type).toBe(FrameType.WAITING);

      // A token that was not published: refused.
      const wrong = await claim(port, exclusive, { token: x.frames[0]!.token! + 1000n });
      expect(wrong.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.RECLAIM_REFUSED });

      // Each holder reclaims its own grant, with its own token (and slot).
      const back = [
        await claim(port, exclusive, { token: x.frames[0]!.token! }),
        await claim(port, shared, { token: r1.frames[0]!.token! }),
        await claim(port, shared, { token: r2.frames[0]!.token! }),
        await claim(port, pool, { token: s0.frames[0]!.token!, slot: 0 }),
        await claim(port, pool, { token: s1.frames[0]!.token!, slot: 1 }),
      ];
      const before = [x, r1, r2, s0, s1];
      back.forEach((peer, i) => expect(peer.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: before[i]!.frames[0]!.flags, token: before[i]!.frames[0]!.token }));
      expect([slotOf(back[3]!), slotOf(back[4]!)]).toEqual([0, 1]);

      // The new active's /readyz shows the grace: every published grant back (the library's too, once in).
      const ops = Number(String((await b.event("server.started")).ops).split(":").pop());
      const grace = async () => ((await (await fetch(`http://127.0.0.1:${ops}/readyz`)).json()) as { lockDelay: { reclaim?: Record<string, unknown> } }).lockDelay.reclaim;
      expect(await grace()).toMatchObject({ published: 6, reclaimed: expect.any(Number) });
      // The library's lock came back by itself, same token, its work never told to stop.
      expect(await reclaimed).toBe(lib);
      expect(lib.token).toBe(libToken);
      expect(lib.signal.aborted).toBe(false);
      expect(lib.reclaims).toBe(1);
      expect(await grace()).toMatchObject({ published: 6, reclaimed: 6, unclaimedNames: [], unclaimedNameCount: 0 });

      // The fresh claim of "x" is served once the reclaimed holder leaves, with a token above every earlier one.
      back[0]!.end();
      const grant = await fresh.frame(1, 10_000);
      expect(grant.type).toBe(FrameType.ACQUIRED);
      expect(grant.token!).toBeGreaterThan(x.frames[0]!.token!);
      await lib.release();

    } finally {
      cleanup();
    }
  }, 60_000);

  test("a second clean stop inside the grace carries it on: a holder that had not come back yet reclaims at the third active", async () => {
    const service = nextService();
    const port = await freePort();
    const { a, b } = await pair(service, port, 2000);
    await using _a = a;
    await using _b = b;
    await using c = instance(service, port, 2000);
    expect((await c.event("server.started")).role).toBe("standby");
    try {
      const early: Claim = { name: "early", leaseMs: 10_000 };
      const late: Claim = { name: "late", leaseMs: 10_000 };
      const e = await claim(port, early);
      const l = await claim(port, late);
      a.proc.kill("SIGTERM");
      expect(await a.exit()).toBe(0);
      await Promise.all([e.closed(), l.closed()]);
      // Either standby takes the released row; "early" comes back to it, "late" not yet.
      const second = await Promise.any([b.event("failover.active", 10_000).then(() => b), c.event("failover.active", 10_000).then(() => c)]);
      const third = second === b ? c : b;
      const back = await claim(port, early, { token: e.frames[0]!.token! });
      expect(back.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, token: e.frames[0]!.token });
      second.proc.kill("SIGTERM");
      expect(await second.exit()).toBe(0);
      // The second active published its own holder and the grant still awaited.
      expect(await second.event("reclaim.published")).toMatchObject({ grants: 2, names: 2 });
      await back.closed();
      expect(await third.event("failover.active", 10_000)).toMatchObject({ why: "released", reclaimPublished: 2 });
      for (const [peer, spec] of [[l, late], [e, early]] as const) {
        const again = await claim(port, spec, { token: peer.frames[0]!.token! });
        expect(again.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token: peer.frames[0]!.token });
      }
    } finally {
      cleanup();
    }
  }, 60_000);

  test("a step-down because PostgreSQL stopped: holders are told to reclaim, and reclaim from the next active with their tokens", async () => {
    const service = nextService();
    const port = await freePort();
    const { a, b } = await pair(service, port, 1000);
    await using _a = a;
    await using _b = b;
    try {
      const exclusive: Claim = { name: "x", leaseMs: 10_000 };
      const x = await claim(port, exclusive);
      expect(x.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE });
      const token = x.frames[0]!.token!;

      await pg.stop();
      expect(await a.event("failover.stepping_down", 10_000)).toMatchObject({ reclaim: true });
      await x.closed();
      expect(x.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN, flags: FLAG_RECLAIM });
      await pg.start();

      // Whichever instance takes the row over (expired: nothing was published) holds every name back and accepts the reclaim.
      const next = Promise.any([a.nthEvent("failover.active", 2, 20_000), b.event("failover.active", 20_000)]);
      const taken = await next;
      expect(taken).toMatchObject({ why: "expired", reclaimMaxLeaseMs: 10_000, reclaimPublished: 0 });
      expect(taken.lockDelayNames).toBe("every name");
      // Listening now ("failover.active" is logged once the listener is open). A token of this term: refused.
      const beyond = await claim(port, exclusive, { token: BigInt(taken.tokensFrom) + 10n });
      expect(beyond.frames[0]).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.RECLAIM_REFUSED });
      const back = await claim(port, exclusive, { token });
      expect(back.frames[0]).toMatchObject({ type: FrameType.ACQUIRED, flags: FLAG_REPLY | FLAG_RECLAIMABLE, token });
      // A fresh claim of the name queues behind it (TRY: LOCK_DELAYED while every name is held back).
      const fresh = await claim(port, exclusive);
      expect(fresh.frames[0]!.type).toBe(FrameType.WAITING);
    } finally {
      cleanup();
    }
  }, 60_000);

  test("a SIGSTOP of the active: its holders hear nothing, reclaim on silence at the new active with their tokens, and keep their work and COMMAND", async () => {
    const service = nextService();
    // Two ports: a frozen active keeps its listening socket (connections to it are taken and never answered).
    const [portA, portB] = (await freePorts(2)) as [number, number];
    const a = instance(service, portA, 1000);
    await using _a = a;
    expect((await a.event("failover.active")).why).toBe("created");
    const b = instance(service, portB, 1000);
    await using _b = b;
    expect((await b.event("server.started")).role).toBe("standby");
    using fence = new FencedResource();
    const servers = `127.0.0.1:${portA},127.0.0.1:${portB}`;
    const run = lockdRun(["--server", servers, "--lease", "8s", "job", "--", process.execPath, CHILD, "hold"]);
    let commandPid = 0;
    try {
      const client = new LockClient({ servers });
      let told!: (lock: Lock) => void;
      const reclaimed = new Promise<Lock>((resolve) => (told = resolve));
      const lock = await client.acquire("k", { lease: 8000, onReclaim: (l) => told(l) });
      const token = lock.token;
      expect(await fence.write(token)).toBe(200);
      const command = JSON.parse(await run.line((l) => l.startsWith("{"))) as { pid: number; token: string };
      commandPid = command.pid;
      const waiter = await WirePeer.claim(portA, "k", 60_000);
      peers.push(waiter);
      expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);

      a.proc.kill("SIGSTOP");
      let fresh: WirePeer | undefined;
      try {
        const took = await b.event("failover.active", 15_000);
        expect(took).toMatchObject({ why: "expired", reclaimMaxLeaseMs: 10_000, reclaimPublished: 0 });
        expect(took.lockDelayNames).toBe("every name");
        // Each holder's heartbeats go unanswered; within its deadline it reclaims at the next address.
        expect(await reclaimed).toBe(lock);
        expect(lock.token).toBe(token);
        expect(lock.reclaims).toBe(1);
        expect(lock.signal.aborted).toBe(false);
        expect(await fence.write(lock.token)).toBe(200);
        await run.errContains(`lock "job" reclaimed with the same token ${command.token}, COMMAND goes on`);
        expect(() => process.kill(command.pid, 0)).not.toThrow(); // COMMAND still running
        // The new active serves the reclaimed holder: a fresh claim of its name waits.
        fresh = await claim(portB, { name: "k", leaseMs: 60_000 });
        expect(fresh.frames[0]!.type).toBe(FrameType.WAITING);
      } finally {
        a.proc.kill("SIGCONT");
      }
      // The old active wakes to its holder's closed connection and grants nothing.
      expect((await a.event("failover.stepping_down", 15_000)).reason).toMatch(/no renewal confirmed|taken/);
      await waiter.closed(15_000);
      expect(waiter.frames.map((f) => f.type)).not.toContain(FrameType.ACQUIRED);
      expect(waiter.frames.at(-1)).toMatchObject({ type: FrameType.ERROR, code: ErrorCode.SHUTTING_DOWN });
      expect(lock.signal.aborted).toBe(false);
      expect(run.out.some((l) => l.includes("SIGTERM"))).toBe(false); // COMMAND was never told to stop

      // Once the reclaimed holder leaves (and the hold-back of an expired takeover ends), the fresh claim gets a higher token.
      await lock.release();
      const grant = await fresh!.frame(1, 15_000);
      expect(grant.type).toBe(FrameType.ACQUIRED);
      expect(grant.token!).toBeGreaterThan(token);
      expect(await fence.write(grant.token!)).toBe(200);
      expect(fence.writes.every((w) => w.accepted)).toBe(true);
      // SIGTERM to lockd run goes to COMMAND (which exits 42 on it), and lockd run exits with its code.
      run.proc.kill("SIGTERM");
      expect(await run.proc.exited).toBe(42);
    } finally {
      run.proc.kill("SIGKILL");
      if (commandPid !== 0) {
        try {
          process.kill(commandPid, "SIGKILL");
        } catch {
          // already gone
        }
      }
      cleanup();
    }
  }, 60_000);
});
