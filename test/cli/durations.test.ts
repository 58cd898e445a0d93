// Every duration option of every command names its unit: a bare number is
// refused (exit 64), naming the readings in the option's range, as a flag and as its LOCKD_*
// variable. The options are found in the option tables (COMMAND_OPTIONS,
// by their DURATION placeholder), so a new duration option is covered
// without a change here.
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { COMMAND_OPTIONS } from "../../src/cli/config.ts";
import { ConfigError, parseOptions, type OptionSpec, type OptionTable } from "../../src/cli/options/argv.ts";
import { placeholderOf } from "../../src/cli/options/text.ts";
import { runCli } from "../fixtures/ops-child.ts";

const dir = mkdtempSync(join(tmpdir(), "lockd-durations-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface DurationOption {
  readonly command: keyof typeof COMMAND_OPTIONS;
  readonly key: string;
  readonly spec: OptionSpec;
}

const DURATIONS: DurationOption[] = Object.entries(COMMAND_OPTIONS).flatMap(([command, table]) =>
  Object.entries(table as OptionTable)
    .filter(([, spec]) => placeholderOf(spec).split("|").includes("DURATION"))
    .map(([key, spec]) => ({ command: command as keyof typeof COMMAND_OPTIONS, key, spec })),
);

/** A port in use, so that a `lockd serve` that accepted the bare number would stop at once (69) instead of serving. */
const taken = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
afterAll(() => taken.stop(true));

/**
 * The command line around the option: were the bare number accepted, each
 * command would still end within a second or two and harmlessly (serve
 * cannot listen; run waits at most 1 s for a port nothing listens on; the
 * ops verbs find no ops server there).
 */
const around: Record<keyof typeof COMMAND_OPTIONS, (args: readonly string[]) => string[]> = {
  serve: (args) => ["serve", "--listen", `127.0.0.1:${taken.port}`, "--ops", "127.0.0.1:0", "--data-dir", join(dir, "data"), ...args],
  run: (args) => ["run", "--server", "127.0.0.1:1", "--wait", "1s", ...args, "jobs/durations", "--", "true"],
  status: (args) => ["status", "--ops", "127.0.0.1:1", ...args],
  "force-release": (args) => ["force-release", "--ops", "127.0.0.1:1", ...args, "jobs/durations"],
  kick: (args) => ["kick", "--ops", "127.0.0.1:1", ...args, "1"],
  floor: (args) => ["floor", "--data-dir", join(dir, "data"), ...args],
  "shard-of": (args) => ["shard-of", ...args, "jobs/durations"],
};

/** What the refusal of a bare "5" advises: only the spellings (5s, 5ms) the option takes, found by parsing each. */
function advice(command: keyof typeof COMMAND_OPTIONS, spec: OptionSpec): string {
  const table = COMMAND_OPTIONS[command] as OptionTable;
  const fits = ["5s", "5ms"].filter((spelled) => {
    try {
      parseOptions(table, [spec.flag, spelled], {});
      return true;
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      return false;
    }
  });
  expect({ command, flag: spec.flag, fits: fits.length > 0 }).toEqual({ command, flag: spec.flag, fits: true });
  return `"5" has no unit: write ${fits.join(" or ")}`;
}

test("a bare number's refusal suggests only the spellings in range: --ops-idle-timeout (1s..255s) gets 5s, not 5ms; --io-timeout both", () => {
  const of = (command: keyof typeof COMMAND_OPTIONS, flag: string) => DURATIONS.find((d) => d.command === command && d.spec.flag === flag)!.spec;
  expect(advice("serve", of("serve", "--ops-idle-timeout"))).toBe('"5" has no unit: write 5s');
  expect(advice("serve", of("serve", "--io-timeout"))).toBe('"5" has no unit: write 5s or 5ms');
  let problems: readonly string[] = [];
  try {
    parseOptions(COMMAND_OPTIONS.serve as OptionTable, ["--ops-idle-timeout", "5"], {});
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    problems = error.problems;
  }
  expect(problems).toEqual(['--ops-idle-timeout: "5" has no unit: write 5s']);
});

test("the walk finds the duration options of serve, run and the ops verbs", () => {
  const flags = (command: keyof typeof COMMAND_OPTIONS) => DURATIONS.filter((d) => d.command === command).map((d) => d.spec.flag);
  expect(flags("serve")).toEqual(expect.arrayContaining(["--io-timeout", "--max-lease", "--shutdown-grace", "--ops-idle-timeout", "--coordinator-lease"]));
  expect(flags("run")).toEqual(expect.arrayContaining(["--lease", "--wait", "--kill-after"]));
  for (const command of ["status", "force-release", "kick"] as const) expect(flags(command)).toContain("--timeout");
});

test("every duration option refuses a bare number and takes one with a unit (parser)", () => {
  for (const { command, key, spec } of DURATIONS) {
    const table = COMMAND_OPTIONS[command] as OptionTable;
    const forms: [readonly string[], Record<string, string>, string][] = [[[spec.flag, "5"], {}, `${spec.flag}: `]];
    if (spec.env !== undefined) forms.push([[], { [spec.env]: "5" }, `${spec.flag} (from ${spec.env}): `]);
    for (const [argv, env, lead] of forms) {
      let problems: readonly string[] = [];
      try {
        parseOptions(table, argv, env);
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        problems = error.problems;
      }
      const refusal = `${lead}${advice(command, spec)}`;
      expect({ command, argv, env, refused: problems.some((p) => p.startsWith(refusal)) }).toEqual({ command, argv, env, refused: true });
    }
    const parsed = parseOptions(table, [spec.flag, "5s"], {});
    expect({ command, flag: spec.flag, value: parsed.options[key] }).toEqual({ command, flag: spec.flag, value: 5000 });
  }
});

test("every duration option's bare number ends the command with 64 and one line naming both spellings (flag and variable)", async () => {
  for (const { command, spec } of DURATIONS) {
    const forms: [readonly string[], Record<string, string>, string][] = [[[spec.flag, "5"], {}, spec.flag]];
    if (spec.env !== undefined) forms.push([[], { [spec.env]: "5" }, `${spec.flag} (from ${spec.env})`]);
    for (const [args, env, named] of forms) {
      const { code, err } = await runCli(around[command](args), env, 10_000);
      expect({ command, args, env, code, err }).toEqual({ command, args, env, code: 64, err: expect.stringContaining(`lockd ${command}: ${named}: ${advice(command, spec)}`) });
    }
  }
}, 60_000);

test("--help of each command says durations take a unit", async () => {
  for (const command of ["serve", "run", "status", "force-release", "kick"] as const) {
    const { code, out } = await runCli([command, "--help"], {}, 10_000);
    expect({ command, code }).toEqual({ command, code: 0 });
    expect({ command, says: out.includes("a DURATION names its unit") }).toEqual({ command, says: true });
  }
}, 30_000);
