/** `lockd serve`: run the lock server and its ops server until SIGINT or SIGTERM. */
import { SERVE_OPTIONS, optionsHelp, parseOptions } from "../config.ts";
import { Logger } from "../log.ts";
import { resolveAdminToken } from "../server/admin.ts";
import { Daemon, ListenError } from "../server/daemon.ts";
import { maxOpenFiles } from "../server/metrics.ts";
import { VERSION } from "../version.ts";
import { ExitCode } from "./exit.ts";

export const SERVE_HELP = `Usage: lockd serve [options]

Runs the lock server and its ops HTTP server (health, readiness, Prometheus
metrics, lock view, admin actions; see docs/operations.md).

Stops on SIGINT or SIGTERM: readyz turns 503, the lock listener stops, every
session gets ERROR SHUTTING_DOWN and is closed, the ops server stays up for
--shutdown-grace, then the process exits 0. A second signal exits at once
with code 70.

Options (flag, then environment, then default):
${optionsHelp(SERVE_OPTIONS)}
  -h, --help                this text

Admin endpoints (force-release, kick) need a token: without one they answer
403. Flags beat the environment; giving both the token and the token file
on the same level (two flags, or two variables) is an error.

Exit codes: 0 stopped cleanly; 64 bad options; 69 cannot listen; 70 stopped
by a second signal.
`;

export async function serve(argv: readonly string[], env: Record<string, string | undefined>): Promise<number> {
  const parsed = parseOptions(SERVE_OPTIONS, argv, env);
  if (parsed.help) {
    process.stdout.write(SERVE_HELP);
    return ExitCode.OK;
  }
  if (parsed.positionals.length > 0) {
    process.stderr.write(`lockd serve: unexpected argument ${JSON.stringify(parsed.positionals[0])}\n`);
    return ExitCode.USAGE;
  }
  const options = parsed.options;
  const admin = resolveAdminToken(options, parsed.sources);
  const log = new Logger(options.logLevel);
  const fdLimit = maxOpenFiles();
  const maxSessions = options.maxSessions ?? (fdLimit > 512 ? fdLimit - 256 : 100_000);
  let daemon: Daemon;
  try {
    daemon = new Daemon({
      listen: options.listen,
      ops: options.ops,
      ioTimeoutMs: options.ioTimeout,
      maxSessions,
      shutdownGraceMs: options.shutdownGrace,
      adminToken: admin.token,
      log,
      version: VERSION,
    });
  } catch (error) {
    if (!(error instanceof ListenError)) throw error;
    process.stderr.write(`lockd serve: ${error.message}\n`);
    return ExitCode.UNAVAILABLE;
  }
  const onSignal = (signal: NodeJS.Signals) => daemon.signal(signal);
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  log.info("lockd listening", {
    version: VERSION,
    listen: `${daemon.server.hostname}:${daemon.server.port}`,
    ops: `${daemon.ops.hostname}:${daemon.ops.port}`,
    ioTimeoutMs: options.ioTimeout,
    maxSessions,
    shutdownGraceMs: options.shutdownGrace,
    adminToken: admin.token === null ? "none (admin endpoints answer 403)" : admin.from,
    logLevel: options.logLevel,
    pid: process.pid,
  });
  if (fdLimit > 0 && maxSessions > fdLimit - 64) {
    log.warn("--max-sessions is near or above the open-file limit: accepts may fail before OVERLOADED can be sent", { maxSessions, openFileLimit: fdLimit });
  }

  await daemon.stopped;
  process.off("SIGINT", onSignal);
  process.off("SIGTERM", onSignal);
  return ExitCode.OK;
}
