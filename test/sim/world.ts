/**
 * World: one engine, its fake transport, a virtual clock and the model,
 * with one method per thing that can happen to a server. Each method makes
 * the model's prediction, calls the engine exactly as the shell would,
 * replays the transport log into the model, and checks the invariants.
 * The schedule generator (simulate.ts) only decides what happens when.
 */
import { Engine, SHARED_CLAIM, type Session, type TokenSource, type WheelDriver } from "../../src/core/index.ts";
import { encodeAcquire, ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { check, checkOverdue } from "./checks.ts";
import { Client, ClientState, fail, fits, Model, type ExpectedReply } from "./model.ts";
import type { Rng } from "./prng.ts";
import { type SimConn, SimTransport } from "./transport.ts";

/** Fencing tokens that skip ahead now and then, as durable token blocks do across restarts. */
export class JumpingTokens implements TokenSource {
  last: number;

  constructor(
    floor: number,
    private readonly rng: Rng,
    /** A broken source for the self-test: sometimes hands out the last token again. */
    private readonly repeat = false,
  ) {
    this.last = floor;
  }

  next(): number {
    if (this.repeat && this.last > 0 && this.rng.chance(0.05)) return this.last;
    this.last += this.rng.chance(0.1) ? 1 + this.rng.int(1000) : 1;
    return this.last;
  }
}

export interface WorldConfig {
  readonly start: number;
  readonly ioTimeoutMs: number;
  readonly maxSessions: number;
  readonly tokenFloor: number;
  /** Fire the wheel's driver at every armed tick while the clock moves (as the real timer does). */
  readonly driven: boolean;
  /** How late the fake timer fires (0 in a correct run; the self-test makes it late). */
  readonly driverLateMs: number;
  readonly blockChance: number;
  readonly cutChance: number;
  readonly repeatTokens: boolean;
  /** Self-test: the engine's queues become LIFO. */
  readonly lifo: boolean;
  /** Self-test: a shared claim arriving while shared claims hold jumps to the head of the queue (ahead of a writer). */
  readonly overtake?: boolean;
  /** Self-test: shared claims never hold together. */
  readonly noShare?: boolean;
}

export class World implements WheelDriver {
  readonly engine: Engine<SimConn>;
  readonly model: Model;
  readonly transport: SimTransport;
  /** The tick the fake timer is armed for. */
  armed = Infinity;

  constructor(
    readonly config: WorldConfig,
    private readonly rng: Rng,
  ) {
    this.transport = new SimTransport(rng.fork());
    this.transport.now = config.start;
    this.transport.blockChance = config.blockChance;
    this.transport.cutChance = config.cutChance;
    const tokens = new JumpingTokens(config.tokenFloor, rng.fork(), config.repeatTokens);
    this.engine = new Engine<SimConn>(this.transport, { ioTimeoutMs: config.ioTimeoutMs, maxSessions: config.maxSessions, tokens }, config.start);
    this.transport.engine = this.engine;
    this.engine.setDriver(this);
    this.model = new Model(config.ioTimeoutMs, config.maxSessions, config.tokenFloor, config.start);
    if (config.lifo) makeQueuesLifo(this.engine);
    if (config.overtake === true) makeReadersOvertake(this.engine);
    if (config.noShare === true) makeSharingFail(this.engine);
  }

  get now(): number {
    return this.model.now;
  }

  arm(tick: number): void {
    this.armed = tick;
  }

  /** Replay what the engine did into the model, close the step, check everything. */
  private settle(): void {
    const model = this.model;
    model.consume(this.transport.take());
    model.finish();
    check(model, this.engine);
    if (this.config.driven) checkOverdue(model);
  }

  // --- the clock -------------------------------------------------------------------

  /** Move the clock by `dt`; a driven world fires its timer at every armed tick on the way. */
  advance(dt: number): void {
    const target = this.now + dt;
    if (this.config.driven) {
      while (this.armed + this.config.driverLateMs <= target) {
        const at = Math.max(this.now, this.armed + this.config.driverLateMs);
        this.armed = Infinity; // the server's timer is spent once it fires
        this.setNow(at);
        this.tick();
      }
    }
    this.setNow(target);
    if (this.config.driven) checkOverdue(this.model);
  }

  /** engine.tick(now): a timer firing, or any other moment the shell runs the wheel. */
  tick(): void {
    const model = this.model;
    model.inTick = true;
    this.engine.tick(this.now);
    model.wheelCurrent = Math.max(model.wheelCurrent, Math.floor(this.now) + 1);
    this.settle();
    checkOverdue(model);
  }

  private setNow(now: number): void {
    this.model.now = now;
    this.transport.now = now;
  }

  // --- connections -----------------------------------------------------------------

  open(diligent: boolean): Client {
    const model = this.model;
    const c = new Client(model.clients.length, this.now, diligent);
    model.clients.push(c);
    if (model.draining) c.expectEnd = ErrorCode.SHUTTING_DOWN;
    else if (model.liveClients().length >= model.maxSessions) c.expectEnd = ErrorCode.OVERLOADED;
    const session = this.engine.open(c.conn, this.now);
    if (session !== null) {
      if (session.state !== 0) fail(`a new session is in state ${session.state}`);
      c.conn.session = session;
      model.counters.opened++;
    }
    this.settle();
    return c;
  }

  /** A chunk holding one complete ACQUIRE frame (its body at a random place in the chunk). */
  acquire(c: Client, name: string, lease: number, tryOnly: boolean, owner: string, limit = 1, shared = false): void {
    const frame = encodeAcquire({ name, leaseMs: lease, owner, try: tryOnly, limit, shared });
    if (!c.live) {
      // A stale frame for an ended session: nothing may happen.
    } else if (c.state === ClientState.CONNECTED) {
      c.name = name;
      c.lease = lease;
      c.limit = limit;
      c.shared = shared;
      const lock = this.model.lockOf(name);
      if (lock !== undefined && lock.limit !== limit) {
        c.expectEnd = ErrorCode.LIMIT_MISMATCH;
        this.model.counters.mismatches++;
      } else if (lock === undefined || (lock.queue.length === 0 && fits(lock, c))) this.expectReply(c, "grant");
      else if (tryOnly) c.expectEnd = ErrorCode.LOCK_BUSY;
      else this.expectReply(c, "wait");
    } else {
      c.expectEnd = ErrorCode.PROTOCOL_ERROR; // a second ACQUIRE
    }
    this.deliver(c, frame);
  }

  /** A chunk holding one malformed ACQUIRE that must end the session with `code`. */
  badAcquire(c: Client, frame: Uint8Array, code: number): void {
    if (c.live) c.expectEnd = c.state === ClientState.CONNECTED ? code : ErrorCode.PROTOCOL_ERROR;
    this.deliver(c, frame);
  }

  heartbeat(c: Client): void {
    if (!c.live) {
      // stale: nothing may happen
    } else if (c.state === ClientState.OWNER) this.expectReply(c, "ack-owner");
    else if (c.state === ClientState.WAITING) this.expectReply(c, "ack-waiting");
    else c.expectEnd = ErrorCode.PROTOCOL_ERROR; // HEARTBEAT before ACQUIRE
    this.deliver(c, new Uint8Array([FrameType.HEARTBEAT, 0, 0, 0]));
  }

  /** A frame type the reader would refuse, handed to the engine anyway: PROTOCOL_ERROR. */
  unknownFrame(c: Client, type: number): void {
    if (c.live) c.expectEnd = ErrorCode.PROTOCOL_ERROR;
    this.deliver(c, new Uint8Array([type, 0, 0, 0]));
  }

  /**
   * One complete frame, passed as the server does: type, the chunk, body
   * offset and length. The chunk has other bytes around the frame, and is
   * scribbled over afterwards: the engine must have kept nothing of it.
   */
  private deliver(c: Client, frame: Uint8Array): void {
    const model = this.model;
    const live = c.live;
    if (live) {
      c.lastSeen = this.now;
      c.firstFrame = true;
      c.partialSince = null;
    }
    const before = this.rng.int(9);
    const chunk = new Uint8Array(before + frame.length + this.rng.int(9));
    chunk.set(this.rng.bytes(chunk.length));
    chunk.set(frame, before);
    const more = this.engine.frame(c.conn.session!, chunk[before]!, chunk, before + 4, frame.length - 4, this.now);
    chunk.fill(0xa5);
    model.consume(this.transport.take());
    if (!more && c.live) fail(`frame() returned false but ${c.describe()} is live`);
    if (more && !live) fail(`frame() to an ended session returned true`);
    // The server reports the rest of the chunk after every frame that kept the reader going.
    if (more) {
      const partial = this.rng.chance(0.15);
      if (partial && c.live && c.partialSince === null) c.partialSince = this.now;
      this.engine.readProgress(c.conn.session!, partial, this.now);
    }
    this.settle();
  }

  private expectReply(c: Client, kind: ExpectedReply): void {
    this.model.reply = { client: c, kind };
  }

  /** A chunk that leaves a frame incomplete (or, with `partial` false, ends on a frame boundary). */
  readProgress(c: Client, partial: boolean): void {
    if (partial && c.live && c.firstFrame && c.partialSince === null) c.partialSince = this.now;
    this.engine.readProgress(c.conn.session!, partial, this.now);
    this.settle();
  }

  writeBlocked(c: Client): void {
    if (c.live && c.blockedSince === null) c.blockedSince = this.now;
    this.engine.writeBlocked(c.conn.session!, this.now);
    this.settle();
  }

  writeDrained(c: Client): void {
    if (c.live) c.blockedSince = null;
    this.engine.writeDrained(c.conn.session!);
    this.settle();
  }

  /** The shell's outbox limit: IO_TIMEOUT now. */
  timeOut(c: Client): void {
    if (c.live) c.cut = true;
    this.engine.timeOut(c.conn.session!, this.now);
    this.settle();
  }

  /** The reader met a bad header. */
  protocolError(c: Client): void {
    if (c.live) c.expectEnd = ErrorCode.PROTOCOL_ERROR;
    this.engine.protocolError(c.conn.session!, "bad header (simulated)", this.now);
    this.settle();
  }

  /** The peer closed, reset, or the socket failed (also a repeat for an ended session). */
  closed(c: Client): void {
    if (c.live) c.peerClosing = true;
    this.engine.closed(c.conn.session!, this.now);
    this.settle();
  }

  // --- operators -------------------------------------------------------------------

  /**
   * Force-release `name`: its oldest holder, or the session of `target`
   * (which ends only if it holds `name`), or session `target` by number.
   */
  forceRelease(name: string, target: Client | number | "oldest" = "oldest"): void {
    const holders = this.model.lockOf(name)?.holders ?? [];
    let expected: Client | null;
    let ended: Session<SimConn> | null;
    if (target === "oldest") {
      expected = holders[0] ?? null;
      if (expected !== null) expected.expectEnd = ErrorCode.FORCE_RELEASED;
      ended = this.engine.forceRelease(name, this.now);
    } else {
      const id = typeof target === "number" ? target : (target.conn.session?.id ?? 1_000_000);
      expected = holders.find((h) => h.conn.session?.id === id) ?? null;
      if (expected !== null) expected.expectEnd = ErrorCode.FORCE_RELEASED;
      ended = this.engine.forceRelease(name, this.now, id);
    }
    if (ended !== (expected?.conn.session ?? null)) fail(`forceRelease("${name}", ${typeof target === "object" ? target.describe() : target}) returned session ${ended?.id ?? "null"}`);
    this.settle();
  }

  kick(id: number, target: Client | undefined): void {
    const waiting = target !== undefined && target.live && target.state === ClientState.WAITING;
    if (waiting) target.expectEnd = ErrorCode.KICKED;
    const ended: Session<SimConn> | null = this.engine.kick(id, this.now);
    if (ended !== (waiting ? target.conn.session : null)) fail(`kick(${id}) returned session ${ended?.id ?? "null"}`);
    this.settle();
  }

  shutdown(): void {
    const model = this.model;
    model.draining = true;
    for (const c of model.liveClients()) c.expectEnd = ErrorCode.SHUTTING_DOWN;
    this.engine.shutdown(this.now);
    if (!this.engine.shuttingDown) fail("engine.shuttingDown is false after shutdown()");
    this.settle();
    if (this.engine.locks.size !== 0) fail(`locks remain after shutdown: ${[...this.engine.locks.keys()]}`);
  }
}

/** Self-test mutant: every lock this engine creates queues at the head instead of the tail. */
function makeQueuesLifo(engine: Engine<SimConn>): void {
  const locks = engine.locks;
  const set = locks.set.bind(locks);
  locks.set = (name, lock) => {
    lock.enqueue = (session) => {
      session.queuePrev = null;
      session.queueNext = lock.head;
      if (lock.head !== null) lock.head.queuePrev = session;
      else lock.tail = session;
      lock.head = session;
      lock.waiting++;
    };
    return set(name, lock);
  };
}

/** Self-test mutant: a shared claim that arrives while shared claims hold is queued at the head, ahead of any writer. */
function makeReadersOvertake(engine: Engine<SimConn>): void {
  const locks = engine.locks;
  const set = locks.set.bind(locks);
  locks.set = (name, lock) => {
    const enqueue = lock.enqueue.bind(lock);
    lock.enqueue = (session) => {
      if (session.slot !== SHARED_CLAIM || !lock.sharedHeld || lock.head === null) return enqueue(session);
      session.queuePrev = null;
      session.queueNext = lock.head;
      lock.head.queuePrev = session;
      lock.head = session;
      lock.waiting++;
    };
    return set(name, lock);
  };
}

/** Self-test mutant: shared claims never hold together (a read/write lock that is only a lock). */
function makeSharingFail(engine: Engine<SimConn>): void {
  const locks = engine.locks;
  const set = locks.set.bind(locks);
  locks.set = (name, lock) => {
    const admits = lock.admits.bind(lock);
    lock.admits = (session) => (lock.limit === 1 ? lock.holders === 0 : admits(session));
    return set(name, lock);
  };
}
