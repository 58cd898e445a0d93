import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, parseOptions } from "../../src/cli/options/argv.ts";
import { ADMIN_OPTIONS, SERVE_OPTIONS, STATUS_OPTIONS } from "../../src/cli/config.ts";
import { SERVE_HELP } from "../../src/cli/serve.ts";
import { ChildServer } from "../fixtures/ops-child.ts";

const parse = (argv: string[], env: Record<string, string> = {}) => parseOptions(SERVE_OPTIONS, argv, env);

describe("serve options: flags beat env beat defaults", () => {
  test("defaults", () => {
    const { options, sources } = parse([]);
    expect(options).toEqual({
      listen: { host: "127.0.0.1", port: 7700 },
      ops: { host: "127.0.0.1", port: 7701 },
      ioTimeout: 5000,
      maxSessions: null, // auto: from the open-file limit
      maxSessionsPerSource: null, // off
      maxLease: null, // off
      reclaimMaxLease: null, // off
      shutdownGrace: 5000,
      adminToken: undefined,
      adminTokenFile: undefined,
      logLevel: "info",
      dataDir: "./lockd-data",
      tokenBlock: 100_000,
      shard: undefined,
      shards: undefined,
      shardsGeneration: undefined,
      tlsCert: undefined,
      tlsKey: undefined,
      tlsClientCa: undefined,
      opsTlsCert: undefined,
      opsTlsKey: undefined,
      opsMaxConnections: 64,
      opsIdleTimeout: 5000,
      coordinator: undefined,
      coordinatorFile: undefined,
      service: "default",
      coordinatorLease: 4000,
      advertiseOps: undefined,
      opsAllowHost: undefined,
    });
    expect(sources.ops).toBe("default");
    expect(sources.adminToken).toBe("unset");
  });

  test("env over defaults, flags over env, for every option", () => {
    const env = {
      LOCKD_LISTEN: "127.0.0.1:8000",
      LOCKD_OPS: "127.0.0.1:8001",
      LOCKD_IO_TIMEOUT: "2s",
      LOCKD_MAX_SESSIONS: "50",
      LOCKD_MAX_SESSIONS_PER_SOURCE: "20",
      LOCKD_SHUTDOWN_GRACE: "250ms",
      LOCKD_ADMIN_TOKEN: "env-token",
      LOCKD_ADMIN_TOKEN_FILE: "/env/file",
      LOCKD_LOG_LEVEL: "warn",
      LOCKD_DATA_DIR: "/env/data",
      LOCKD_TOKEN_BLOCK: "500",
      LOCKD_SHARD: "alpha",
      LOCKD_SHARDS: "alpha,beta",
      LOCKD_SHARDS_GENERATION: "1",
      LOCKD_TLS_CERT: "/env/cert.pem",
      LOCKD_TLS_KEY: "/env/key.pem",
      LOCKD_TLS_CLIENT_CA: "/env/ca.pem",
      LOCKD_OPS_TLS_CERT: "/env/ops-cert.pem",
      LOCKD_OPS_TLS_KEY: "/env/ops-key.pem",
      LOCKD_OPS_MAX_CONNECTIONS: "32",
      LOCKD_OPS_IDLE_TIMEOUT: "2s",
      LOCKD_COORDINATOR: "postgres://env@db/lockd",
      LOCKD_COORDINATOR_FILE: "/env/coordinator",
      LOCKD_SERVICE: "env-service",
      LOCKD_COORDINATOR_LEASE: "3s",
      LOCKD_ADVERTISE_OPS: "lockd-env.internal:8001",
      LOCKD_OPS_ALLOW_HOST: "ops.env.internal",
      LOCKD_MAX_LEASE: "30s",
      LOCKD_RECLAIM_MAX_LEASE: "20s",
    };
    const fromEnv = parse([], env);
    expect(fromEnv.options).toEqual({
      listen: { host: "127.0.0.1", port: 8000 },
      ops: { host: "127.0.0.1", port: 8001 },
      ioTimeout: 2000,
      maxSessions: 50,
      maxSessionsPerSource: 20,
      maxLease: 30_000,
      reclaimMaxLease: 20_000,
      shutdownGrace: 250,
      adminToken: "env-token",
      adminTokenFile: "/env/file",
      logLevel: "warn",
      dataDir: "/env/data",
      tokenBlock: 500,
      shard: "alpha",
      shards: "alpha,beta",
      shardsGeneration: 1,
      tlsCert: "/env/cert.pem",
      tlsKey: "/env/key.pem",
      tlsClientCa: "/env/ca.pem",
      opsTlsCert: "/env/ops-cert.pem",
      opsTlsKey: "/env/ops-key.pem",
      opsMaxConnections: 32,
      opsIdleTimeout: 2000,
      coordinator: "postgres://env@db/lockd",
      coordinatorFile: "/env/coordinator",
      service: "env-service",
      coordinatorLease: 3000,
      advertiseOps: { host: "lockd-env.internal", port: 8001 },
      opsAllowHost: ["ops.env.internal"],
    });
    expect(fromEnv.sources.ops).toBe("env");
    const flags = [
      "--listen", ":9000",
      "--ops=[::1]:9001",
      "--io-timeout", "1m",
      "--max-sessions", "7",
      "--max-sessions-per-source", "3",
      "--shutdown-grace", "0s",
      "--admin-token", "flag-token",
      "--admin-token-file", "/flag/file",
      "--log-level", "DEBUG",
      "--data-dir", "/flag/data",
      "--token-block", "7",
      "--shard", "beta",
      "--shards", "gen=2;alpha=10.0.0.1:7700;beta=10.0.0.2:7700",
      "--shards-generation", "2",
      "--tls-cert", "/flag/cert.pem",
      "--tls-key", "/flag/key.pem",
      "--tls-client-ca", "/flag/ca.pem",
      "--ops-tls-cert", "/flag/ops-cert.pem",
      "--ops-tls-key", "/flag/ops-key.pem",
      "--ops-max-connections", "16",
      "--ops-idle-timeout", "3s",
      "--coordinator", "postgres://flag@db/lockd",
      "--coordinator-file", "/flag/coordinator",
      "--service", "flag-service",
      "--coordinator-lease", "2s",
      "--advertise-ops", "[fd00::5]:9001",
      "--ops-allow-host", "a.example, b.example",
      "--max-lease", "1m",
      "--reclaim-max-lease", "10s",
    ];
    const fromFlags = parse(flags, env);
    expect(fromFlags.options).toEqual({
      listen: { host: "127.0.0.1", port: 9000 },
      ops: { host: "::1", port: 9001 },
      ioTimeout: 60_000,
      maxSessions: 7,
      maxSessionsPerSource: 3,
      maxLease: 60_000,
      reclaimMaxLease: 10_000,
      shutdownGrace: 0,
      adminToken: "flag-token",
      adminTokenFile: "/flag/file",
      logLevel: "debug",
      dataDir: "/flag/data",
      tokenBlock: 7,
      shard: "beta",
      shards: "gen=2;alpha=10.0.0.1:7700;beta=10.0.0.2:7700",
      shardsGeneration: 2,
      tlsCert: "/flag/cert.pem",
      tlsKey: "/flag/key.pem",
      tlsClientCa: "/flag/ca.pem",
      opsTlsCert: "/flag/ops-cert.pem",
      opsTlsKey: "/flag/ops-key.pem",
      opsMaxConnections: 16,
      opsIdleTimeout: 3000,
      coordinator: "postgres://flag@db/lockd",
      coordinatorFile: "/flag/coordinator",
      service: "flag-service",
      coordinatorLease: 2000,
      advertiseOps: { host: "fd00::5", port: 9001 },
      opsAllowHost: ["a.example", "b.example"],
    });
    expect(Object.values(fromFlags.sources).every((s) => s === "flag")).toBe(true);
    expect(parse(["--max-sessions", "auto"], env).options.maxSessions).toBeNull();
  });

  test("one clear line per bad value, naming the flag or the variable it came from", () => {
    const bad: [string[], Record<string, string>, RegExp][] = [
      [["--listen", "nowhere"], {}, /^--listen: "nowhere" is not HOST:PORT/],
      [["--ops", "1.2.3.4:99999"], {}, /^--ops: "1.2.3.4:99999" is not HOST:PORT/],
      [[], { LOCKD_OPS: "x" }, /^--ops \(from LOCKD_OPS\): "x" is not HOST:PORT/],
      [["--io-timeout", "5 parsecs"], {}, /^--io-timeout: "5 parsecs" is not a duration/],
      [["--io-timeout", "0ms"], {}, /^--io-timeout: 0ms is out of range/],
      [["--shutdown-grace", "2h"], {}, /^--shutdown-grace: 2h is out of range/],
      // Bun.serve counts its idle timeout in whole seconds, at most 255.
      [["--ops-idle-timeout", "500ms"], {}, /^--ops-idle-timeout: 500ms is out of range/],
      [["--ops-idle-timeout", "5m"], {}, /^--ops-idle-timeout: 5m is out of range/],
      [[], { LOCKD_SHUTDOWN_GRACE: "soon" }, /^--shutdown-grace \(from LOCKD_SHUTDOWN_GRACE\): "soon" is not a duration/],
      [["--max-sessions", "0"], {}, /^--max-sessions: "0" is not a whole number .* \(or auto\)/],
      [["--max-sessions", "many"], {}, /^--max-sessions: "many"/],
      [["--log-level", "chatty"], {}, /^--log-level: "chatty" is not a log level \(one of debug, info, warn, error\)/],
      [["--admin-token", "has space"], {}, /^--admin-token: the admin token must be non-empty printable ASCII/],
      [["--admin-token-file", " "], {}, /^--admin-token-file: an empty path/],
      [["--nope", "1"], {}, /^unknown option --nope$/],
      [["--ops"], {}, /^--ops needs a value/],
      [["--ops", "--listen", ":1"], {}, /^--ops needs a value/], // a flag is never taken as a value
    ];
    for (const [argv, env, message] of bad) {
      let error: unknown;
      try {
        parse(argv, env);
      } catch (e) {
        error = e;
      }
      expect(error, argv.join(" ")).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).problems, argv.join(" ")).toHaveLength(1);
      expect((error as ConfigError).problems[0]).toMatch(message);
    }
    const many = (() => {
      try {
        parse(["--listen", "x", "--io-timeout", "y", "--log-level", "z"]);
      } catch (e) {
        return e as ConfigError;
      }
    })();
    expect(many!.problems).toHaveLength(3);
  });

  test("serve --help documents every option with its default and env name", () => {
    for (const spec of Object.values(SERVE_OPTIONS)) {
      const lines = SERVE_HELP.split("\n");
      const at = lines.findIndex((l) => l.trimStart().startsWith(`${spec.flag} `));
      expect(at, spec.flag).toBeGreaterThanOrEqual(0);
      // A flag too long for the column has its text on the next line.
      const line = /\S\s{2,}\S/.test(lines[at]!.trim()) ? lines[at]! : `${lines[at]} ${lines[at + 1]}`;
      if ("default" in spec) expect(line).toContain(`default ${spec.default}`);
      expect(line).toContain(`env ${spec.env}`);
    }
  });

  test("status and admin verbs take --ops and the token from the same variables", () => {
    expect(parseOptions(STATUS_OPTIONS, [], { LOCKD_OPS: "127.0.0.1:1" }).options.ops).toEqual({ generation: 0, shards: [{ name: "", addresses: [{ host: "127.0.0.1", port: 1 }] }] });
    const admin = parseOptions(ADMIN_OPTIONS, ["--ops", "127.0.0.1:2"], { LOCKD_OPS: "127.0.0.1:1", LOCKD_ADMIN_TOKEN: "t" });
    expect(admin.options.ops).toEqual({ generation: 0, shards: [{ name: "", addresses: [{ host: "127.0.0.1", port: 2 }] }] });
    // The map LOCKD_OPS holds for lockd status is one the admin verbs read too.
    const mapped = parseOptions(ADMIN_OPTIONS, [], { LOCKD_OPS: "alpha=127.0.0.1:1;beta=127.0.0.1:2", LOCKD_ADMIN_TOKEN: "t" });
    expect(mapped.options.ops.shards.map((shard) => shard.name)).toEqual(["alpha", "beta"]);
    expect(admin.options.adminToken).toBe("t");
  });
});

describe("lockd serve with bad configuration (child process)", () => {
  test("every bad value is one line on stderr and the exit is 64", async () => {
    await using child = ChildServer.spawn(["serve", "--listen", "x", "--io-timeout", "5x"], { LOCKD_LOG_LEVEL: "loud" });
    expect(await child.exit()).toBe(64);
    expect(child.raw.sort()).toEqual([
      'lockd serve: --io-timeout: "5x" is not a duration (examples: 250ms, 5s, 2m)',
      'lockd serve: --listen: "x" is not HOST:PORT: missing :PORT (example: 127.0.0.1:7700)',
      'lockd serve: --log-level (from LOCKD_LOG_LEVEL): "loud" is not a log level (one of debug, info, warn, error)',
    ]);
  });

  test("an unreadable admin token file is 64 with the path and the reason", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lockd-ops-"));
    try {
      const missing = join(dir, "missing");
      await using child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0"], { LOCKD_ADMIN_TOKEN_FILE: missing });
      expect(await child.exit()).toBe(64);
      expect(child.raw).toEqual([`lockd serve: --admin-token-file (from LOCKD_ADMIN_TOKEN_FILE): cannot read ${missing}: ENOENT`]);

      const both = join(dir, "token");
      writeFileSync(both, "abc\n");
      await using child2 = ChildServer.spawn(["serve", "--admin-token", "x", "--admin-token-file", both]);
      expect(await child2.exit()).toBe(64);
      expect(child2.raw).toEqual(["lockd serve: --admin-token and --admin-token-file are both set: give one"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("an ops address in use is 69 and names --ops", async () => {
    const taken = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    try {
      await using child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", `127.0.0.1:${taken.port}`]);
      expect(await child.exit()).toBe(69);
      expect(child.raw.join("\n")).toContain(`cannot listen on 127.0.0.1:${taken.port} (--ops): address in use?`);
    } finally {
      taken.stop(true);
    }
  });

  test("a lock address in use is 69 and says which address and why, like --ops", async () => {
    const taken = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    try {
      await using child = ChildServer.spawn(["serve", "--listen", `127.0.0.1:${taken.port}`, "--ops", "127.0.0.1:0"]);
      expect(await child.exit()).toBe(69);
      expect(child.raw.join("\n")).toContain(`cannot listen on 127.0.0.1:${taken.port} (--listen): address in use?`);
    } finally {
      taken.stop(true);
    }
  });

  test("a token from a file is accepted and the startup line says where it came from", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lockd-ops-"));
    try {
      const file = join(dir, "token");
      writeFileSync(file, "tok-123\n");
      await using child = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_ADMIN_TOKEN_FILE: file });
      const start = await child.event("server.listening");
      expect(start.adminToken).toBe(`file ${file}`);
      expect(start.version).toMatch(/^\d+\.\d+\.\d+/);
      const { opsPort } = await child.addresses();
      const ok = await fetch(`http://127.0.0.1:${opsPort}/v1/sessions/1/kick`, { method: "POST", headers: { authorization: "Bearer tok-123" } });
      expect(ok.status).toBe(404); // authorized; there is no session 1
      child.proc.kill("SIGTERM");
      expect(await child.exit()).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
