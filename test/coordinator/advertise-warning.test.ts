/**
 * A coordinated instance whose ops listener binds a wildcard address and
 * that has no --advertise-ops writes no ops address into the row: it says
 * so once, at start, naming the flag (its standbys could not say where it
 * is). The row is in memory (memory-store.ts); the real processes are in
 * failover.test.ts.
 */
import { DAEMON_WORDS } from "../../src/cli/words.ts";
import { expect, test } from "bun:test";
import { Logger } from "../../src/log/logger.ts";
import { Daemon } from "../../src/server/daemon.ts";
import { MemoryRow, MemoryStore } from "./memory-store.ts";

async function started(opsHost: string, advertiseOps?: string): Promise<{ logs: Record<string, unknown>[]; holder: string }> {
  const shared = new MemoryRow();
  const logs: Record<string, unknown>[] = [];
  const daemon = new Daemon({
    listen: { host: "127.0.0.1", port: 0 },
    // A wildcard bind, port 0: nothing connects to it here.
    ops: { host: opsHost, port: 0 },
    ioTimeoutMs: 5000,
    shutdownGraceMs: 0,
    adminToken: null,
    log: new Logger("info", (line) => logs.push(JSON.parse(line))),
    version: "0.0.0-test",
    words: DAEMON_WORDS, // as lockd serve gives them: the messages name the flag
    ...(advertiseOps === undefined ? {} : { advertiseOps }),
    coordinator: { store: new MemoryStore(shared, "db1/pid-1/aaaa", 2000, 1000), service: "svc", instance: "db1/pid-1/aaaa", leaseMs: 2000, block: 1000 },
  });
  try {
    await daemon.roles!.started;
    expect(daemon.roles!.role).toBe("active");
    return { logs, holder: shared.row!.holder };
  } finally {
    await daemon.close();
  }
}

test("a wildcard --ops without --advertise-ops: one warning at start naming the flag, and no ops= in the row", async () => {
  const { logs, holder } = await started("0.0.0.0");
  const warnings = logs.filter((l) => l.event === "failover.advertise_none");
  expect(warnings).toHaveLength(1);
  expect(warnings[0]!.level).toBe("warn");
  expect(warnings[0]!.msg).toContain("--advertise-ops"); // the sentence names the flag that fixes it
  expect(String(warnings[0]!.ops)).toMatch(/^0\.0\.0\.0:\d+$/);
  expect(holder).toBe("db1/pid-1/aaaa");
});

test("a loopback --ops without --advertise-ops is advertised (right on one machine), with one warning at start", async () => {
  const { logs, holder } = await started("127.0.0.1");
  expect(holder).toMatch(/^db1\/pid-1\/aaaa ops=127\.0\.0\.1:\d+$/);
  const warnings = logs.filter((l) => l.event === "failover.advertise_loopback");
  expect(warnings).toHaveLength(1);
  expect(warnings[0]!.level).toBe("warn");
  expect(warnings[0]!.msg).toContain("--advertise-ops");
  expect(String(warnings[0]!.ops)).toMatch(/^127\.0\.0\.1:\d+$/);
  // An explicit --advertise-ops is the operator's word, loopback or not.
  expect((await started("127.0.0.1", "127.0.0.1:7701")).logs.filter((l) => l.event === "failover.advertise_loopback")).toEqual([]);
});

test("no warning with --advertise-ops, or with an ops listener on a host others can name", async () => {
  const advertised = await started("0.0.0.0", "lockd-1.internal:7701");
  expect(advertised.logs.filter((l) => l.event === "failover.advertise_none")).toEqual([]);
  expect(advertised.holder).toBe("db1/pid-1/aaaa ops=lockd-1.internal:7701");
  const bound = await started("127.0.0.1");
  expect(bound.logs.filter((l) => l.event === "failover.advertise_none")).toEqual([]);
  expect(bound.holder).toMatch(/^db1\/pid-1\/aaaa ops=127\.0\.0\.1:\d+$/);
});
