/**
 * The coordinator role machine on a manual clock: every rule of the roles
 * (standby watch and takeover, active renewal and step-down, the check
 * before a grant, token blocks), with `now` as a plain number.
 */
import { type DrivenMachine, drivenMachine } from "../helpers/role-machine.ts";
import { describe, expect, test } from "bun:test";
import { type RoleAction, type CoordinatorRow, Outcome } from "../../src/failover/machine.ts";

const LEASE = 2000;
const BLOCK = 10;

function row(epoch: number, renewals: number, holder = "other", tokenFloor = 100, leaseMs = LEASE): CoordinatorRow {
  return { epoch, holder, renewals, tokenFloor, leaseMs, maxLeaseMs: leaseMs / 4, carryLeaseMs: 0, held: holder === "" ? [] : null };
}

function types(actions: readonly RoleAction[]): string[] {
  return actions.map((a) => a.type);
}

/** A machine made active at `at` by a takeover sent at `at` (epoch 2, floor 100). */
function active(at = 0, floor = 100): DrivenMachine {
  const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
  m.start(at);
  m.readDone(at, row(1, 0, "", floor - BLOCK));
  const actions = m.takeoverDone(at, row(2, 0, "me", floor));
  expect(types(actions)).toContain("activate");
  return m;
}

describe("standby", () => {
  test("a missing row is created and the creator is active at once", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK, initialFloor: 40 });
    expect(m.start(0)).toEqual([{ type: "read" }]);
    expect(m.readDone(5, null)).toEqual([{ type: "create", floor: 40 }]);
    const actions = m.createDone(8, row(1, 0, "me", 50));
    expect(actions[0]).toMatchObject({ type: "activate", epoch: 1, firstToken: 41, why: "created", unchangedMs: 0 });
    expect(m.role).toBe("active");
    expect(m.epoch).toBe(1);
  });

  test("another instance created the row first: read again and watch", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(1, null);
    expect(m.createDone(2, null)).toEqual([{ type: "read" }]);
    expect(m.role).toBe("standby");
  });

  test("reads every lease/4 and takes over only after a whole lease unchanged, counted from the answer that showed it", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    // The read was sent at 0 but answered at 300: the lease counts from 300.
    expect(m.readDone(300, row(3, 7))).toEqual([]);
    expect(m.nextWake()).toBe(300 + LEASE / 4);
    for (let t = 300 + LEASE / 4; t < 300 + LEASE; t += LEASE / 4) {
      expect(m.tick(t)).toEqual([{ type: "read" }]);
      expect(m.readDone(t, row(3, 7))).toEqual([]);
    }
    expect(m.nextWake()).toBe(300 + LEASE);
    expect(m.tick(300 + LEASE - 1)).toEqual([]);
    expect(m.tick(300 + LEASE)).toEqual([{ type: "takeover", watched: { epoch: 3, renewals: 7, holder: "other" } }]);
    expect(m.takeoverDone(300 + LEASE + 9, row(4, 0, "me", 110))[0]).toMatchObject({ type: "activate", why: "expired", unchangedMs: LEASE });
  });

  test("a renewal seen restarts the watch from the read that showed it", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(3, 7));
    m.tick(LEASE / 2);
    m.readDone(LEASE / 2, row(3, 8)); // the active renewed
    m.tick(LEASE - 100);
    expect(m.readDone(LEASE, row(3, 8))).toEqual([]); // a whole lease since (3, 7), but not since (3, 8)
    expect(m.tick(LEASE + LEASE / 4)).toEqual([{ type: "read" }]);
    m.readDone(LEASE + LEASE / 4, row(3, 8));
    expect(m.nextWake()).toBe(LEASE / 2 + LEASE);
    expect(types(m.tick(LEASE / 2 + LEASE))).toEqual(["takeover"]);
  });

  test("a new epoch (another standby took over) restarts the watch too", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(3, 7));
    m.tick(LEASE / 4);
    m.readDone(LEASE / 4, row(4, 0, "third"));
    expect(m.tick(LEASE)).toEqual([{ type: "read" }]); // not a takeover: (4, 0) seen only since lease/4
  });

  test("waits the longer of its own lease and the row's", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(3, 7, "other", 100, 3 * LEASE));
    expect(m.nextWake()).toBe(LEASE / 4);
    let t = 0;
    while (t < 3 * LEASE - LEASE / 4) {
      t += LEASE / 4;
      expect(m.tick(t)).toEqual([{ type: "read" }]);
      m.readDone(t, row(3, 7, "other", 100, 3 * LEASE));
    }
    expect(types(m.tick(3 * LEASE))).toEqual(["takeover"]);
  });

  test("a released row (clean stop) is taken over at once", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    expect(m.readDone(10, row(5, 9, ""))).toEqual([{ type: "takeover", watched: { epoch: 5, renewals: 9, holder: "" } }]);
  });

  test("a failed takeover (the active renewed in between) reads again at once", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(3, 7));
    m.tick(LEASE);
    expect(m.takeoverDone(LEASE + 5, null)).toEqual([{ type: "read" }]);
    expect(m.role).toBe("standby");
  });

  test("an unanswered read is retried at the next lease/4 and decides nothing", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    expect(m.readDone(50, null, true)).toEqual([]);
    expect(m.nextWake()).toBe(50 + LEASE / 4);
    expect(m.role).toBe("standby");
  });
});

describe("active", () => {
  test("the takeover gives a block above the old floor and renewals every lease/4", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(1, 0, ""));
    const actions = m.takeoverDone(40, row(2, 0, "me", 110));
    expect(actions[0]).toMatchObject({ type: "activate", epoch: 2, firstToken: 101, why: "released", unchangedMs: 0 });
    expect(m.nextToken()).toBe(101);
    expect(m.tick(LEASE / 4 - 1)).toEqual([]);
    expect(m.tick(LEASE / 4)).toEqual([{ type: "renew", epoch: 2, sentAt: LEASE / 4, carryLeaseMs: 0 }]);
  });

  test("the lease runs from when the confirmed renewal was SENT, and the grant check reads the clock", () => {
    const m = active(0);
    const renew = m.tick(500);
    expect(renew).toEqual([{ type: "renew", epoch: 2, sentAt: 500, carryLeaseMs: 0 }]);
    m.renewDone(1400, 2, 500, Outcome.OK); // answered late: still counts from 500
    expect(m.deadline).toBe(500 + 0.8 * LEASE);
    expect(m.mayGrant(500 + 0.8 * LEASE - 1)).toBe(true);
    // No tick has run (a paused process, a late timer): the check still says no.
    expect(m.mayGrant(500 + 0.8 * LEASE)).toBe(false);
    expect(m.role).toBe("active");
    const late = m.tick(500 + 0.8 * LEASE);
    expect(types(late)).toEqual(["stepDown"]);
    expect(m.role).toBe("standby");
    expect(m.stepDowns).toBe(1);
  });

  test("steps down at 0.8 x lease when no renewal is confirmed", () => {
    const m = active(0);
    for (const t of [500, 1000, 1500]) {
      expect(types(m.tick(t))).toEqual(["renew"]);
      expect(m.renewDone(t + 10, 2, t, Outcome.FAILED)).toEqual([]);
    }
    expect(m.renewalsFailed).toBe(3);
    expect(m.nextWake()).toBe(0.8 * LEASE);
    expect(m.mayGrant(0.8 * LEASE - 1)).toBe(true);
    expect(types(m.tick(0.8 * LEASE))).toEqual(["stepDown"]);
  });

  test("an unanswered renewal does not hold back the next, nor stop the deadline", () => {
    const m = active(0);
    m.tick(500); // renewal in flight, never answered
    expect(m.tick(1000)).toEqual([{ type: "renew", epoch: 2, sentAt: 1000, carryLeaseMs: 0 }]); // on schedule all the same
    expect(m.tick(1500)).toEqual([{ type: "renew", epoch: 2, sentAt: 1500, carryLeaseMs: 0 }]);
    expect(m.nextWake()).toBe(0.8 * LEASE);
    expect(types(m.tick(0.8 * LEASE))).toEqual(["stepDown"]);
  });

  test("answers out of order: the lease runs from the latest confirmed send", () => {
    const m = active(0);
    m.tick(500);
    m.tick(1000);
    m.renewDone(1100, 2, 1000, Outcome.OK);
    m.renewDone(1200, 2, 500, Outcome.OK); // the older one answers last
    expect(m.deadline).toBe(1000 + 0.8 * LEASE);
  });

  test("a renewal that finds the row taken steps down at once", () => {
    const m = active(0);
    m.tick(500);
    const actions = m.renewDone(510, 2, 500, Outcome.TAKEN);
    expect(actions).toEqual([{ type: "stepDown", epoch: 2, reason: expect.stringContaining("taken") }]);
    expect(m.mayGrant(511)).toBe(false);
    // back to standby: it reads the row at once
    expect(m.tick(511)).toEqual([{ type: "read" }]);
  });

  test("an answer from an earlier term is ignored", () => {
    const m = active(0);
    m.tick(500);
    m.renewDone(510, 2, 500, Outcome.TAKEN);
    m.tick(511);
    m.readDone(511, row(3, 0, ""));
    m.takeoverDone(520, row(4, 0, "me", 200));
    expect(m.epoch).toBe(4);
    expect(m.renewDone(530, 2, 500, Outcome.TAKEN)).toEqual([]);
    expect(m.role).toBe("active");
  });

  test("a clean stop releases the row; a standby's stop releases nothing", () => {
    const m = active(0);
    expect(m.stop(10, [["a", 900]])).toEqual([{ type: "release", epoch: 2, held: [["a", 900]], maxLeaseMs: 900, carryLeaseMs: 0 }]);
    expect(m.mayGrant(11)).toBe(false);
    const s = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    s.start(0);
    expect(s.stop(1)).toEqual([]);
  });

  test("a term given up (cannot listen) releases the row and leaves it to others for a lease", () => {
    const m = active(0);
    const actions = m.abandon(100, "cannot listen");
    expect(types(actions)).toEqual(["release", "stepDown"]);
    expect(m.role).toBe("standby");
    expect(m.tick(101)).toEqual([]);
    expect(m.nextWake()).toBe(100 + LEASE);
    expect(m.tick(100 + LEASE)).toEqual([{ type: "read" }]);
  });
});

describe("tokens", () => {
  test("the next block is reserved when half is used, and tokens continue across it", () => {
    const m = active(0, 100); // tokens 91..100
    const issued: number[] = [];
    for (let i = 0; i < 4; i++) issued.push(m.nextToken());
    expect(m.wantsReserve()).toBe(false);
    issued.push(m.nextToken()); // 95: half used
    expect(m.wantsReserve()).toBe(true);
    expect(m.tick(1)).toEqual([{ type: "reserve", epoch: 2 }]);
    expect(m.tick(2)).toEqual([]); // one in flight
    m.reserveDone(3, 2, Outcome.OK, 110);
    for (let i = 0; i < 10; i++) {
      expect(m.mayGrant(4)).toBe(true);
      issued.push(m.nextToken());
    }
    expect(issued).toEqual([91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105]);
  });

  test("a block used up before the next is confirmed: no grant (never a token above the floor)", () => {
    const m = active(0, 100);
    m.tick(1); // no reserve yet
    for (let i = 0; i < 10; i++) m.nextToken();
    m.tick(2);
    m.reserveDone(3, 2, Outcome.FAILED);
    expect(m.lastToken).toBe(100);
    expect(m.mayGrant(4)).toBe(false);
    // retried after lease/4
    expect(m.tick(4)).toEqual([]);
    expect(m.tick(3 + LEASE / 4)).toContainEqual({ type: "reserve", epoch: 2 });
    m.reserveDone(3 + LEASE / 4, 2, Outcome.OK, 130); // a lost answer skipped a block: tokens skip, never repeat
    expect(m.mayGrant(LEASE / 4 + 4)).toBe(true);
    expect(m.nextToken()).toBe(121);
  });

  test("a reservation that finds the row taken steps down", () => {
    const m = active(0, 100);
    for (let i = 0; i < 5; i++) m.nextToken();
    m.tick(1);
    expect(types(m.reserveDone(2, 2, Outcome.TAKEN))).toEqual(["stepDown"]);
  });

  test("a new term starts above every token of the old one", () => {
    const m = active(0, 100);
    const old = m.nextToken();
    m.tick(500);
    m.renewDone(501, 2, 500, Outcome.TAKEN);
    m.tick(502);
    m.readDone(502, row(3, 0, ""));
    m.takeoverDone(503, row(4, 0, "me", 140));
    expect(m.nextToken()).toBe(131);
    expect(131).toBeGreaterThan(old);
  });
});

describe("a coordinator that lost data (the row went back)", () => {
  test("the row gone: it is created above the floor this instance saw, not from the start", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(7, 3, "other", 500));
    m.tick(LEASE / 4);
    expect(m.readDone(LEASE / 4, null)).toEqual([{ type: "create", floor: 500 }]);
    expect(m.regressions).toBe(1);
  });

  test("a takeover of a row whose floor went back issues nothing at or below the floor seen; reservations walk up past it", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(7, 3, "other", 500));
    m.tick(LEASE / 4);
    m.readDone(LEASE / 4, row(7, 3, "", 480)); // released, and 20 tokens lower than seen
    expect(m.regressions).toBe(1);
    const actions = m.takeoverDone(LEASE / 4 + 1, row(8, 0, "me", 490)); // its block would be 481..490
    expect(actions[0]).toMatchObject({ type: "activate", firstToken: 501 });
    expect(m.mayGrant(LEASE / 4 + 2)).toBe(false); // no token in hand
    expect(types(actions)).toContain("reserve");
    const again = m.reserveDone(LEASE / 4 + 3, 8, Outcome.OK, 500); // 491..500: still at or below the floor seen
    expect(m.mayGrant(LEASE / 4 + 4)).toBe(false);
    expect(again).toContainEqual({ type: "reserve", epoch: 8 });
    m.reserveDone(LEASE / 4 + 5, 8, Outcome.OK, 510);
    expect(m.mayGrant(LEASE / 4 + 6)).toBe(true);
    expect(m.nextToken()).toBe(501);
  });

  test("an ordinary takeover skips nothing", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, row(7, 3, "other", 500));
    m.tick(LEASE);
    m.takeoverDone(LEASE + 1, row(8, 0, "me", 510));
    expect(m.nextToken()).toBe(501);
    expect(m.regressions).toBe(0);
  });
});

test("the machine has no clock: every time is an argument", async () => {
  const source = await Bun.file(new URL("../../src/failover/machine.ts", import.meta.url)).text();
  const code = source.replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
  expect(code).not.toMatch(/Date\b|performance\.now|setTimeout|setInterval|Bun\.nanoseconds|process\.hrtime/);
});

describe("the lock-delay of a new term", () => {
  /** A standby that watched `watched` unchanged for a lease and took over; the takeover answered `taken`. */
  function takeOver(watched: CoordinatorRow, taken: CoordinatorRow, at = 0): { m: DrivenMachine; activate: Extract<RoleAction, { type: "activate" }> } {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(at);
    m.readDone(at, watched);
    if (watched.holder !== "") expect(types(m.tick(at + LEASE))).toEqual(["takeover"]);
    const actions = m.takeoverDone(at + (watched.holder === "" ? 1 : LEASE + 1), taken);
    const activate = actions.find((a) => a.type === "activate") as Extract<RoleAction, { type: "activate" }>;
    return { m, activate };
  }

  test("after an expired row: every name waits 0.8 x the largest lease less the 0.2 x lease the takeover already waited, plus 2 %", () => {
    const watched = { ...row(3, 7, "other"), maxLeaseMs: 20_000 };
    // The takeover folds the old maximum into the carried lease (failover/store.ts).
    const { activate } = takeOver(watched, { ...row(4, 0, "me"), maxLeaseMs: LEASE / 4, carryLeaseMs: 20_000 });
    expect(activate.delay).toEqual({ everyNameMs: Math.ceil(0.8 * 20_000 - 0.2 * LEASE + 0.02 * 20_000), names: [], unknown: false });
    expect(activate.maxLeaseMs).toBe(LEASE / 4);
  });

  test("client leases up to a quarter of the coordinator lease cost a takeover nothing", () => {
    const { activate } = takeOver({ ...row(3, 7, "other"), maxLeaseMs: LEASE / 4 }, { ...row(4, 0, "me"), carryLeaseMs: LEASE / 4 });
    expect(activate.delay.everyNameMs).toBe(0);
  });

  test("a row that went back (lost commits) does not shorten the delay: the largest lease any read of the epoch showed counts", () => {
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, { ...row(3, 7, "other"), maxLeaseMs: 30_000 });
    m.tick(LEASE / 4);
    m.readDone(LEASE / 4, { ...row(3, 7, "other"), maxLeaseMs: 5_000 }); // the same values, a lower lease: a replica behind
    expect(types(m.tick(LEASE))).toEqual(["takeover"]);
    const activate = m.takeoverDone(LEASE + 1, { ...row(4, 0, "me"), carryLeaseMs: 5_000 }).find((a) => a.type === "activate")!;
    expect((activate as { delay: { everyNameMs: number } }).delay.everyNameMs).toBe(Math.ceil(0.8 * 30_000 - 0.2 * LEASE + 0.02 * 30_000));
  });

  test("after a clean stop: only the published names wait, each 0.82 x its holder's lease; what the stopped term still carried, every name", () => {
    const released = { ...row(5, 9, ""), held: [["a", 10_000], ["b", 1000]] as [string, number][], maxLeaseMs: 10_000, carryLeaseMs: 0 };
    const { activate } = takeOver(released, { ...row(6, 0, "me"), carryLeaseMs: 10_000 });
    expect(activate.why).toBe("released");
    expect(activate.delay).toEqual({ everyNameMs: 0, names: [["a", 8200], ["b", 820]], unknown: false });
    const carried = takeOver({ ...released, carryLeaseMs: 4000 }, { ...row(6, 0, "me"), carryLeaseMs: 10_000 }).activate;
    expect(carried.delay.everyNameMs).toBe(Math.ceil(0.82 * 4000));
    const tooMany = takeOver({ ...released, held: "*" }, { ...row(6, 0, "me"), carryLeaseMs: 10_000 }).activate;
    expect(tooMany.delay.everyNameMs).toBe(8200);
  });

  test("a clean stop inside the wait of a term begun from a clean stop republishes the names it still holds back, one by one; renewals still carry their lease for every name", () => {
    // The active before held "a" (10 s) and "b" (1 s) at its stop; its own term had largely raised its lease (a reclaim cap of 20 s).
    const m = drivenMachine({ leaseMs: LEASE, block: BLOCK });
    m.start(0);
    m.readDone(0, { ...row(5, 8, "other"), maxLeaseMs: 20_000 }); // read while that term was active
    const released = { ...row(5, 9, ""), held: [["a", 10_000], ["b", 1000]] as [string, number][], maxLeaseMs: 10_000, carryLeaseMs: 0 };
    m.tick(LEASE / 4);
    m.readDone(LEASE / 4, released);
    const activate = m.takeoverDone(LEASE / 4 + 1, { ...row(6, 0, "me"), carryLeaseMs: 20_000 }).find((x) => x.type === "activate") as Extract<RoleAction, { type: "activate" }>;
    expect(activate.delay).toEqual({ everyNameMs: 0, names: [["a", 8200], ["b", 820]], unknown: false });
    const at = LEASE / 4 + 1;
    // Its renewals carry the largest lease for every name (a crash of this term publishes nothing).
    const renew = m.tick(at + LEASE / 4).find((x) => x.type === "renew") as { carryLeaseMs: number };
    expect(renew.carryLeaseMs).toBe(20_000);
    // Its clean stop 1 s in: its own holder "c", and "a" again ("b"'s wait is over); nothing for every name.
    expect(m.stop(at + 1000, [["c", 3000]])).toEqual([{ type: "release", epoch: 6, held: [["c", 3000], ["a", 10_000]], maxLeaseMs: 10_000, carryLeaseMs: 0 }]);
  });

  test("a row that records no largest lease (an older lockd's) is flagged unknown", () => {
    const { activate } = takeOver({ ...row(3, 7, "other"), maxLeaseMs: null }, { ...row(4, 0, "me"), carryLeaseMs: 0 });
    expect(activate.delay).toMatchObject({ everyNameMs: 0, unknown: true });
  });

  test("renewals carry the earlier epochs' lease until the term's wait is over, then 0; the release publishes the held names and the carry", () => {
    const { m } = takeOver({ ...row(3, 7, "other"), maxLeaseMs: 20_000 }, { ...row(4, 0, "me"), carryLeaseMs: 20_000 });
    const start = LEASE + 1;
    const wait = Math.ceil(0.8 * 20_000 - 0.2 * LEASE + 0.02 * 20_000);
    const renew = m.tick(start + LEASE / 4).find((a) => a.type === "renew") as { carryLeaseMs: number; sentAt: number };
    expect(renew.carryLeaseMs).toBe(20_000);
    expect(m.stop(start + LEASE / 4 + 1, [["x", 900]])).toEqual([{ type: "release", epoch: 4, held: [["x", 900]], maxLeaseMs: 900, carryLeaseMs: 20_000 }]);
    // Another term, renewing past its wait: nothing carried.
    const other = takeOver({ ...row(3, 7, "other"), maxLeaseMs: 20_000 }, { ...row(4, 0, "me"), carryLeaseMs: 20_000 }).m;
    let t = start;
    let last: { carryLeaseMs: number } | undefined;
    while (t < start + wait + LEASE) {
      t += LEASE / 4;
      const r = other.tick(t).find((a) => a.type === "renew") as { carryLeaseMs: number; sentAt: number } | undefined;
      if (r !== undefined) {
        other.renewDone(t, 4, r.sentAt, Outcome.OK);
        last = r;
        if (t < start + wait) expect(r.carryLeaseMs).toBe(20_000);
      }
    }
    expect(last!.carryLeaseMs).toBe(0);
  });

  test("raise: a statement of this term; TAKEN steps down, OK records the durable value, an answer of another term is ignored", () => {
    const m = active(0);
    expect(m.raise(30_000)).toEqual([{ type: "raise", epoch: 2, leaseMs: 30_000 }]);
    expect(m.raiseDone(5, 1, Outcome.OK, 30_000)).toEqual([]);
    expect(m.durableMaxLeaseMs).toBe(LEASE / 4);
    m.raiseDone(5, 2, Outcome.OK, 30_720);
    expect(m.durableMaxLeaseMs).toBe(30_720);
    expect(types(m.raiseDone(6, 2, Outcome.TAKEN))).toEqual(["stepDown"]);
    expect(m.raise(40_000)).toEqual([]); // a standby raises nothing
  });
});
