// --coordinator and --coordinator-file (and their LOCKD_* variables): flags beat the environment,
// the inline URL and the file are exclusive on one level, the file's trailing newline is ignored.
import { expect, test } from "bun:test";
import { resolveCoordinatorUrl } from "../../src/cli/coordinator.ts";
import { ConfigError, parseOptions } from "../../src/cli/options/argv.ts";
import { SERVE_OPTIONS } from "../../src/cli/config.ts";
import { runCli } from "../fixtures/ops-child.ts";

const files: Record<string, string> = { "/run/url": "postgres://lockd:pw@db/lockd\n", "/run/two-lines": "postgres://a\npostgres://b\n" };
const read = (path: string) => {
  const text = files[path];
  if (text === undefined) throw Object.assign(new Error("no such file"), { code: "ENOENT" });
  return text;
};

function resolve(argv: string[], env: Record<string, string> = {}) {
  const parsed = parseOptions(SERVE_OPTIONS, argv, env);
  return resolveCoordinatorUrl(parsed.options, parsed.sources, read);
}

test("none given: no coordinator", () => {
  expect(resolve([])).toBeNull();
});

test("inline or from a file, flag over environment", () => {
  expect(resolve(["--coordinator", "postgres://x/y"])).toEqual({ url: "postgres://x/y", from: "--coordinator" });
  expect(resolve([], { LOCKD_COORDINATOR_FILE: "/run/url" })).toEqual({ url: "postgres://lockd:pw@db/lockd", from: "LOCKD_COORDINATOR_FILE" });
  expect(resolve(["--coordinator-file", "/run/url"], { LOCKD_COORDINATOR: "postgres://env/x" })).toEqual({ url: "postgres://lockd:pw@db/lockd", from: "--coordinator-file" });
});

test("both on one level, an unreadable file, a file of two lines: one clear line each", () => {
  const problem = (f: () => unknown) => {
    try {
      f();
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      return (error as ConfigError).problems;
    }
    throw new Error("expected a ConfigError");
  };
  expect(problem(() => resolve(["--coordinator", "postgres://x", "--coordinator-file", "/run/url"]))).toEqual(["--coordinator and --coordinator-file are both set: give one"]);
  expect(problem(() => resolve([], { LOCKD_COORDINATOR: "postgres://x", LOCKD_COORDINATOR_FILE: "/run/url" }))).toEqual(["LOCKD_COORDINATOR and LOCKD_COORDINATOR_FILE are both set: give one"]);
  expect(problem(() => resolve(["--coordinator-file", "/nope"]))).toEqual(["--coordinator-file: cannot read /nope: ENOENT"]);
  expect(problem(() => resolve(["--coordinator-file", "/run/two-lines"]))).toEqual(["--coordinator-file: /run/two-lines must hold one URL on one line"]);
});

test("--service or --coordinator-lease without a coordinator: an error, not a single server", () => {
  expect(() => resolve(["--service", "payments"])).toThrow("--service needs --coordinator (or LOCKD_COORDINATOR, LOCKD_COORDINATOR_FILE)");
  expect(() => resolve([], { LOCKD_SERVICE: "p", LOCKD_COORDINATOR_LEASE: "2s" })).toThrow("LOCKD_SERVICE and LOCKD_COORDINATOR_LEASE need --coordinator");
  expect(resolve(["--service", "payments", "--coordinator", "postgres://x/y"])?.url).toBe("postgres://x/y");
  expect(() => resolve(["--advertise-ops", "lockd-1.internal:7701"])).toThrow("--advertise-ops needs --coordinator (or LOCKD_COORDINATOR, LOCKD_COORDINATOR_FILE)");
  expect(() => resolve([], { LOCKD_ADVERTISE_OPS: "lockd-1.internal:7701" })).toThrow("LOCKD_ADVERTISE_OPS needs --coordinator");
  expect(resolve(["--advertise-ops", "lockd-1.internal:7701", "--coordinator", "postgres://x/y"])?.url).toBe("postgres://x/y");
});

test("bad values of the other coordinator flags are named", () => {
  expect(() => parseOptions(SERVE_OPTIONS, ["--coordinator-lease", "50ms"], {})).toThrow("--coordinator-lease: 50ms is out of range 200ms..10m");
  expect(() => parseOptions(SERVE_OPTIONS, ["--advertise-ops", "0.0.0.0"], {})).toThrow("--advertise-ops");
  expect(() => parseOptions(SERVE_OPTIONS, ["--advertise-ops", "lockd-1:0"], {})).toThrow("--advertise-ops");
  expect(() => parseOptions(SERVE_OPTIONS, ["--service", "two words"], {})).toThrow("--service: a service name is 1 to 255 printable ASCII characters without spaces");
});

test("a wildcard --advertise-ops (0.0.0.0, ::, and their other spellings) is refused: no other machine can reach it", async () => {
  const problem = (argv: string[], env: Record<string, string> = {}) => {
    try {
      parseOptions(SERVE_OPTIONS, argv, env);
      return null;
    } catch (error) {
      return (error as ConfigError).problems;
    }
  };
  for (const wildcard of ["0.0.0.0:7701", "[::]:7701", "[0:0:0:0:0:0:0:0]:7701", "[::0]:7701", "[::ffff:0.0.0.0]:7701"]) {
    expect({ wildcard, problems: problem(["--advertise-ops", wildcard]) }).toEqual({
      wildcard,
      problems: [
        `--advertise-ops: ${JSON.stringify(wildcard)} is a wildcard address, which a listener binds but no other machine can reach: give the address or name others reach this instance's ops server by (example: 10.0.0.7:7701 or lockd-1.internal:7701)`,
      ],
    });
  }
  expect(problem([], { LOCKD_ADVERTISE_OPS: "0.0.0.0:7701" })?.[0]).toStartWith("--advertise-ops (from LOCKD_ADVERTISE_OPS): \"0.0.0.0:7701\" is a wildcard address");
  for (const reachable of ["10.0.0.7:7701", "[fd00::5]:7701", "[::1]:7701", "lockd-1.internal:7701", "0.example:7701"]) {
    expect({ reachable, problems: problem(["--advertise-ops", reachable]) }).toEqual({ reachable, problems: null });
  }
  // The whole command: exit 64 with that one line, before the coordinator is asked anything.
  const served = await runCli(["serve", "--coordinator", "postgres://lockd@127.0.0.1:1/lockd", "--advertise-ops", "0.0.0.0:7701"]);
  expect({ code: served.code, err: served.err }).toEqual({
    code: 64,
    err: `lockd serve: --advertise-ops: "0.0.0.0:7701" is a wildcard address, which a listener binds but no other machine can reach: give the address or name others reach this instance's ops server by (example: 10.0.0.7:7701 or lockd-1.internal:7701)\n`,
  });
});
