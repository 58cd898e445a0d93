/// <reference lib="dom" />
// The operator's page (/ui) during a lock-delay, in chromium:
// docs/operations.md ("The operator's page", and "The lock-delay", "Where it
// shows") says a banner says so while a lock-delay holds names back, with
// what the `lockd status` line says (how long is left, and for which names).
// The ops server runs in this process with a lock-delay given by hand (the
// real ones are in test/coordinator/lock-delay.test.ts and
// test/faults/restart-delay.test.ts). Every wait is playwright's, bounded.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";
import type { DelayView } from "../../src/core/delay.ts";
import { Logger } from "../../src/log.ts";
import { AdminAuth } from "../../src/server/admin.ts";
import { OpsServer } from "../../src/server/ops.ts";
import { BOARD } from "../../src/server/ui/board.ts";
import type { LockServer } from "../../src/server/server.ts";
import { startServer } from "../helpers/wire.ts";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", Bun.which("chromium") ?? ""].find((p) => p !== "" && existsSync(p));
if (CHROMIUM === undefined) {
  console.warn("test/ui/lock-delay-banner.test.ts: skipped: no chromium found (apt-get install chromium; .ci/run installs it)");
}
const WAIT = 15_000;

describe.skipIf(CHROMIUM === undefined)("the operator's page during a lock-delay, in chromium", () => {
  let server: LockServer;
  let ops: OpsServer;
  let browser: Browser;
  let delay: DelayView | null = { why: "restart", remainingMs: 12_300, names: 0, everyName: true };

  beforeAll(async () => {
    server = startServer();
    ops = new OpsServer({
      hostname: "127.0.0.1",
      port: 0,
      server,
      shard: { shard: null, shards: [], generation: 0 },
      auth: new AdminAuth("lock-delay-banner-token"),
      log: new Logger("error", () => {}),
      version: "0.0.0-test",
      isReady: () => true,
      lockDelay: () => delay,
    });
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: ["--no-sandbox"], headless: true });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await ops?.stop();
    await server?.stop();
  });

  test("a banner says that a lock-delay holds names back, and how long is left; it goes when the delay is over", async () => {
    // The page's data carries it (this part holds) ...
    const board = (await (await fetch(`http://127.0.0.1:${ops.port}${BOARD}`)).json()) as { lockDelay?: DelayView | null };
    expect(board.lockDelay).toEqual(delay);
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.setDefaultTimeout(WAIT);
    try {
      expect((await page.goto(`http://127.0.0.1:${ops.port}/ui`))?.status()).toBe(200);
      await page.waitForSelector("#locks-section", { state: "visible" });
      // ... and the page shows it: some visible text naming the lock-delay and the time left.
      await page.waitForFunction(() => /lock-delay/i.test(document.body.innerText) && /12\.3 s/.test(document.body.innerText), null, { timeout: WAIT });
      delay = null;
      await page.waitForFunction(() => !/lock-delay/i.test(document.body.innerText), null, { timeout: WAIT });
    } finally {
      await page.close();
    }
  }, 60_000);
});
