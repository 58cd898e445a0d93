/**
 * A failure a command reports as one line on stderr and an exit code
 * (ExitCode in exit.ts); main.ts prints it. Anything else that escapes a
 * command is a bug.
 */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
    this.name = "CliError";
  }
}

/** Bad flags, variables or arguments: every problem, one line each; main.ts prints them and exits 64. */
export class ConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(problems.join("\n"));
    this.name = "ConfigError";
  }
}
