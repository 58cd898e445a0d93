/**
 * docs/client.md promises that every ```ts example is a complete program:
 * run each one, with `lockd/client` pointed at the source, against a real
 * server named by LOCKD_SERVER. An example that no longer compiles or runs
 * fails here.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startServer } from "../helpers/wire.ts";
import { eventually } from "./fake-server.ts";

const ROOT = resolve(import.meta.dir, "../..");
const doc = await Bun.file(join(ROOT, "docs/client.md")).text();
const examples = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
const dir = mkdtempSync(join(tmpdir(), "lockd-docs-"));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("docs/client.md has runnable examples", () => {
  expect(examples.length).toBeGreaterThanOrEqual(4);
});

examples.forEach((source, i) => {
  const firstLine = source.split("\n").find((l) => l.includes("acquire") || l.includes("withLock")) ?? `#${i}`;
  test(`example ${i + 1}: ${firstLine.trim().slice(0, 60)}`, async () => {
    await using server = startServer();
    const file = join(dir, `example-${i}.ts`);
    writeFileSync(file, source.replaceAll('"lockd/client"', JSON.stringify(join(ROOT, "src/client/index.ts"))));
    const proc = Bun.spawn([process.execPath, file], {
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, LOCKD_SERVER: `127.0.0.1:${server.port}` },
    });
    const timer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
    try {
      const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      expect({ code, err }).toEqual({ code: 0, err: "" });
      expect(out.length).toBeGreaterThan(0);
    } finally {
      clearTimeout(timer);
    }
    // Every example cleans up after itself: nothing left held or queued.
    await eventually(() => server.engine.sessions.size === 0, 5000, "every session of the example to end");
  }, 20_000);
});
