// `lockd run --server A,B` that reaches neither within its budget: the
// final error names what each address met, not only the last one tried.
import { expect, test } from "bun:test";
import { runCli } from "../fixtures/ops-child.ts";

test("run --server A,B, both refusing: exit 69 and a line naming each address and what it met", async () => {
  // Ports 1 and 2 of loopback: nothing listens there (privileged, never a test's).
  const { code, err } = await runCli(["run", "--server", "127.0.0.1:1,127.0.0.1:2", "--wait", "1s", "jobs/each", "--", "true"]);
  expect(code).toBe(69);
  const line = err.split("\n").find((l) => l.startsWith("lockd run: what each server met: "));
  expect(line).toBeDefined();
  expect(line).toContain("cannot connect to 127.0.0.1:1: connection refused");
  expect(line).toContain("cannot connect to 127.0.0.1:2: connection refused");
});

test("run --server A alone: no per-address line (the error already names it)", async () => {
  const { code, err } = await runCli(["run", "--server", "127.0.0.1:1", "--wait", "1s", "jobs/each", "--", "true"]);
  expect(code).toBe(69);
  expect(err).toContain("127.0.0.1:1");
  expect(err).not.toContain("what each server met");
});
