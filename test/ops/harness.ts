/** An in-process daemon (both listeners on 127.0.0.1, port 0) with its log captured, for ops tests. */
import { DAEMON_WORDS } from "../../src/cli/words.ts";
import { Logger, type LogLevelName } from "../../src/log/logger.ts";
import { Daemon, type DaemonOptions } from "../../src/server/daemon.ts";

export interface TestDaemon extends AsyncDisposable {
  readonly daemon: Daemon;
  /** Parsed log lines, in order. */
  readonly logs: Record<string, unknown>[];
  readonly log: Logger;
  readonly port: number;
  url(path: string): string;
  get(path: string): Promise<Response>;
  post(path: string, token?: string | null): Promise<Response>;
}

export function startDaemon(options: Partial<DaemonOptions> & { logLevel?: LogLevelName } = {}): TestDaemon {
  const logs: Record<string, unknown>[] = [];
  const log = new Logger(options.logLevel ?? "info", (line) => logs.push(JSON.parse(line)));
  const daemon = new Daemon({
    listen: { host: "127.0.0.1", port: 0 },
    ops: { host: "127.0.0.1", port: 0 },
    ioTimeoutMs: 5000,
    shutdownGraceMs: 0,
    adminToken: null,
    log,
    version: "0.0.0-test",
    words: DAEMON_WORDS, // the messages as lockd serve words them
    // Tests scrape, act, and scrape again at once: no shared body unless a test asks for it.
    opsLimits: { metricsMaxAgeMs: 0 },
    ...options,
  });
  const base = `http://127.0.0.1:${daemon.ops.port}`;
  const signal = () => AbortSignal.timeout(10_000);
  return {
    daemon,
    logs,
    log,
    port: daemon.server.port,
    url: (path) => base + path,
    get: (path) => fetch(base + path, { signal: signal() }),
    post: (path, token) => fetch(base + path, { method: "POST", headers: token == null ? {} : { authorization: `Bearer ${token}` }, signal: signal() }),
    [Symbol.asyncDispose]: () => daemon.close(),
  };
}

export async function body<T = any>(response: Response): Promise<T> {
  return (await response.json()) as T;
}
