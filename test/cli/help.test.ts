// --help shows what kind of value each option takes, never a bare VALUE.
import { expect, test } from "bun:test";
import { FORCE_RELEASE_HELP, KICK_HELP } from "../../src/cli/admin.ts";
import { FLOOR_HELP } from "../../src/cli/floor.ts";
import { RUN_HELP } from "../../src/cli/run.ts";
import { SERVE_HELP } from "../../src/cli/serve.ts";
import { STATUS_HELP } from "../../src/cli/status.ts";
import { placeholderOf } from "../../src/cli/options/values.ts";
import { parseOptions, type OptionTable } from "../../src/cli/options/argv.ts";
import { ADMIN_OPTIONS, RUN_OPTIONS, SERVE_OPTIONS, STATUS_OPTIONS } from "../../src/cli/config.ts";

const HELPS = { SERVE_HELP, RUN_HELP, STATUS_HELP, KICK_HELP, FORCE_RELEASE_HELP, FLOOR_HELP };

test("no help text shows the placeholder VALUE", () => {
  for (const [name, text] of Object.entries(HELPS)) expect({ name, value: text.includes("VALUE") }).toEqual({ name, value: false });
});

test("placeholders by kind: HOST:PORT, DURATION, FILE, N, ...", () => {
  const expected: [OptionTable, string, string][] = [
    [SERVE_OPTIONS, "--listen", "HOST:PORT"],
    [SERVE_OPTIONS, "--ops", "HOST:PORT"],
    [SERVE_OPTIONS, "--io-timeout", "DURATION"],
    [SERVE_OPTIONS, "--max-sessions", "N|auto"],
    [SERVE_OPTIONS, "--admin-token-file", "FILE"],
    [SERVE_OPTIONS, "--admin-token", "TOKEN"],
    [SERVE_OPTIONS, "--log-level", "LEVEL"],
    [SERVE_OPTIONS, "--token-block", "N"],
    [SERVE_OPTIONS, "--tls-cert", "FILE"],
    [RUN_OPTIONS, "--server", "HOST:PORT[,...]|MAP"],
    [RUN_OPTIONS, "--wait", "DURATION"],
    [RUN_OPTIONS, "--conflict-exit-code", "N"],
    [RUN_OPTIONS, "--owner", "LABEL"],
    [STATUS_OPTIONS, "--ops", "HOST:PORT[,...]|MAP"],
    [ADMIN_OPTIONS, "--ops", "HOST:PORT[,...]|MAP"],
    [ADMIN_OPTIONS, "--timeout", "DURATION"],
  ];
  for (const [table, flag, placeholder] of expected) {
    const spec = Object.values(table).find((s) => s.flag === flag)!;
    expect({ flag, placeholder: placeholderOf(spec) }).toEqual({ flag, placeholder });
  }
  expect(SERVE_HELP).toContain("--listen HOST:PORT ");
  expect(RUN_HELP).toContain("-w DURATION ");
  expect(RUN_HELP).toContain("-E N ");
});

test("a flag without its value says which kind of value to write", () => {
  expect(() => parseOptions(RUN_OPTIONS, ["--wait"], {})).toThrow("--wait needs a value (write --wait=DURATION for one that starts with -)");
});
