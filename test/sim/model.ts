/**
 * The simulation's model: what protocol.md says the server must do, kept
 * apart from the engine. The model never asks the engine what happened; it
 * replays the transport's log (frames sent, connections closed, in order)
 * and judges each event against its own state:
 *
 * - a reply must be the one the step asked for (ACQUIRED with REPLY and a
 *   fresh token for a free lock, WAITING for a held one, the grant's own
 *   token for an owner's heartbeat);
 * - a push (ACQUIRED, REPLY clear) must carry a token above every token
 *   before it, go to the head of its lock's queue and fit beside the
 *   holders left (protocol.md section 13: a semaphore's free permit, with
 *   the lowest free slot; a shared claim beside shared holders; anything
 *   when nobody holds). The engine forgets a session before it writes the
 *   session's ERROR, so the departure that made room is logged after the
 *   push: the model looks ahead in the step's log for the close of a
 *   holder (or of a waiter ahead) of that lock and replays it first; a
 *   session whose peer closed is gone before anything of its step;
 * - at the end of every step no queue's head fits (the push came in the
 *   same step the capacity freed), at most `limit` hold a name, an
 *   exclusive holder holds alone, and slots are distinct;
 * - a close must carry an ERROR whose reason the step allows: the code the
 *   step expects, LEASE_EXPIRED only during a tick and only once
 *   `now - lastSeen >= lease`, IO_TIMEOUT only when a read or write deadline
 *   has passed or the shell cut the connection.
 *
 * After each step checks.ts compares the model with the engine.
 */
import { ErrorCode, FLAG_REPLY, FLAG_SLOT, FrameType, errorCodeName } from "../../src/protocol/index.ts";
import type { SimConn, SimEvent } from "./transport.ts";

export class SimFailure extends Error {
  override readonly name = "SimFailure";
}

export const ClientState = { CONNECTED: 0, WAITING: 1, OWNER: 2, ENDED: 3 } as const;
export type ClientState = (typeof ClientState)[keyof typeof ClientState];
export const STATE_NAMES = ["connected", "waiting", "owner", "ended"] as const;

/** A reply the current step expects from the engine. */
export type ExpectedReply = "grant" | "wait" | "ack-owner" | "ack-waiting";

export class Client {
  state: ClientState = ClientState.CONNECTED;
  name = "";
  lease = 0;
  lastSeen: number;
  /** A complete frame arrived (after which the first-frame deadline no longer applies). */
  firstFrame = false;
  /** When the frame now incomplete started (after the first frame), else null. */
  partialSince: number | null = null;
  /** When output stopped draining, else null. */
  blockedSince: number | null = null;
  token = 0;
  /** The claim's limit (1: exclusive or shared), whether it is shared, and its slot once a semaphore's holder (else -1). */
  limit = 1;
  shared = false;
  slot = -1;
  /** 0 closed by the peer, else the ERROR code; null while live. */
  endReason: number | null = null;
  /** The ERROR code this step must end the client with. */
  expectEnd: number | null = null;
  /** The shell cut it this step (timeOut): IO_TIMEOUT expected. */
  cut = false;
  /** Closed by its peer this step: ends without a frame. */
  peerClosing = false;
  /** Heartbeats on schedule (lease / 4) in heartbeat rounds. */
  readonly diligent: boolean;
  readonly conn: SimConn;

  constructor(
    readonly index: number,
    readonly openedAt: number,
    diligent: boolean,
  ) {
    this.lastSeen = openedAt;
    this.diligent = diligent;
    this.conn = { client: index, session: null };
  }

  get live(): boolean {
    return this.state !== ClientState.ENDED && this.conn.session !== null;
  }

  get accepted(): boolean {
    return this.state === ClientState.WAITING || this.state === ClientState.OWNER;
  }

  describe(): string {
    const kind = this.limit > 1 ? ` limit ${this.limit}${this.slot >= 0 ? ` slot ${this.slot}` : ""}` : this.shared ? " shared" : "";
    return `client ${this.index} (session ${this.conn.session?.id ?? "-"}, ${STATE_NAMES[this.state]}, "${short(this.name)}"${kind})`;
  }
}

export interface ModelLock {
  /** Holders, oldest first. */
  readonly holders: Client[];
  /** Waiters in the order their ACQUIREs were accepted. */
  readonly queue: Client[];
  readonly limit: number;
}

/** Whether `c` may hold `lock` beside its holders now (queue order aside): protocol.md section 13.2. */
export function fits(lock: ModelLock, c: Client): boolean {
  if (lock.holders.length === 0) return true;
  if (lock.limit > 1) return lock.holders.length < lock.limit;
  return c.shared && lock.holders[0]!.shared;
}

/** The lowest slot no holder of `lock` has. */
function lowestFree(lock: ModelLock): number {
  const used = new Set(lock.holders.map((h) => h.slot));
  let slot = 0;
  while (used.has(slot)) slot++;
  return slot;
}



export interface ModelCounters {
  grants: number;
  promotions: number;
  /** Sessions accepted at open, refused with OVERLOADED, WAITING replies to ACQUIRE, heartbeat replies. */
  opened: number;
  /** Connections refused at open (OVERLOADED, SHUTTING_DOWN), by code: they count as ends too. */
  refused: Map<number, number>;
  queued: number;
  heartbeats: number;
  /** Sessions that ended while owning their lock. */
  ownerEnds: number;
  ends: Map<number, number>;
  maxQueue: number;
  /** Largest (end time - lease deadline) seen for LEASE_EXPIRED, in ms. */
  maxLateness: number;
  /** Grants of a semaphore's permit, grants of a shared claim, and the most holders one name had at once. */
  semaphoreGrants: number;
  sharedGrants: number;
  maxHolders: number;
  /** Claims refused with LIMIT_MISMATCH. */
  mismatches: number;
}

export class Model {
  readonly clients: Client[] = [];
  readonly locks = new Map<string, ModelLock>();
  maxToken: number;
  draining = false;
  inTick = false;
  now = 0;
  /** The wheel's next unprocessed tick, as the model infers it from the ticks it made. */
  wheelCurrent: number;
  reply: { client: Client; kind: ExpectedReply } | null = null;
  readonly counters: ModelCounters = {
    grants: 0,
    promotions: 0,
    opened: 0,
    refused: new Map(),
    queued: 0,
    heartbeats: 0,
    ownerEnds: 0,
    ends: new Map(),
    maxQueue: 0,
    maxLateness: 0,
    semaphoreGrants: 0,
    sharedGrants: 0,
    maxHolders: 0,
    mismatches: 0,
  };


  constructor(
    readonly ioTimeoutMs: number,
    readonly maxSessions: number,
    tokenFloor: number,
    start: number,
  ) {
    this.maxToken = tokenFloor;
    this.wheelCurrent = Math.floor(start);
    this.now = start;
  }

  liveClients(): Client[] {
    return this.clients.filter((c) => c.live);
  }

  lockOf(name: string): ModelLock | undefined {
    return this.locks.get(name);
  }

  readDeadline(c: Client): number {
    if (!c.firstFrame) return c.openedAt + this.ioTimeoutMs;
    return c.partialSince === null ? Infinity : c.partialSince + this.ioTimeoutMs;
  }

  writeDeadline(c: Client): number {
    return c.blockedSince === null ? Infinity : c.blockedSince + this.ioTimeoutMs;
  }

  leaseDeadline(c: Client): number {
    return c.accepted ? c.lastSeen + c.lease : Infinity;
  }

  deadline(c: Client): number {
    return Math.min(this.leaseDeadline(c), this.readDeadline(c), this.writeDeadline(c));
  }

  // --- replaying the log -----------------------------------------------------------

  consume(events: readonly SimEvent[]): void {
    // The engine forgets a session whose peer closed before it does anything else in that call.
    for (const c of this.clients) if (c.peerClosing && c.live) this.end(c, 0);
    const done = new Set<number>();
    for (let i = 0; i < events.length; i++) {
      if (done.has(i)) continue;
      const event = events[i]!;
      const c = this.clients[event.conn.client]!;
      switch (event.kind) {
        case "send":
          this.onSend(c, event.frame, events, i, done);
          break;
        case "close":
          this.onClose(c, event.frame);
          break;
        case "blocked":
          if (c.live && c.blockedSince === null) c.blockedSince = this.now;
          break;
        case "cut":
          if (c.live) c.cut = true;
          break;
        default:
          event satisfies never;
      }
    }
  }

  private onSend(c: Client, frame: Uint8Array, events: readonly SimEvent[], at: number, done: Set<number>): void {
    if (!c.live) fail(`a frame was sent to ${c.describe()}, which has ended`);
    const { type, flags } = header(frame);
    if (type === FrameType.ACQUIRED && (flags & FLAG_REPLY) === 0) {
      this.onPush(c, frame, events, at, done);
      return;
    }
    const expected = this.reply;
    if (expected === null || expected.client !== c) fail(`unexpected frame ${hex(frame)} to ${c.describe()}`);
    this.reply = null;
    if ((flags & FLAG_REPLY) === 0) fail(`a reply to ${c.describe()} has REPLY clear: ${hex(frame)}`);
    switch (expected.kind) {
      case "grant": {
        if (type !== FrameType.ACQUIRED) fail(`${c.describe()} asked for a lock it fits and got ${hex(frame)}`);
        let lock = this.locks.get(c.name);
        if (lock !== undefined && (lock.queue.length > 0 || !fits(lock, c))) {
          fail(`${c.describe()} was granted "${short(c.name)}", where the model says it does not fit or others are queued`);
        }
        if (lock === undefined) {
          lock = { holders: [], queue: [], limit: c.limit };
          this.locks.set(c.name, lock);
        }
        this.hold(lock, c, tokenOf(frame), slotOf(frame, c));
        break;
      }
      case "wait": {
        if (type !== FrameType.WAITING || frame.length !== 4) fail(`${c.describe()} asked for a lock it must queue for and got ${hex(frame)}`);
        const lock = this.locks.get(c.name);
        if (lock === undefined) fail(`${c.describe()} was queued on "${short(c.name)}", which the model says is free`);
        c.state = ClientState.WAITING;
        lock.queue.push(c);
        this.counters.queued++;
        this.counters.maxQueue = Math.max(this.counters.maxQueue, lock.queue.length);
        break;
      }
      case "ack-owner":
        if (type !== FrameType.ACQUIRED || tokenOf(frame) !== c.token || slotOf(frame, c) !== c.slot) {
          fail(`heartbeat of owner ${c.describe()} (token ${c.token}, slot ${c.slot}) answered with ${hex(frame)}`);
        }
        this.counters.heartbeats++;
        break;
      case "ack-waiting":
        if (type !== FrameType.WAITING || frame.length !== 4) fail(`heartbeat of waiter ${c.describe()} answered with ${hex(frame)}`);
        this.counters.heartbeats++;
        break;
      default:
        expected.kind satisfies never;
    }
  }

  private onPush(c: Client, frame: Uint8Array, events: readonly SimEvent[], at: number, done: Set<number>): void {
    if (this.draining) fail(`ACQUIRED pushed to ${c.describe()} during shutdown`);
    if (c.state !== ClientState.WAITING) fail(`ACQUIRED pushed to ${c.describe()}, which is not waiting`);
    const lock = this.locks.get(c.name)!;
    // Replay first the departures, later in this step's log, that the engine made before this push.
    for (let j = at + 1; lock.queue[0] !== c || !fits(lock, c); j++) {
      if (j >= events.length) {
        const head = lock.queue[0];
        if (head !== c) fail(`FIFO: ACQUIRED pushed to ${c.describe()} but the head of "${short(c.name)}" is ${head?.describe()}`);
        fail(`ACQUIRED pushed to ${c.describe()}, which does not fit beside the holders of "${short(c.name)}" [${lock.holders.map((h) => h.describe())}]`);
      }
      const later = events[j]!;
      if (later.kind !== "close" || done.has(j)) continue;
      const x = this.clients[later.conn.client]!;
      const ahead = lock.queue.indexOf(x);
      if (x.name !== c.name || !x.live || !(lock.holders.includes(x) || (ahead >= 0 && ahead < lock.queue.indexOf(c)))) continue;
      done.add(j);
      this.onClose(x, later.frame);
    }
    lock.queue.shift();
    this.counters.promotions++;
    this.hold(lock, c, tokenOf(frame), slotOf(frame, c));
  }

  private hold(lock: ModelLock, c: Client, token: number, slot: number): void {
    if (!(token > this.maxToken)) fail(`token ${token} granted to ${c.describe()} is not above the last token ${this.maxToken}`);
    this.maxToken = token;
    if (lock.limit > 1) {
      const want = lowestFree(lock);
      if (slot !== want) fail(`${c.describe()} was granted slot ${slot} of "${short(c.name)}"; the lowest free slot is ${want}`);
      this.counters.semaphoreGrants++;
    }
    if (c.shared) this.counters.sharedGrants++;
    c.state = ClientState.OWNER;
    c.token = token;
    c.slot = slot;
    lock.holders.push(c);
    this.counters.grants++;
    this.counters.maxHolders = Math.max(this.counters.maxHolders, lock.holders.length);
  }

  private onClose(c: Client, frame: Uint8Array | null): void {
    if (c.conn.session === null) {
      // Refused at open: no session was made.
      const code = frame === null ? -1 : errorOf(frame);
      if (c.expectEnd === null || code !== c.expectEnd) fail(`${c.describe()} was refused at open with ${frame && hex(frame)}`);
      c.state = ClientState.ENDED;
      c.endReason = code;
      c.expectEnd = null;
      this.counters.refused.set(code, (this.counters.refused.get(code) ?? 0) + 1);
      return;
    }
    if (!c.live) fail(`${c.describe()} was closed twice`);
    if (frame === null) fail(`${c.describe()} was closed by the engine without an ERROR`);
    const code = errorOf(frame);
    if (!this.allowedEnd(c, code)) {
      fail(
        `${c.describe()} ended with ${errorCodeName(code)} at ${this.now}, not allowed here ` +
          `(expected ${c.expectEnd === null ? "none" : errorCodeName(c.expectEnd)}, cut ${c.cut}, in tick ${this.inTick}, ` +
          `lastSeen ${c.lastSeen}, lease ${c.lease}, read deadline ${this.readDeadline(c)}, write deadline ${this.writeDeadline(c)})`,
      );
    }
    if (code === ErrorCode.LEASE_EXPIRED && c.expectEnd !== code) {
      this.counters.maxLateness = Math.max(this.counters.maxLateness, this.now - (c.lastSeen + c.lease));
    }
    this.end(c, code);
  }

  private allowedEnd(c: Client, code: number): boolean {
    if (c.peerClosing) return false;
    if (c.expectEnd === code) return true;
    if (code === ErrorCode.IO_TIMEOUT && c.cut) return true;
    if (!this.inTick) return false;
    if (code === ErrorCode.LEASE_EXPIRED) return c.accepted && this.now - c.lastSeen >= c.lease;
    if (code === ErrorCode.IO_TIMEOUT) return Math.min(this.readDeadline(c), this.writeDeadline(c)) <= this.now;
    return false;
  }

  /** The client's session is over (reason 0: its peer closed). */
  end(c: Client, reason: number): void {
    const lock = c.name === "" ? undefined : this.locks.get(c.name);
    if (c.state === ClientState.OWNER) {
      this.counters.ownerEnds++;
      const at = lock === undefined ? -1 : lock.holders.indexOf(c);
      if (at < 0) fail(`model: owner ${c.describe()} is not among its lock's holders`);
      lock!.holders.splice(at, 1);
    } else if (c.state === ClientState.WAITING) {
      const at = lock!.queue.indexOf(c);
      if (at < 0) fail(`model: waiter ${c.describe()} is not in its queue`);
      lock!.queue.splice(at, 1);
    }
    if (lock !== undefined && lock.holders.length === 0 && lock.queue.length === 0) this.locks.delete(c.name);
    c.state = ClientState.ENDED;
    c.endReason = reason;
    c.expectEnd = null;
    c.cut = false;
    c.peerClosing = false;
    this.counters.ends.set(reason, (this.counters.ends.get(reason) ?? 0) + 1);
    const session = c.conn.session!;
    if (session.endReason !== reason) fail(`${c.describe()} ended with ${reason} but the engine recorded ${session.endReason}`);
  }

  /** The step is over: everything it expected must have happened. */
  finish(): void {
    if (this.reply !== null) fail(`${this.reply.client.describe()} got no ${this.reply.kind} reply`);
    for (const c of this.clients) {
      if (c.peerClosing) this.end(c, 0);
      if (c.expectEnd !== null) fail(`${c.describe()} should have ended with ${errorCodeName(c.expectEnd)}`);
      if (c.cut) fail(`${c.describe()} was cut by the shell but did not end with IO_TIMEOUT`);
    }
    if (!this.draining) {
      for (const [name, lock] of this.locks) {
        const head = lock.queue[0];
        if (head !== undefined && fits(lock, head)) {
          fail(`"${short(name)}": the head ${head.describe()} fits beside [${lock.holders.map((h) => h.describe())}] but was not granted in this step`);
        }
      }
    }
    for (const [name, lock] of this.locks) {
      if (lock.holders.length > lock.limit && lock.limit > 1) fail(`"${short(name)}" has ${lock.holders.length} holders, above its limit ${lock.limit}`);
      if (lock.holders.length > 1 && lock.limit === 1 && lock.holders.some((h) => !h.shared)) {
        fail(`"${short(name)}": an exclusive holder beside others [${lock.holders.map((h) => h.describe())}]`);
      }
      if (new Set(lock.holders.map((h) => h.slot)).size !== lock.holders.length && lock.limit > 1) fail(`"${short(name)}": two holders in one slot`);
      for (const c of [...lock.holders, ...lock.queue]) {
        if (c.limit !== lock.limit) fail(`"${short(name)}" (limit ${lock.limit}) has ${c.describe()} with limit ${c.limit}`);
      }
    }
    this.inTick = false;
  }
}

export function fail(message: string): never {
  throw new SimFailure(message);
}

function header(frame: Uint8Array): { type: number; flags: number } {
  if (frame.length < 4 || ((frame[2]! << 8) | frame[3]!) !== frame.length - 4) fail(`malformed frame ${hex(frame)}`);
  return { type: frame[0]!, flags: frame[1]! };
}

/** The slot of an ACQUIRED to `c`, -1 without one; the flag and the length must match the claim's limit. */
function slotOf(frame: Uint8Array, c: Client): number {
  const slotted = (frame[1]! & FLAG_SLOT) !== 0;
  if (slotted !== c.limit > 1 || frame.length !== (slotted ? 14 : 12)) fail(`ACQUIRED ${hex(frame)} to ${c.describe()} (limit ${c.limit}): SLOT flag or length wrong`);
  if (!slotted) return -1;
  const slot = (frame[12]! << 8) | frame[13]!;
  if (slot >= c.limit) fail(`slot ${slot} to ${c.describe()} is not below its limit ${c.limit}`);
  return slot;
}

function tokenOf(frame: Uint8Array): number {
  if (frame[0] !== FrameType.ACQUIRED || (frame.length !== 12 && frame.length !== 14)) fail(`not an ACQUIRED frame: ${hex(frame)}`);
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  const token = view.getUint32(4) * 0x1_0000_0000 + view.getUint32(8);
  if (token === 0) fail("token 0 on the wire");
  return token;
}

function errorOf(frame: Uint8Array): number {
  const { type } = header(frame);
  if (type !== FrameType.ERROR || frame.length < 5) fail(`a close carried ${hex(frame)}, not an ERROR`);
  if (frame[1] !== 0) fail(`ERROR with flags ${frame[1]}`);
  return frame[4]!;
}

export function hex(frame: Uint8Array): string {
  const shown = Array.from(frame.subarray(0, 16), (b) => b.toString(16).padStart(2, "0")).join(" ");
  return frame.length > 16 ? `${shown} ...(${frame.length} bytes)` : shown;
}

/** Names up to 512 bytes make unreadable messages: show the start. */
export function short(name: string): string {
  return name.length > 24 ? `${name.slice(0, 20)}...(${name.length})` : name;
}
