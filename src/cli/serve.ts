/** `lockd serve`: run the lock server until SIGINT or SIGTERM. */
import { SERVE_OPTIONS, optionsHelp, parseOptions } from "../config.ts";
import { Logger } from "../log.ts";
import { LockServer } from "../server/index.ts";
import { VERSION } from "../version.ts";
import { ExitCode } from "./exit.ts";

export const SERVE_HELP = `Usage: lockd serve [options]

Runs the lock server. Stops on SIGINT or SIGTERM: every session gets ERROR
SHUTTING_DOWN and is closed, then the process exits 0. A second signal exits
at once.

Options (flag, then environment, then default):
${optionsHelp(SERVE_OPTIONS)}
  -h, --help                this text
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
  const { listen, ioTimeout } = parsed.options;
  const log = new Logger();
  let server: LockServer;
  try {
    server = new LockServer({ hostname: listen.host, port: listen.port, ioTimeoutMs: ioTimeout });
  } catch (error) {
    process.stderr.write(`lockd serve: cannot listen on ${listen.host}:${listen.port}: ${(error as Error).message}\n`);
    return ExitCode.UNAVAILABLE;
  }
  log.info("lockd listening", { version: VERSION, listen: `${server.hostname}:${server.port}`, ioTimeoutMs: ioTimeout, pid: process.pid });

  return await new Promise<number>((resolve) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals++;
      if (signals > 1) {
        log.warn("second signal: exiting at once", { signal });
        process.exit(ExitCode.SOFTWARE);
      }
      log.info("shutting down", { signal, sessions: server.engine.sessions.size });
      void server.stop().then(() => {
        log.info("stopped");
        resolve(ExitCode.OK);
      });
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}
