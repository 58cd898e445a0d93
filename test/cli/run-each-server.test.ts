// `lockd run --server A,B` that reaches neither within its budget: the
// final error names what each address met, not only the last one tried.
import { expect, test } from "bun:test";
import { runCli } from "../fixtures/ops-child.ts";

test("run --server A,B, both refusing: exit 69 and the final error names each address and what it met", async () => {
  // Ports 1 and 2 of loopback: nothing listens there (privileged, never a test's).
  const { code, err } = await runCli(["run", "--server", "127.0.0.1:1,127.0.0.1:2", "--wait", "1s", "jobs/each", "--", "true"]);
  expect(code).toBe(69);
  const last = err.trimEnd().split("\n").at(-1)!;
  expect(last).toStartWith('lockd run: lock "jobs/each" was not granted within 1000 ms (lock server unavailable: ');
  expect(last).toContain("cannot connect to 127.0.0.1:1: connection refused");
  expect(last).toContain("cannot connect to 127.0.0.1:2: connection refused");
});

test("run --server A alone: no per-address line (the error already names it)", async () => {
  const { code, err } = await runCli(["run", "--server", "127.0.0.1:1", "--wait", "1s", "jobs/each", "--", "true"]);
  expect(code).toBe(69);
  expect(err).toContain("127.0.0.1:1");
  expect(err.match(/127\.0\.0\.1:1\b/g)?.length).toBe(2); // the retry line and the final error, each once
});
