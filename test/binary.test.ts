// The single binary: `npm run build` (bun build --compile) into a temp dir,
// then a smoke test of that file alone, run from another directory: serve,
// a second server refused on the same data directory, a claim and a pushed
// handover with the client library, `status`, the embedded /ui page, `run`,
// SIGTERM, exit 0.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LockClient } from "../src/client/index.ts";

const ROOT = join(import.meta.dir, "..");
let dir: string;
let binary: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "lockd-binary-"));
  binary = join(dir, "lockd");
  const build = Bun.spawn(["npm", "run", "--silent", "build", "--", "--outfile", binary], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  const [code, err] = await Promise.all([build.exited, new Response(build.stderr).text()]);
  if (code !== 0) throw new Error(`npm run build failed (${code}): ${err}`);
}, 120_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Read a stream to its end in the background; `line(pred)` resolves with the first matching line. */
function collect(stream: ReadableStream<Uint8Array>) {
  let text = "";
  let wake: () => void = () => {};
  const done = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      text += decoder.decode(chunk, { stream: true });
      wake();
    }
    wake();
  })();
  return {
    async line(match: (line: string) => boolean, ms = 10_000): Promise<string> {
      const deadline = performance.now() + ms;
      let ended = false;
      void done.then(() => (ended = true));
      for (;;) {
        const found = text.split("\n").find(match);
        if (found !== undefined) return found;
        if (ended || performance.now() > deadline) throw new Error(`no such line; got: ${text}`);
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, 100);
        });
      }
    },
  };
}

test("the compiled binary serves, hands over, runs, reports and stops cleanly", async () => {
  expect(statSync(binary).mode & 0o111).not.toBe(0);
  const cwd = mkdtempSync(join(tmpdir(), "lockd-binary-cwd-")); // not the repository: nothing beside the binary
  const server = Bun.spawn(
    [binary, "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--data-dir", join(cwd, "data")],
    { cwd, stdout: "ignore", stderr: "pipe", env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } },
  );
  try {
    const stderr = collect(server.stderr);
    const start = JSON.parse(await stderr.line((l) => l.includes(`"event":"server.listening"`)));
    const address = start.listen as string;
    const ops = start.ops as string;

    // The data directory lock (flock through bun:ffi) works in the binary: a second server on it refuses.
    const twin = Bun.spawnSync([binary, "serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--data-dir", join(cwd, "data")], {
      cwd,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      timeout: 10_000,
    });
    expect(twin.exitCode).toBe(75);
    expect(twin.stderr.toString()).toBe(
      `lockd serve: the data directory ${join(cwd, "data")} is in use by another process (pid ${server.pid}): one data directory serves one lockd server at a time\n`,
    );

    const client = new LockClient({ servers: address });
    const first = await client.acquire("smoke", { lease: 2000 });
    const waiting = client.acquire("smoke", { lease: 2000 });
    await first.release();
    const second = await waiting; // pushed by the server when the first connection closed
    expect(second.token).toBeGreaterThan(first.token);

    const status = Bun.spawnSync([binary, "status", "--ops", ops, "--json"], { cwd });
    expect(status.exitCode).toBe(0);
    expect(JSON.parse(status.stdout.toString()).locks[0].name).toBe("smoke");
    await second.release();

    // The operator's page is embedded: the binary serves its three files as they are in the tree.
    for (const [path, file] of [["/ui", "index.html"], ["/ui/ops-ui.js", "ops-ui.js"], ["/ui/ops-ui.css", "ops-ui.css"]] as const) {
      const page = await fetch(`http://${ops}${path}`, { signal: AbortSignal.timeout(10_000) });
      expect(page.status).toBe(200);
      expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
      expect(await page.text()).toBe(readFileSync(join(ROOT, "src/ops/ui", file), "utf8"));
    }
    expect(start.ui).toBe(`http://${ops}/ui`);

    const run = Bun.spawnSync([binary, "run", "--server", address, "smoke", "--", "sh", "-c", 'echo "token=$LOCKD_TOKEN lock=$LOCKD_LOCK"'], { cwd });
    expect(run.exitCode).toBe(0);
    expect(run.stdout.toString()).toMatch(/^token=\d+ lock=smoke\n$/);

    server.kill("SIGTERM");
    expect(await server.exited).toBe(0);
  } finally {
    server.kill("SIGKILL");
    await server.exited;
    rmSync(cwd, { recursive: true, force: true });
  }
});
