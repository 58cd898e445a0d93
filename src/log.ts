/**
 * Structured logs: one JSON object per line on stderr. Nothing on a hot path
 * logs at the default level.
 */
export const LogLevel = { debug: 10, info: 20, warn: 30, error: 40 } as const;
export type LogLevelName = keyof typeof LogLevel;

export class Logger {
  constructor(
    private readonly threshold: number = LogLevel.info,
    private readonly write: (line: string) => void = (line) => process.stderr.write(line),
  ) {}

  enabled(level: LogLevelName): boolean {
    return LogLevel[level] >= this.threshold;
  }

  log(level: LogLevelName, msg: string, fields?: Record<string, unknown>): void {
    if (LogLevel[level] < this.threshold) return;
    this.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
  }

  debug(msg: string, fields?: Record<string, unknown>): void {
    this.log("debug", msg, fields);
  }
  info(msg: string, fields?: Record<string, unknown>): void {
    this.log("info", msg, fields);
  }
  warn(msg: string, fields?: Record<string, unknown>): void {
    this.log("warn", msg, fields);
  }
  error(msg: string, fields?: Record<string, unknown>): void {
    this.log("error", msg, fields);
  }
}
