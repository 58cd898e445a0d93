/**
 * Structured logs: one JSON object per line on stderr, with a level, a
 * stable `event` code (src/log/events.ts: the table of codes and their
 * levels) and a `msg` sentence for people. Nothing
 * on a hot path logs at the default level (info): session lifecycle is
 * debug, and callers test `enabled("debug")` before building fields.
 *
 * Warnings a client can provoke (io-timeouts, protocol errors, failed admin
 * auth) go through a RateLimit: a burst, then one line per interval, and the
 * next line that gets through says how many were suppressed. So a flood of
 * bad clients costs a counter increment each, not a write each.
 */
import type { LogEventAt } from "./events.ts";

export const LogLevel = { debug: 10, info: 20, warn: 30, error: 40 } as const;
export type LogLevelName = keyof typeof LogLevel;
export const LOG_LEVEL_NAMES = Object.keys(LogLevel) as LogLevelName[];

export function isLogLevel(name: string): name is LogLevelName {
  return Object.hasOwn(LogLevel, name);
}

export class Logger {
  /** Lines dropped by rate limits since start (exported as a metric). */
  suppressed = 0;
  private readonly threshold: number;

  constructor(
    level: LogLevelName | number = LogLevel.info,
    private readonly write: (line: string) => void = (line) => process.stderr.write(line),
  ) {
    this.threshold = typeof level === "number" ? level : LogLevel[level];
  }

  enabled(level: LogLevelName): boolean {
    return LogLevel[level] >= this.threshold;
  }

  log<L extends LogLevelName>(level: L, event: LogEventAt<L>, msg: string, fields?: Record<string, unknown>): void {
    if (LogLevel[level] < this.threshold) return;
    this.write(`${JSON.stringify({ time: new Date().toISOString(), level, event, msg, ...fields })}\n`);
  }

  /**
   * Log unless `limit` says this kind of line is flooding; `fields` is only
   * called when the line is written. Suppressed lines are counted, and the
   * next written line carries `suppressed: N`.
   */
  limited<L extends LogLevelName>(limit: RateLimit, level: L, event: LogEventAt<L>, msg: string, fields: () => Record<string, unknown>, now = performance.now()): void {
    if (LogLevel[level] < this.threshold) return;
    const dropped = limit.take(now);
    if (dropped < 0) {
      this.suppressed++;
      return;
    }
    const extra = fields();
    this.log(level, event, msg, dropped > 0 ? { ...extra, suppressed: dropped } : extra);
  }

  debug(event: LogEventAt<"debug">, msg: string, fields?: Record<string, unknown>): void {
    this.log("debug", event, msg, fields);
  }
  info(event: LogEventAt<"info">, msg: string, fields?: Record<string, unknown>): void {
    this.log("info", event, msg, fields);
  }
  warn(event: LogEventAt<"warn">, msg: string, fields?: Record<string, unknown>): void {
    this.log("warn", event, msg, fields);
  }
  error(event: LogEventAt<"error">, msg: string, fields?: Record<string, unknown>): void {
    this.log("error", event, msg, fields);
  }
}

/**
 * A token bucket for log lines: `burst` lines at once, then one more every
 * `intervalMs`. `take` returns -1 when the line must be dropped, else how
 * many lines were dropped since the last one that passed.
 */
export class RateLimit {
  private tokens: number;
  private last = -Infinity;
  private dropped = 0;

  constructor(
    private readonly burst = 10,
    private readonly intervalMs = 1000,
  ) {
    this.tokens = burst;
  }

  take(now: number): number {
    if (this.last !== -Infinity) this.tokens = Math.min(this.burst, this.tokens + (now - this.last) / this.intervalMs);
    this.last = now;
    if (this.tokens < 1) {
      this.dropped++;
      return -1;
    }
    this.tokens--;
    const dropped = this.dropped;
    this.dropped = 0;
    return dropped;
  }
}
