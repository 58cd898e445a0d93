/**
 * Probes of a server's lock-delay for the fault tests: its /readyz and one
 * /metrics value, a TRY claim's answer, and what LOCK_DELAYED looks like.
 */
import { expect } from "bun:test";
import { ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { type ServerFrame, WirePeer } from "./wire.ts";

export async function readyz(port: number): Promise<{ status: number; body: Record<string, any> }> {
  const response = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: response.status, body: (await response.json()) as Record<string, any> };
}

/** One value of /metrics (a metric without labels). */
export async function metric(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const match = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  if (match === null) throw new Error(`no ${name} in /metrics:\n${text}`);
  return Number(match[1]);
}

/** A TRY claim: its only answer (ACQUIRED or an ERROR). */
export async function tryClaim(port: number, name: string, leaseMs = 5000): Promise<ServerFrame> {
  const peer = await WirePeer.claim(port, name, leaseMs, { try: true });
  try {
    return peer.frames[0]!;
  } finally {
    peer.terminate();
  }
}

/** ERROR LOCK_DELAYED (0x14) with the message protocol.md gives. */
export function expectDelayed(frame: ServerFrame): void {
  expect({ type: frame.type, code: frame.code }).toEqual({ type: FrameType.ERROR, code: ErrorCode.LOCK_DELAYED });
  expect(ErrorCode.LOCK_DELAYED).toBe(0x14);
  expect(frame.message).toMatch(/^lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another \d+ ms$/);
}
