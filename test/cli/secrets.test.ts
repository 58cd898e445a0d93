import { describe, expect, test } from "bun:test";
import { ConfigError } from "../../src/cli/options/argv.ts";
import { resolveAdminToken, resolveCoordinatorSource } from "../../src/cli/secrets.ts";

describe("values given inline or in a file", () => {
  test("flag beats env; file contents lose one trailing newline; both on one level is an error", () => {
    const files: Record<string, string> = { "/t": "from-file\n", "/empty": "\n", "/spaced": "a b\n" };
    const read = (path: string) => {
      if (path in files) return files[path]!;
      throw Object.assign(new Error("nope"), { code: "ENOENT" });
    };
    const r = (o: { adminToken?: string; adminTokenFile?: string }, s: Record<string, string>) =>
      resolveAdminToken({ adminToken: o.adminToken, adminTokenFile: o.adminTokenFile }, { adminToken: "unset", adminTokenFile: "unset", ...s } as never, read);
    expect(r({}, {}).token).toBeNull();
    expect(r({ adminToken: "x" }, { adminToken: "env" })).toEqual({ token: "x", from: "LOCKD_ADMIN_TOKEN" });
    expect(r({ adminTokenFile: "/t" }, { adminTokenFile: "env" }).token).toBe("from-file");
    expect(r({ adminToken: "x", adminTokenFile: "/t" }, { adminToken: "env", adminTokenFile: "flag" }).token).toBe("from-file");
    expect(r({ adminToken: "x", adminTokenFile: "/t" }, { adminToken: "flag", adminTokenFile: "env" }).token).toBe("x");
    expect(() => r({ adminToken: "x", adminTokenFile: "/t" }, { adminToken: "flag", adminTokenFile: "flag" })).toThrow(ConfigError);
    expect(() => r({ adminTokenFile: "/missing" }, { adminTokenFile: "flag" })).toThrow(/cannot read \/missing: ENOENT/);
    expect(() => r({ adminTokenFile: "/empty" }, { adminTokenFile: "flag" })).toThrow(/printable ASCII/);
    expect(() => r({ adminTokenFile: "/spaced" }, { adminTokenFile: "flag" })).toThrow(/printable ASCII/);
  });

  test("the coordinator URL follows the same rule, with its own names", () => {
    const read = (path: string) => (path === "/url" ? "postgres://db/lockd\n" : "two\nlines\n");
    const r = (o: { coordinator?: string; coordinatorFile?: string }, s: Record<string, string>) =>
      resolveCoordinatorSource({ coordinator: o.coordinator, coordinatorFile: o.coordinatorFile }, { coordinator: "unset", coordinatorFile: "unset", ...s } as never, read);
    expect(r({}, {})).toBeNull();
    expect(r({ coordinatorFile: "/url" }, { coordinatorFile: "env" })).toEqual({ url: "postgres://db/lockd", from: "LOCKD_COORDINATOR_FILE" });
    expect(r({ coordinator: "postgres://x/y", coordinatorFile: "/url" }, { coordinator: "flag", coordinatorFile: "env" })).toEqual({ url: "postgres://x/y", from: "--coordinator" });
    expect(() => r({ coordinator: "a", coordinatorFile: "/url" }, { coordinator: "env", coordinatorFile: "env" })).toThrow("LOCKD_COORDINATOR and LOCKD_COORDINATOR_FILE are both set: give one");
    expect(() => r({ coordinatorFile: "/bad" }, { coordinatorFile: "flag" })).toThrow("--coordinator-file: /bad must hold one URL on one line");
  });
});
