// One grammar for every address a user types: the library's `servers`,
// lockd run --server, status/admin --ops, serve --listen, and LOCKD_* variables.
import { describe, expect, test } from "bun:test";
import { AddressError, DEFAULT_LOCK_ADDRESS, DEFAULT_OPS_ADDRESS, formatAddress, parseAddress, parseAddressList } from "../src/net/address.ts";
import { parseOptions } from "../src/cli/options/argv.ts";
import { ADMIN_OPTIONS, RUN_OPTIONS, SERVE_OPTIONS, STATUS_OPTIONS } from "../src/cli/config.ts";
import { DEFAULT_SERVER, LockClient } from "../src/client/index.ts";

function problem(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(AddressError);
    expect(error).toBeInstanceOf(RangeError);
    return (error as Error).message;
  }
  throw new Error("no error");
}

describe("parseAddress / parseAddressList", () => {
  test("host names, IPv4, bracketed IPv6, :PORT, spaces around elements", () => {
    expect(parseAddress("lockd-1.example.com:7700")).toEqual({ host: "lockd-1.example.com", port: 7700 });
    expect(parseAddress("10.0.0.1:1")).toEqual({ host: "10.0.0.1", port: 1 });
    expect(parseAddress("[::1]:7700")).toEqual({ host: "::1", port: 7700 });
    expect(parseAddress("[fd00::2:1]:65535")).toEqual({ host: "fd00::2:1", port: 65535 });
    expect(parseAddress(":7700")).toEqual({ host: "127.0.0.1", port: 7700 });
    expect(parseAddressList(" a:1 , [::1]:2,b.c:3 ")).toEqual([
      { host: "a", port: 1 },
      { host: "::1", port: 2 },
      { host: "b.c", port: 3 },
    ]);
    expect(parseAddressList(["a:1,b:2", "c:3"]).map(formatAddress)).toEqual(["a:1", "b:2", "c:3"]);
    expect(formatAddress({ host: "::1", port: 9 })).toBe("[::1]:9");
    expect(parseAddress(formatAddress({ host: "fe80::1", port: 9 }))).toEqual({ host: "fe80::1", port: 9 });
  });

  test("each kind of bad element gets its own reason, and a list names the element", () => {
    expect(problem(() => parseAddress("localhost"))).toContain("missing :PORT");
    expect(problem(() => parseAddress("localhost:"))).toContain("missing the port");
    expect(problem(() => parseAddress("h:70000"))).toContain("out of range 1..65535");
    expect(problem(() => parseAddress("h:0"))).toContain("out of range 1..65535");
    expect(parseAddress("h:0", { allowPortZero: true }).port).toBe(0);
    expect(problem(() => parseAddress("h:http"))).toContain(`port "http" is not a number`);
    expect(problem(() => parseAddress("::1:7700"))).toContain("IPv6 address goes in brackets");
    expect(problem(() => parseAddress("[::1:7700"))).toContain("without ]");
    expect(problem(() => parseAddress("[nope]:1"))).toContain("not an IPv6 address");
    expect(problem(() => parseAddress("300.1.1.1:1"))).toContain("not a host name or IP address");
    expect(problem(() => parseAddress("bad host:1"))).toContain("not a host name or IP address");
    expect(problem(() => parseAddress("a:1,b:2"))).toContain("one address expected here, not a list");
    const listError = problem(() => parseAddressList("a:1,b,c:3"));
    expect(listError).toContain(`element 2 of "a:1,b,c:3" ("b")`);
    expect(listError).toContain("missing :PORT");
    expect(problem(() => parseAddressList("a:1,,c:3"))).toContain("element 2");
    expect(problem(() => parseAddressList(""))).toContain("no address given");
    expect(problem(() => parseAddressList([]))).toContain("no address given");
  });
});

describe("the same grammar everywhere", () => {
  test("lockd run --server and LOCKD_SERVER take a list (the library always did)", () => {
    expect(parseOptions(RUN_OPTIONS, [], { LOCKD_SERVER: "a:1,[::1]:2" }).options.server).toEqual({
      generation: 0,
      shards: [{ name: "", addresses: [{ host: "a", port: 1 }, { host: "::1", port: 2 }] }],
    });
    expect(parseOptions(RUN_OPTIONS, ["--server", "a:1,b:2"], {}).options.server.shards[0]!.addresses).toHaveLength(2);
    expect(parseOptions(RUN_OPTIONS, ["--server", "gen=1;alpha=a:1;beta=b:2"], {}).options.server.shards.map((s) => s.name)).toEqual(["alpha", "beta"]);
  });

  test("status and the admin verbs take a list in --ops and LOCKD_OPS", () => {
    expect(parseOptions(STATUS_OPTIONS, ["--ops", "a:1,b:2"], {}).options.ops.shards[0]!.addresses).toHaveLength(2);
    expect(parseOptions(ADMIN_OPTIONS, [], { LOCKD_OPS: "a:1,b:2" }).options.ops.shards[0]!.addresses).toHaveLength(2);
  });

  test("serve listens on one address, port 0 allowed; a list there is an error that says so", () => {
    expect(parseOptions(SERVE_OPTIONS, ["--listen", "127.0.0.1:0", "--ops", ":0"], {}).options.ops).toEqual({ host: "127.0.0.1", port: 0 });
    expect(() => parseOptions(SERVE_OPTIONS, ["--listen", "a:1,b:2"], {})).toThrow("--listen: \"a:1,b:2\" is not HOST:PORT");
    expect(() => parseOptions(SERVE_OPTIONS, ["--listen", "a:1,b:2"], {})).toThrow("not a list");
  });

  test("a bad element is reported with the flag or variable and the element, by CLI and library alike", () => {
    expect(() => parseOptions(RUN_OPTIONS, [], { LOCKD_SERVER: "a:1,b" })).toThrow(`--server (from LOCKD_SERVER): element 2 of "a:1,b" ("b") is not HOST:PORT: missing :PORT`);
    expect(() => new LockClient({ servers: "a:1,b" })).toThrow(`element 2 of "a:1,b" ("b") is not HOST:PORT: missing :PORT`);
    expect(() => new LockClient({ servers: ["a:1", "[::1]"] })).toThrow(`element 2 of "a:1,[::1]" ("[::1]") is not HOST:PORT: missing :PORT after ]`);
  });
});

test("the default addresses are defined once (src/net/address.ts): serve, run, status and the library use them", () => {
  expect(DEFAULT_LOCK_ADDRESS).toBe("127.0.0.1:7700");
  expect(DEFAULT_OPS_ADDRESS).toBe("127.0.0.1:7701");
  expect(DEFAULT_SERVER).toBe(DEFAULT_LOCK_ADDRESS);
  expect([SERVE_OPTIONS.listen.default, RUN_OPTIONS.server.default]).toEqual([DEFAULT_LOCK_ADDRESS, DEFAULT_LOCK_ADDRESS]);
  expect([SERVE_OPTIONS.ops.default, STATUS_OPTIONS.ops.default, ADMIN_OPTIONS.ops.default]).toEqual([DEFAULT_OPS_ADDRESS, DEFAULT_OPS_ADDRESS, DEFAULT_OPS_ADDRESS]);
});
