/**
 * The invariants that compare the model (model.ts) with the engine after
 * every step: the same live sessions in the same states, every live session
 * in the timer wheel and nothing else there, the same locks with the same
 * owners and queues and no empty lock, the same last token, counters equal
 * to the model's, a wheel whose next tick is never after a deadline, and,
 * after a tick, no session alive more than one tick past its deadline.
 */
import { ClaimKind, type Engine, SessionState } from "../../src/core/index.ts";
import { ErrorCode } from "../../src/protocol/index.ts";
import { fail, type Model, short, STATE_NAMES } from "./model.ts";
import type { SimConn } from "./transport.ts";

export function check(model: Model, engine: Engine<SimConn>): void {
  const live = model.liveClients();
  if (engine.sessions.size !== live.length) fail(`engine has ${engine.sessions.size} sessions, model ${live.length}`);
  const counts = [0, 0, 0];
  let minDeadline = Infinity;
  for (const c of live) {
    const session = c.conn.session!;
    if (engine.sessions.get(session.id) !== session) fail(`${c.describe()} is missing from engine.sessions`);
    if (session.state !== c.state) fail(`${c.describe()} is ${STATE_NAMES[session.state]} in the engine`);
    if (session.wheelSlot < 0) fail(`${c.describe()} is live but not in the timer wheel`);
    if (c.accepted && session.lock?.name !== c.name) fail(`${c.describe()} sits on lock "${short(session.lock?.name ?? "")}" in the engine`);
    counts[c.state]!++;
    minDeadline = Math.min(minDeadline, model.deadline(c));
  }
  if (engine.wheel.size !== engine.sessions.size) fail(`wheel holds ${engine.wheel.size} entries for ${engine.sessions.size} sessions`);
  for (let s = 0; s < 3; s++) {
    if (engine.stats.states[s] !== counts[s]) fail(`stats.states[${STATE_NAMES[s]}] = ${engine.stats.states[s]}, model ${counts[s]}`);
  }
  if (engine.locks.size !== model.locks.size) {
    fail(`engine has locks [${[...engine.locks.keys()].map(short)}], model [${[...model.locks.keys()].map(short)}]`);
  }
  for (const [name, lock] of engine.locks) {
    if (lock.holders === 0 && lock.head === null) fail(`engine keeps the empty lock "${short(name)}"`);
    const mine = model.locks.get(name);
    if (mine === undefined) fail(`engine has lock "${short(name)}" that the model does not`);
    if (lock.limit !== mine.limit) fail(`"${short(name)}": engine limit ${lock.limit}, model ${mine.limit}`);
    const holders = lock.holderList();
    if (holders.length !== lock.holders || holders.length !== mine.holders.length || holders.some((s, i) => s !== mine.holders[i]!.conn.session)) {
      fail(`"${short(name)}": engine holders [${holders.map((s) => s.id)}], model [${mine.holders.map((c) => c.describe())}]`);
    }
    for (const [i, h] of holders.entries()) {
      if (h.state !== SessionState.OWNER) fail(`"${short(name)}": holder session ${h.id} is not OWNER`);
      if (mine.limit > 1 && h.slot !== mine.holders[i]!.slot) fail(`"${short(name)}": session ${h.id} has slot ${h.slot}, the model ${mine.holders[i]!.slot}`);
    }
    const waiters = lock.waiters();
    if (waiters.length !== mine.queue.length || lock.waiting !== mine.queue.length || waiters.some((s, i) => s !== mine.queue[i]!.conn.session)) {
      fail(`"${short(name)}": engine queue [${waiters.map((s) => s.id)}], model [${mine.queue.map((c) => c.conn.session!.id)}]`);
    }
  }
  checkStats(model, engine);
  const holdersByKind = [0, 0, 0];
  const waitersByKind = [0, 0, 0];
  for (const c of live) {
    if (!c.accepted) continue;
    const kind = c.shared ? ClaimKind.SHARED : c.limit > 1 ? ClaimKind.SEMAPHORE : ClaimKind.EXCLUSIVE;
    (c.state === 2 ? holdersByKind : waitersByKind)[kind]!++;
  }
  for (let k = 0; k < 3; k++) {
    same(`holdersByKind[${k}]`, engine.stats.holdersByKind[k]!, holdersByKind[k]!);
    same(`waitersByKind[${k}]`, engine.stats.waitersByKind[k]!, waitersByKind[k]!);
  }
  if (engine.tokens.last !== model.maxToken) fail(`engine issued token ${engine.tokens.last}, the last the model saw is ${model.maxToken}`);
  const next = engine.wheel.nextTick();
  if (live.length === 0) {
    if (next !== -1) fail(`the wheel is empty but nextTick() is ${next}`);
  } else if (next < 0 || next > Math.max(model.wheelCurrent, Math.ceil(minDeadline))) {
    // A driver armed at nextTick() would fire after a deadline.
    fail(`nextTick() is ${next} but a deadline falls at ${minDeadline} (wheel at ${model.wheelCurrent})`);
  }
}

/** The engine's counters (what /metrics shows) against the model's. */
function checkStats(model: Model, engine: Engine<SimConn>): void {
  const st = engine.stats;
  const c = model.counters;
  same("opened", st.opened, c.opened);
  same("grantsImmediate", st.grantsImmediate, c.grants - c.promotions);
  same("grantsPromoted", st.grantsPromoted, c.promotions);
  same("waitSeconds.count", st.waitSeconds.count, c.promotions);
  same("holdSeconds.count", st.holdSeconds.count, c.ownerEnds);
  same("queued", st.queued, c.queued);
  same("busy", st.busy, c.ends.get(ErrorCode.LOCK_BUSY) ?? 0);
  same("mismatched", st.mismatched, c.mismatches);
  same("heartbeats", st.heartbeats, c.heartbeats);
  for (const reason of END_REASONS) {
    same(`ends[0x${reason.toString(16)}]`, st.ends[reason]!, (c.ends.get(reason) ?? 0) + (c.refused.get(reason) ?? 0));
  }
}

/** After a tick at `now`: nothing may be alive more than one tick past its deadline. */
export function checkOverdue(model: Model): void {
  for (const c of model.liveClients()) {
    const d = model.deadline(c);
    if (model.now - d > 1) {
      fail(`${c.describe()} is alive at ${model.now}, ${model.now - d} ms past its deadline ${d} (lastSeen ${c.lastSeen}, lease ${c.lease})`);
    }
  }
}

/** 0 (closed by the peer) and every code protocol.md defines. */
const END_REASONS = [0, ...Object.values(ErrorCode)];

function same(what: string, engineValue: number, modelValue: number): void {
  if (engineValue !== modelValue) fail(`stats.${what} is ${engineValue}, the model counts ${modelValue}`);
}
