#!/usr/bin/env bun
/** The `lockd` command: dispatch to a subcommand. */
import { ExitCode, exitWhenDrained } from "./exit.ts";

const HELP = `Usage: lockd <command> [options]

Commands:
  serve           run the lock server (lockd serve --help)
  run NAME -- CMD ARGS...
                  hold a lock while a command runs, like flock(1) (lockd run --help)
  status [NAME]   holders and waiters, from the ops server
  force-release NAME
                  end the holder of NAME (FORCE_RELEASED); the next waiter gets it
  kick ID         end waiting session ID (KICKED)
  floor [N]       show, or raise to N, the fencing-token floor in --data-dir (server stopped)
  shard-of NAME...
                  the shard each lock name belongs to in the server map (lockd shard-of --help)

Options:
  -h, --help      this text
  --version       print the version
`;

export async function main(argv: readonly string[], env: Record<string, string | undefined>): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "serve":
        return await (await import("./serve.ts")).serve(rest, env);
      case "status":
        return await (await import("./status.ts")).status(rest, env);
      case "force-release":
      case "kick":
        return await (await import("./admin.ts")).admin(command, rest, env);
      case "run":
        return await (await import("./run-fast.ts")).runFast(rest, env);
      case "floor":
        return (await import("./floor.ts")).floor(rest, env);
      case "shard-of":
        return (await import("./shard-of.ts")).shardOf(rest, env);
      case "--version":
      case "version":
        process.stdout.write(`lockd ${(await import("../version.ts")).VERSION}\n`);
        return ExitCode.OK;
      case undefined:
      case "-h":
      case "--help":
      case "help":
        process.stdout.write(HELP);
        return command === undefined ? ExitCode.USAGE : ExitCode.OK;
      default:
        process.stderr.write(`lockd: unknown command ${JSON.stringify(command)}\n\n${HELP}`);
        return ExitCode.USAGE;
    }
  } catch (error) {
    // Loaded here, not on every start: an error of these classes means a command loaded them already.
    const { CliError, ConfigError } = await import("./errors.ts");
    if (error instanceof ConfigError) {
      for (const problem of error.problems) process.stderr.write(`lockd ${command}: ${problem}\n`);
      return ExitCode.USAGE;
    }
    if (error instanceof CliError) {
      process.stderr.write(`lockd ${command}: ${error.message}\n`);
      return error.exitCode;
    }
    throw error;
  }
}

export { exitWhenDrained };

if (import.meta.main) {
  exitWhenDrained(await main(process.argv.slice(2), process.env));
}
