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
