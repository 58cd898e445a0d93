/**
 * Watch the sessions a LockServer ends on its own (lease expiry, io-timeout,
 * errors, operators): wraps its Transport.close so tests await the event
 * itself instead of polling or sleeping.
 */
import type { LockServer } from "../../src/server/index.ts";
import type { Conn } from "../../src/server/conn.ts";
import { Wakeup } from "./events.ts";

export interface EndEvent {
  readonly sessionId: number;
  readonly code: number;
  readonly at: number;
}

export function watchEnds(server: LockServer): { ends: EndEvent[]; until(check: (ends: EndEvent[]) => boolean, ms?: number): Promise<void> } {
  const ends: EndEvent[] = [];
  const events = new Wakeup();
  const close = server.close.bind(server);
  server.close = (conn: Conn, frame: Uint8Array | null) => {
    const session = conn.session;
    if (session !== null) ends.push({ sessionId: session.id, code: session.endReason, at: performance.now() });
    close(conn, frame);
    events.wake();
  };
  return {
    ends,
    async until(check, ms = 10_000) {
      await events.until(() => check(ends), ms, () => `session ends; saw ${JSON.stringify(ends)}`);
    },
  };
}
