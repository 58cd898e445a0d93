/**
 * A raw protocol peer that heartbeats on a schedule and keeps the account a
 * client keeps of its claim (protocol.md section 8.3): the moment it sent
 * each frame, and which of them the server answered. From that it knows
 * until when its holder *believes* it holds the lock: 0.8 x lease after it
 * sent the last frame answered with ACQUIRED (REPLY set). The lock-delay
 * tests assert that nobody else is granted the name before that moment.
 *
 * Answers come in order (one answer per ACQUIRE or HEARTBEAT, REPLY set;
 * a promotion is a push, REPLY clear), so the n-th answer answers the n-th
 * frame sent. Heartbeats go out every `everyMs` (at most MAX_OUTSTANDING
 * unanswered at once, well inside the pipelining limit) until the
 * connection closes or the peer is disposed. Through a proxy that stopped
 * forwarding, or to a stopped server, they simply go unanswered.
 */
import { FLAG_REPLY, FrameType } from "../../src/protocol/index.ts";
import { type ServerFrame, WirePeer } from "../helpers/wire.ts";

/** The share of its lease after its last confirmed send at which a client gives up (protocol.md 8.3). */
export const GIVE_UP_SHARE = 0.8;

const MAX_OUTSTANDING = 4;

export class Believer implements Disposable {
  /** performance.now() when each ACQUIRE / HEARTBEAT was written, in order. */
  readonly sent: number[] = [];
  private timer: ReturnType<typeof setInterval> | null = null;

  private constructor(
    readonly peer: WirePeer,
    readonly name: string,
    readonly leaseMs: number,
  ) {}

  /**
   * Connect to 127.0.0.1:`port`, send ACQUIRE and await its answer (`first`);
   * then heartbeat every `everyMs` (default lease/4, section 8.2).
   */
  static async claim(port: number, name: string, leaseMs: number, options: { everyMs?: number; try?: boolean } = {}): Promise<Believer> {
    const believer = new Believer(await WirePeer.connect(port), name, leaseMs);
    believer.sent.push(performance.now());
    believer.peer.acquire(name, leaseMs, { try: options.try ?? false });
    await believer.peer.frame(0, 10_000);
    if (!believer.peer.isClosed) {
      believer.timer = setInterval(() => {
        if (believer.peer.isClosed) believer.stopHeartbeats();
        else if (believer.outstanding < MAX_OUTSTANDING) believer.heartbeat();
      }, options.everyMs ?? leaseMs / 4);
    }
    return believer;
  }

  /** The server's answer to the ACQUIRE. */
  get first(): ServerFrame {
    return this.peer.frames[0]!;
  }

  /** The answers (REPLY set), in order: the i-th answers `sent[i]`. */
  get answers(): ServerFrame[] {
    return this.peer.frames.filter((f) => (f.flags & FLAG_REPLY) !== 0);
  }

  /** Frames sent and not answered yet. */
  get outstanding(): number {
    return this.sent.length - this.answers.length;
  }

  /** Send times of the frames the server answered with ACQUIRED (each a confirmation of the claim). */
  get confirmedSends(): number[] {
    const answers = this.answers;
    const out: number[] = [];
    for (let i = 0; i < answers.length; i++) if (answers[i]!.type === FrameType.ACQUIRED) out.push(this.sent[i]!);
    return out;
  }

  /** Arrival times of the confirmations (ACQUIRED with REPLY set). */
  get confirmationArrivals(): number[] {
    return this.answers.filter((f) => f.type === FrameType.ACQUIRED).map((f) => f.at);
  }

  /** Until when this holder believes it holds the lock (performance.now() ms); -Infinity if it never held it. */
  get believesUntil(): number {
    const confirmed = this.confirmedSends;
    return confirmed.length === 0 ? -Infinity : confirmed.at(-1)! + GIVE_UP_SHARE * this.leaseMs;
  }

  heartbeat(): void {
    this.sent.push(performance.now());
    this.peer.heartbeat();
  }

  /** Send a heartbeat now and await its answer (bounded). */
  async confirm(ms = 5000): Promise<ServerFrame> {
    this.heartbeat();
    const index = this.sent.length - 1;
    return this.peer.until(() => this.answers[index], ms, `the answer to heartbeat #${index} of ${this.name}`);
  }

  /** The grant: the first ACQUIRED frame (the answer to ACQUIRE, or a push after WAITING), awaited up to `ms`. */
  granted(ms: number): Promise<ServerFrame> {
    return this.peer.until(() => this.peer.frames.find((f) => f.type === FrameType.ACQUIRED) ?? (this.peer.isClosed ? fail(this) : undefined), ms, `a grant of ${this.name}`);

    function fail(b: Believer): never {
      throw new Error(`${b.name}: closed without a grant; frames ${b.peer.describe()}`);
    }
  }

  stopHeartbeats(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  [Symbol.dispose](): void {
    this.stopHeartbeats();
    this.peer.terminate();
  }
}
