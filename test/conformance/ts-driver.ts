/**
 * The TypeScript client's conformance driver: reads commands (JSON lines) on
 * stdin, drives `src/client`, writes events (JSON lines) on stdout. The line
 * protocol is in README.md beside this file.
 */
import { readFileSync } from "node:fs";
import { errorCodeName } from "../../src/protocol/constants.ts";
import { LockClient, LockError, LockLostError, type Lock } from "../../src/client/index.ts";

const out = (event: Record<string, unknown>) => process.stdout.write(JSON.stringify(event) + "\n");
const locks = new Map<string, Lock>();

function errorEvent(id: string, error: unknown): Record<string, unknown> {
  if (error instanceof LockError) {
    const serverCode = (error as { serverCode?: number }).serverCode;
    return { id, event: "error", code: error.code, class: error.class, serverCode: serverCode === undefined ? null : errorCodeName(serverCode), message: error.message };
  }
  return { id, event: "error", code: "INTERNAL", class: "client", serverCode: null, message: String(error) };
}

async function acquire(cmd: Record<string, any>): Promise<void> {
  const id: string = cmd.id;
  const tls = cmd.tls
    ? { ca: readFileSync(cmd.tls.ca, "utf8"), ...(cmd.tls.cert ? { cert: readFileSync(cmd.tls.cert, "utf8"), key: readFileSync(cmd.tls.key, "utf8") } : {}) }
    : undefined;
  const client = new LockClient({
    servers: cmd.servers,
    owner: cmd.owner ?? id,
    ...(tls ? { tls } : {}),
    ...(cmd.reconnect != null ? { reconnectMs: cmd.reconnect } : {}),
    ...(cmd.retryFirstConnect != null ? { retryFirstConnect: cmd.retryFirstConnect as boolean } : {}),
  });
  const startedAt = performance.now();
  try {
    const lock = await client.acquire(cmd.name, {
      lease: cmd.lease,
      try: cmd.try ?? false,
      ...(cmd.wait != null ? { wait: cmd.wait } : {}),
      ...(cmd.limit != null ? { limit: cmd.limit } : {}),
      ...(cmd.shared != null ? { shared: cmd.shared } : {}),
      ...(cmd.reclaim != null ? { reclaim: cmd.reclaim as boolean } : {}),
      onReclaim: (held) => out({ id, event: "reclaimed", token: held.token.toString(), slot: held.slot }),
      onRetry: (detail, _delayMs, backoff) => out({ id, event: "retry", backoff, detail }),
    });
    const at = performance.now();
    locks.set(id, lock);
    out({ id, event: "acquired", token: lock.token.toString(), slot: lock.slot, startedAt, at });
    const onAbort = () => {
      const reason = lock.signal.reason;
      if (reason instanceof LockLostError && reason.why === "released") return;
      const why = reason instanceof LockLostError ? reason.why : "closed";
      const code = reason instanceof LockLostError && reason.serverCode !== undefined ? errorCodeName(reason.serverCode) : null;
      out({ id, event: "lost", why, serverCode: code });
    };
    // A loss in the same read as the grant aborts before acquire() resolves.
    if (lock.signal.aborted) onAbort();
    else lock.signal.addEventListener("abort", onAbort, { once: true });
  } catch (error) {
    out(errorEvent(id, error));
  }
}

async function handle(cmd: Record<string, any>): Promise<void> {
  switch (cmd.cmd) {
    case "acquire":
      return acquire(cmd);
    case "release": {
      const startedAt = performance.now();
      await locks.get(cmd.id)?.release();
      out({ id: cmd.id, event: "released", startedAt, at: performance.now() });
      return;
    }
    case "held":
      out({ id: cmd.id, event: "held", held: locks.get(cmd.id)?.held ?? false });
      return;
    default:
      out({ id: cmd.id ?? null, event: "error", code: "BAD_COMMAND", class: "client", serverCode: null, message: `unknown command ${cmd.cmd}` });
  }
}

out({ event: "ready", client: "ts" });
let pending = "";
const decoder = new TextDecoder();
for await (const chunk of Bun.stdin.stream()) {
  pending += decoder.decode(chunk, { stream: true });
  let nl: number;
  while ((nl = pending.indexOf("\n")) >= 0) {
    const line = pending.slice(0, nl).trim();
    pending = pending.slice(nl + 1);
    if (line !== "") void handle(JSON.parse(line));
  }
}
for (const lock of locks.values()) await lock.release();
process.exit(0);
