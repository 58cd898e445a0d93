/**
 * The child side of a bench process: every process a benchmark starts (the
 * lockd server, the floors, the load drivers) answers the same IPC requests,
 * so each side is measured the same way. `stats` reports the process's own
 * CPU time (process.cpuUsage, microseconds), RSS and JS heap, after a full
 * GC when asked.
 */
import { heapStats } from "bun:jsc";

export interface ProcStats {
  readonly type: "stats";
  readonly id: number;
  /** User + system CPU time of this process so far, in microseconds. */
  readonly cpuUs: number;
  readonly rss: number;
  /** JSC heap size (live objects) in bytes, after Bun.gc(true) when requested. */
  readonly heap: number;
  readonly extra: Record<string, unknown>;
}

export interface Request {
  readonly type: string;
  readonly id: number;
  readonly [key: string]: unknown;
}

type Handler = (request: Request) => Record<string, unknown> | Promise<Record<string, unknown>>;

/** Answer `stats` and `exit`, plus the process's own request types. */
export function serveRequests(handlers: Record<string, Handler> = {}, extra: () => Record<string, unknown> = () => ({})): void {
  process.on("message", async (raw: unknown) => {
    const request = raw as Request;
    if (request.type === "exit") process.exit(0);
    if (request.type === "stats") {
      if (request.gc === true) Bun.gc(true);
      const cpu = process.cpuUsage();
      const reply: ProcStats = {
        type: "stats",
        id: request.id,
        cpuUs: cpu.user + cpu.system,
        rss: process.memoryUsage.rss(),
        heap: heapStats().heapSize,
        extra: extra(),
      };
      process.send!(reply);
      return;
    }
    const handler = handlers[request.type];
    if (handler === undefined) {
      process.send!({ type: "error", id: request.id, message: `unknown request ${request.type}` });
      return;
    }
    process.send!({ ...(await handler(request)), type: request.type, id: request.id });
  });
}

/** Tell the parent this process is ready (with whatever it needs to know, e.g. the port). */
export function ready(info: Record<string, unknown>): void {
  process.send!({ type: "ready", id: 0, ...info });
}
