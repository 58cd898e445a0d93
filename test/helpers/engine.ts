/**
 * Drive the engine without sockets: a recording transport and a virtual
 * clock. Each fake connection keeps the frames the engine sent it and
 * whether (and with what last frame) the engine closed it.
 */
import { Engine, type EngineOptions, type Session, type EngineOutput } from "../../src/core/index.ts";
import { FrameType, HEARTBEAT_FRAME, decodeAcquired, decodeSlot, encodeAcquire, decodeError } from "../../src/protocol/index.ts";
import type { Conn } from "../../src/server/conn.ts";
import type { LockServer } from "../../src/server/server.ts";

export interface Sent {
  type: number;
  flags: number;
  token?: bigint;
  /** ACQUIRED with FLAG_SLOT: its slot. */
  slot?: number;
  code?: number;
}

export class FakeConn {
  sent: Sent[] = [];
  closed = false;
  closeFrame: Sent | null = null;
  /** The message of the ERROR the connection was closed with, else "". */
  closeText = "";
  session: Session<FakeConn> | null = null;
  constructor(readonly name: string) {}
  get last(): Sent | undefined {
    return this.sent[this.sent.length - 1];
  }
}

function parse(frame: Uint8Array): Sent {
  const sent: Sent = { type: frame[0]!, flags: frame[1]! };
  if (sent.type === FrameType.ACQUIRED) {
    sent.token = decodeAcquired(frame, 4);
    const slot = decodeSlot(frame, 4, frame.length - 4);
    if (slot >= 0) sent.slot = slot;
  }
  if (sent.type === FrameType.ERROR) sent.code = frame[4]!;
  return sent;
}

export interface ClaimOptions {
  try?: boolean;
  owner?: string;
  limit?: number;
  shared?: boolean;
}

export class Harness implements EngineOutput<FakeConn> {
  now = 1000;
  readonly engine: Engine<FakeConn>;

  constructor(options: Partial<EngineOptions> = {}) {
    this.engine = new Engine<FakeConn>(this, { ioTimeoutMs: 5000, ...options }, this.now);
  }

  send(conn: FakeConn, frame: Uint8Array): void {
    if (conn.closed) throw new Error(`send to closed ${conn.name}`);
    conn.sent.push(parse(frame));
  }

  close(conn: FakeConn, frame: Uint8Array | null): void {
    if (conn.closed) throw new Error(`double close of ${conn.name}`);
    conn.closed = true;
    conn.closeFrame = frame === null ? null : parse(frame);
    if (frame !== null && frame[0] === FrameType.ERROR) conn.closeText = decodeError(frame, 4, frame.length - 4).message;
  }

  open(name = "c"): FakeConn {
    const conn = new FakeConn(name);
    conn.session = this.engine.open(conn, this.now);
    return conn;
  }

  /** Feed a whole frame (header included) as the server's reader would. */
  frame(conn: FakeConn, bytes: Uint8Array): boolean {
    return this.engine.frame(conn.session!, bytes[0]!, bytes, 4, bytes.length - 4, this.now);
  }

  acquire(conn: FakeConn, lock: string, leaseMs: number, options: ClaimOptions = {}): boolean {
    return this.frame(
      conn,
      encodeAcquire({ name: lock, leaseMs, owner: options.owner ?? "", try: options.try ?? false, limit: options.limit ?? 1, shared: options.shared ?? false }),
    );
  }

  /** A connection that has sent ACQUIRE with `options` (limit, shared, try). */
  claim(lock: string, leaseMs: number, options: ClaimOptions = {}, name = lock): FakeConn {
    const conn = this.open(name);
    this.acquire(conn, lock, leaseMs, options);
    return conn;
  }

  /** A connection that has sent ACQUIRE. */
  client(lock: string, leaseMs: number, name = lock): FakeConn {
    const conn = this.open(name);
    this.acquire(conn, lock, leaseMs);
    return conn;
  }

  heartbeat(conn: FakeConn): boolean {
    return this.frame(conn, HEARTBEAT_FRAME);
  }

  closePeer(conn: FakeConn): void {
    this.engine.closed(conn.session!, this.now);
  }

  /** Move the clock to `t` and run the wheel, as the server's timer would. */
  at(t: number): void {
    this.now = t;
    this.engine.tick(t);
  }

  advance(ms: number): void {
    this.at(this.now + ms);
  }
}

/**
 * A LockServer's engine, which the server keeps private (the ops room reads
 * `server.locks`): tests look at its sessions, locks and counters directly.
 */
export function engineOf(server: LockServer): Engine<Conn> {
  return (server as unknown as { readonly engine: Engine<Conn> }).engine;
}
