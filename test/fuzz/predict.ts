/**
 * What a server must answer to one connection's byte stream, by protocol.md,
 * while another session holds the lock "control" (exclusively, limit 1) and
 * nothing else is held:
 * the reply to each complete frame, and the ERROR (one of a set of codes)
 * that ends the session, if one does.
 */
import { CLIENT_FRAMES, ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { referenceAcquire, referenceParse } from "./reference.ts";

export type Expected =
  /** ACQUIRED, REPLY set, a token above every earlier one; `slotted`: with FLAG_SLOT and slot 0 (a limit above 1). */
  | { readonly kind: "grant"; readonly slotted: boolean }
  /** WAITING, REPLY set. */
  | { readonly kind: "wait" }
  /** ACQUIRED, REPLY set, the grant's token again. */
  | { readonly kind: "ack" }
  | { readonly kind: "ack-wait" }
  /** ERROR with one of `codes`, then the close. */
  | { readonly kind: "end"; readonly codes: ReadonlySet<number> };

export interface Prediction {
  readonly replies: Expected[];
  /** The session ends (the last of `replies` is the "end"). */
  readonly ends: boolean;
  /** The stream stops inside a frame (only meaningful when it does not end). */
  readonly partial: boolean;
  /** The session's claim was accepted (so heartbeats are answered), with this lease. */
  readonly accepted: boolean;
  readonly leaseMs: number;
}

/** The lock key (hex of the name's bytes) the control session holds. */
export const CONTROL_KEY = Array.from(new TextEncoder().encode("control"), (b) => b.toString(16).padStart(2, "0")).join("");

const only = (code: number): ReadonlySet<number> => new Set([code]);

export function predict(stream: Uint8Array): Prediction {
  const ref = referenceParse(stream, CLIENT_FRAMES);
  const replies: Expected[] = [];
  let state: "connected" | "waiting" | "owner" = "connected";
  let leaseMs = 0;
  const end = (codes: ReadonlySet<number>): Prediction => {
    replies.push({ kind: "end", codes });
    return { replies, ends: true, partial: false, accepted: state !== "connected", leaseMs };
  };
  for (const frame of ref.frames) {
    if (frame.type === FrameType.HEARTBEAT) {
      if (state === "connected") return end(only(ErrorCode.PROTOCOL_ERROR));
      replies.push({ kind: state === "owner" ? "ack" : "ack-wait" });
      continue;
    }
    if (state !== "connected") return end(only(ErrorCode.PROTOCOL_ERROR)); // a second ACQUIRE
    const acquire = referenceAcquire(frame.body);
    if (!acquire.ok) return end(acquire.codes);
    const held = acquire.nameKey === CONTROL_KEY;
    if (held && acquire.limit !== 1) return end(only(ErrorCode.LIMIT_MISMATCH));
    if (held && acquire.try) return end(only(ErrorCode.LOCK_BUSY));
    leaseMs = acquire.leaseMs;
    state = held ? "waiting" : "owner";
    replies.push(held ? { kind: "wait" } : { kind: "grant", slotted: acquire.limit > 1 });
  }
  if (ref.badHeaderAt >= 0 && ref.badHeaderAt + 4 <= stream.length) return end(only(ErrorCode.PROTOCOL_ERROR));
  const consumed = ref.frames.length === 0 ? 0 : ref.frames[ref.frames.length - 1]!.end;
  return { replies, ends: false, partial: consumed < stream.length, accepted: state !== "connected", leaseMs };
}

export interface Received {
  readonly type: number;
  readonly flags: number;
  readonly body: Uint8Array;
}

export interface Verdict {
  /** The token granted to the session, 0 if none. */
  readonly token: number;
  /** It ended with LEASE_EXPIRED, which `allowExpiry` let pass. */
  readonly expired: boolean;
}

function tokenOf(body: Uint8Array): number {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  return view.getUint32(0) * 0x1_0000_0000 + view.getUint32(4);
}

/**
 * Hold the frames a session received (ERROR included) and whether it was
 * closed to the prediction. `lastToken` is the highest token issued before.
 * `allowExpiry`: over real sockets an accepted session with a short lease
 * may meet LEASE_EXPIRED before the stream's end; the caller judges its timing.
 * Returns the granted token; throws an Error saying what differs.
 */
export function judge(received: readonly Received[], closed: boolean, p: Prediction, lastToken: number, allowExpiry = false): Verdict {
  const describe = (): string =>
    `got [${received.map((f) => `${f.type.toString(16)}/${f.flags}${f.type === FrameType.ERROR ? `/0x${f.body[0]!.toString(16)}` : ""}`).join(", ")}] closed=${closed}, ` +
    `expected ${JSON.stringify(p.replies.map((r) => (r.kind === "end" ? `end(${[...r.codes].map((c) => c.toString(16))})` : r.kind)))}`;
  let token = 0;
  let slotted = false;
  const accepted = p.replies.findIndex((r) => r.kind === "grant" || r.kind === "wait");
  for (let i = 0; i < received.length; i++) {
    const f = received[i]!;
    const want = p.replies[i];
    if (allowExpiry && accepted >= 0 && i > accepted && f.type === FrameType.ERROR && f.body[0] === ErrorCode.LEASE_EXPIRED) {
      if (i !== received.length - 1) throw new Error(`frames after LEASE_EXPIRED: ${describe()}`);
      return { token, expired: true };
    }
    if (want === undefined) throw new Error(`unexpected frame #${i}: ${describe()}`);
    const reply = (f.flags & 1) === 1;
    switch (want.kind) {
      case "grant": {
        const shape = want.slotted ? f.flags === 0x03 && f.body.length === 10 && f.body[8] === 0 && f.body[9] === 0 : f.flags === 0x01 && f.body.length === 8;
        if (f.type !== FrameType.ACQUIRED || !shape) throw new Error(`frame #${i} is not a grant: ${describe()}`);
        token = tokenOf(f.body);
        slotted = want.slotted;
        if (!(token > lastToken)) throw new Error(`token ${token} is not above ${lastToken}: ${describe()}`);
        break;
      }
      case "ack":
        if (f.type !== FrameType.ACQUIRED || !reply || tokenOf(f.body) !== token || f.body.length !== (slotted ? 10 : 8)) {
          throw new Error(`frame #${i} is not the owner's ack: ${describe()}`);
        }
        break;
      case "wait":
      case "ack-wait":
        if (f.type !== FrameType.WAITING || !reply || f.body.length !== 0) throw new Error(`frame #${i} is not WAITING: ${describe()}`);
        break;
      case "end":
        if (f.type !== FrameType.ERROR || f.flags !== 0 || !want.codes.has(f.body[0]!)) throw new Error(`frame #${i} is not the expected ERROR: ${describe()}`);
        break;
      default:
        want satisfies never;
    }
  }
  if (received.length !== p.replies.length) throw new Error(`${received.length} frames, expected ${p.replies.length}: ${describe()}`);
  if (closed !== p.ends) throw new Error(`closed=${closed}, expected ${p.ends}: ${describe()}`);
  return { token, expired: false };
}
