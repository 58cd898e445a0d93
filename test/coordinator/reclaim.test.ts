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
 * Every wait is for an event (a log line, a frame, a grant), bounded.
 */
import { describe, expect, test } from "bun:test";
import { LockClient, type Lock } from "../../src/client/index.ts";
import { ErrorCode, FLAG_RECLAIM, FLAG_RECLAIMABLE, FLAG_REPLY, FLAG_SLOT, FrameType, encodeAcquire } from "../../src/protocol/index.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { WirePeer } from "../helpers/wire.ts";
import { freePort, type Postgres, suitePostgres } from "./pg.ts";

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
});
