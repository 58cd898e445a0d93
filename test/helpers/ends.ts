/**
 * Watch the sessions a LockServer ends on its own (lease expiry, io-timeout,
 * errors, operators): wraps its Transport.close so tests await the event
 * itself instead of polling or sleeping.
 */
import type { LockServer } from "../../src/server/index.ts";
import type { Conn } from "../../src/server/conn.ts";

export interface EndEvent {
  readonly sessionId: number;
  readonly code: number;
  readonly at: number;
}

export function watchEnds(server: LockServer): { ends: EndEvent[]; until(check: (ends: EndEvent[]) => boolean, ms?: number): Promise<void> } {
  const ends: EndEvent[] = [];
  let wake: (() => void) | null = null;
  const close = server.close.bind(server);
  server.close = (conn: Conn, frame: Uint8Array | null) => {
    const session = conn.session;
    if (session !== null) ends.push({ sessionId: session.id, code: session.endReason, at: performance.now() });
    close(conn, frame);
    wake?.();
  };
  return {
    ends,
    async until(check, ms = 10_000) {
      const deadline = performance.now() + ms;
      while (!check(ends)) {
        const left = deadline - performance.now();
        if (left <= 0) throw new Error(`timed out waiting for session ends; saw ${JSON.stringify(ends)}`);
        let timer: ReturnType<typeof setTimeout> | undefined;
        await new Promise<void>((resolve) => {
          wake = resolve;
          timer = setTimeout(resolve, left);
        });
        clearTimeout(timer);
        wake = null;
      }
    },
  };
}
