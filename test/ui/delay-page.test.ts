/// <reference lib="dom" />
// The operator's page (/ui) during a lock-delay, in chromium (Debian's, via
// playwright-core), against a real `lockd serve --data-dir` child whose
// data directory's lease record (<data-dir>/leases) says the last run did
// not stop cleanly, or stopped cleanly holding some names. The banner says
// what /readyz's lockDelay says, counts down between polls (also while no
// poll is answered), follows the delay from every name to the published
// names and goes when the delay is over. A failover's delays (takeovers need
// PostgreSQL: test/coordinator/) are shown by an ops server in this process
// with its lockDelay set by hand. Every wait is on an event: a log
// line, a protocol frame, or a DOM condition playwright waits for (bounded
// by its timeout).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, chromium, type Page, type Route } from "playwright-core";
import type { DelayView } from "../../src/core/delay.ts";
import { Logger } from "../../src/log/logger.ts";
import { FrameType } from "../../src/protocol/index.ts";
import { AdminAuth } from "../../src/ops/admin.ts";
import { type LeaseState, writeLeases } from "../../src/tokens/leases.ts";
import { OpsServer } from "../../src/ops/server.ts";
import type { LockDelayView } from "../../src/ops/sources.ts";
import type { CoordinatorMetrics, RoleView } from "../../src/failover/shell.ts";
import { ChildServer } from "../fixtures/ops-child.ts";
import { startServer, WirePeer } from "../helpers/wire.ts";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", Bun.which("chromium") ?? ""].find((p) => p !== "" && existsSync(p));
if (CHROMIUM === undefined) {
  console.warn("test/ui/delay-page.test.ts: skipped: no chromium found (apt-get install chromium; .ci/run installs it)");
}
const SHOTS = join(import.meta.dir, "screenshots");
/** playwright's bound on each wait for the page: generous, for a loaded machine. */
const WAIT = 15_000;

/** The seconds a banner's text says are left ("... for 7.9 s more ..."), or NaN. */
const secondsIn = (text: string) => Number(/ (\d+\.\d) s more/.exec(text)?.[1] ?? Number.NaN);

describe.skipIf(CHROMIUM === undefined)("the operator's page during a lock-delay, in chromium", () => {
  let browser: Browser;
  const dirs: string[] = [];
  const peers: WirePeer[] = [];

  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: ["--no-sandbox"], headless: true });
    mkdirSync(SHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    for (const peer of peers.splice(0)) peer.terminate();
    await browser?.close();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  /** `lockd serve --data-dir` on a directory whose lease record is `leases`: its startup line and ops base URL. */
  async function serveAfter(leases: LeaseState): Promise<{ server: ChildServer; base: string; listenPort: number; start: Record<string, any> }> {
    const dir = mkdtempSync(join(tmpdir(), "lockd-delay-page-"));
    dirs.push(dir);
    writeLeases(dir, leases);
    const server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s", "--data-dir", dir]);
    const start = await server.line("lockd listening", 30_000);
    return { server, base: String(start.ui).replace(/\/ui$/, ""), listenPort: Number(String(start.listen).split(":").pop()), start };
  }

  /** A page on /ui that records page errors and CSP violations. */
  async function open(base: string): Promise<{ page: Page; errors: string[] }> {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.setDefaultTimeout(WAIT);
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    page.on("console", (message) => {
      if (message.type() === "error" && message.text().includes("Content Security Policy")) errors.push(message.text());
    });
    expect((await page.goto(`${base}/ui`))?.status()).toBe(200);
    await page.waitForFunction(() => document.getElementById("status")?.textContent?.startsWith("live"));
    return { page, errors };
  }

  test("after a run that did not stop cleanly: a banner for every name, counted down between polls (also with none answered), gone when the delay ends", async () => {
    // The last run granted leases up to 10 s and was killed: every name waits 0.82 x 10 s from this start.
    const { server, base, start } = await serveAfter({ maxLeaseMs: 10_000, carryLeaseMs: 0, clean: false, held: null });
    await using _ = server;
    expect(start.lastStop).toBe("not clean");
    expect(start.lockDelayMs).toBeGreaterThan(8_000);
    const { page, errors } = await open(base);

    await page.waitForSelector("#lock-delay", { state: "visible" });
    const first = (await page.textContent("#lock-delay-text"))!;
    expect(first).toMatch(
      /^Lock-delay: no grant of any name for \d\.\d s more: holders from before this server's restart may still believe they hold their locks \(its last stop was not clean\)$/,
    );
    expect(await page.getAttribute("#lock-delay", "data-why")).toBe("restart");
    // What /readyz says now is at most what the page said a moment ago (it counts down too).
    const ready = (await (await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(10_000) })).json()) as { lockDelay: any };
    expect(ready.lockDelay).toMatchObject({ why: "restart", names: 0, everyName: true });
    expect(ready.lockDelay.remainingMs).toBeLessThanOrEqual(secondsIn(first) * 1000 + 100);
    await page.screenshot({ path: join(SHOTS, "lock-delay.png"), fullPage: false });

    // No poll answered from now on: the banner counts down by itself.
    const held: Route[] = [];
    let holding = true;
    await page.route("**/ui/v1/board*", (route) => void (holding ? held.push(route) : route.continue()));
    const before = secondsIn((await page.textContent("#lock-delay-text"))!);
    await page.waitForFunction(
      (s) => {
        const m = / (\d+\.\d) s more/.exec(document.getElementById("lock-delay-text")?.textContent ?? "");
        return m !== null && Number(m[1]) <= s - 0.5;
      },
      before,
    );
    // Still some left, and less than before: no answer came in between.
    const during = secondsIn((await page.textContent("#lock-delay-text"))!);
    expect(during).toBeGreaterThan(0);
    expect(during).toBeLessThan(before);
    // Answered again (the route stays, passing every request on: unrouting could race the held ones).
    holding = false;
    for (const route of held.splice(0)) await route.continue();

    // The delay ends: the server says so, and the banner goes at the next poll.
    await server.line("lock-delay over: every name may be granted", 30_000);
    await page.waitForSelector("#lock-delay", { state: "hidden", timeout: 30_000 });
    expect(await page.textContent("#lock-delay-text")).toBe("");
    expect(await page.isVisible("#locks-section")).toBe(true);
    expect(errors).toEqual([]);
    await page.close();
  }, 90_000);

  test("after a clean stop: a banner for the names it published only, one fewer as each is granted, then gone", async () => {
    // The last run stopped cleanly holding two names: "jobs/a" (lease 5 s, waits 4.1 s) and "jobs/b" (10 s, 8.2 s).
    const { server, base, listenPort, start } = await serveAfter({ maxLeaseMs: 10_000, carryLeaseMs: 0, clean: true, held: [["jobs/a", 5_000], ["jobs/b", 10_000]] });
    await using _ = server;
    expect(start.lastStop).toBe("clean");
    expect(start.lockDelayNames).toBe(2);
    // Another name is granted at once; a published one queues.
    const other = await WirePeer.claim(listenPort, "jobs/other", 5_000);
    peers.push(other);
    expect(other.frames[0]!.type).toBe(FrameType.ACQUIRED);
    const a = await WirePeer.claim(listenPort, "jobs/a", 5_000, { owner: "next-holder" });
    peers.push(a);
    expect(a.frames[0]!.type).toBe(FrameType.WAITING);

    const { page, errors } = await open(base);
    await page.waitForSelector("#lock-delay", { state: "visible" });
    expect(await page.textContent("#lock-delay-text")).toMatch(
      /^Lock-delay: 2 names held at the last clean stop are not granted for up to \d\.\d s more: their holders may still believe they hold them \(every other name is granted\)$/,
    );
    expect(await page.getAttribute("#lock-delay", "data-why")).toBe("clean-restart");
    await page.screenshot({ path: join(SHOTS, "lock-delay-names.png"), fullPage: false });

    // jobs/a's wait ends: its waiter is granted by a push, and the banner names one.
    await a.until(() => a.frames.find((f) => f.type === FrameType.ACQUIRED), 20_000, "jobs/a's grant");
    await page.waitForFunction(() => document.getElementById("lock-delay-text")?.textContent?.startsWith("Lock-delay: 1 name held at the last clean stop is not granted for "));
    expect(await page.textContent("#lock-delay-text")).toMatch(/its holder may still believe it holds it \(every other name is granted\)$/);

    await page.waitForSelector("#lock-delay", { state: "hidden", timeout: 30_000 });
    expect(errors).toEqual([]);
    await page.close();
  }, 90_000);

  test("a failover's delays (the ops server in this process, its lockDelay set by hand): the takeover's wording, a clean stop's, and server text shown as text", async () => {
    const server = startServer();
    let delay: DelayView | null = { why: "takeover", remainingMs: 12_300, names: 0, everyName: true };
    const role: RoleView = { role: "active", epoch: 4, service: "orders", instance: "test", active: null, activeOps: null };
    const ops = new OpsServer({
      hostname: "127.0.0.1",
      port: 0,
      locks: server.locks,
      roles: { view: () => role, metrics: () => ({ ...role }) as CoordinatorMetrics },
      auth: new AdminAuth("delay-page-token"),
      log: new Logger("error", () => {}),
      version: "0.0.0-test",
      isReady: () => true,
      lockDelay: () => delay,
    });
    try {
      const { page, errors } = await open(`http://127.0.0.1:${ops.port}`);
      const text = () => page.textContent("#lock-delay-text");
      await page.waitForSelector("#lock-delay", { state: "visible" });
      expect(await text()).toMatch(
        /^Lock-delay: no grant of any name for 1[12]\.\d s more: an earlier active's holders may still believe they hold their locks \(after a takeover\)$/,
      );
      // A takeover of a released row whose active was still in its own delay: every name, and the published ones maybe longer.
      delay = { why: "released", remainingMs: 75_000, names: 0, everyName: true };
      await page.waitForFunction(() => document.getElementById("lock-delay-text")?.textContent?.includes("(after a takeover from a clean stop)"));
      expect(await text()).toMatch(/^Lock-delay: no grant of any name for up to 1 min 1[45] s more: an earlier active's holders may/);
      delay = { why: "released", remainingMs: 4_100, names: 1_234, everyName: false };
      await page.waitForFunction(() => document.getElementById("lock-delay-text")?.textContent?.startsWith("Lock-delay: 1,234 names held at the earlier active's clean stop are not granted for up to "));
      // A why this page does not know (a newer server), with markup: a plain sentence, nothing from it as markup.
      delay = { why: "<img src=x onerror=alert(1)>" as DelayView["why"], remainingMs: 3_000, names: 0, everyName: true };
      await page.waitForFunction(() => document.getElementById("lock-delay")?.dataset.why?.startsWith("<img"));
      expect(await text()).toMatch(/^Lock-delay: no grant of any name for up to \d\.\d s more: an earlier server's holders may still believe they hold their locks$/);
      expect(await page.$$("#lock-delay img")).toEqual([]);
      delay = null;
      await page.waitForSelector("#lock-delay", { state: "hidden" });
      expect(errors).toEqual([]);
      await page.close();
    } finally {
      await ops.stop();
      await server.stop();
    }
  }, 60_000);

  test("a reclaim grace (the ops server in this process, its lockDelay set by hand): the banner adds how many holders are back, and goes with the delay", async () => {
    const server = startServer();
    let delay: LockDelayView | null = {
      why: "clean-restart",
      remainingMs: 8_200,
      names: 2,
      everyName: false,
      reclaim: { remainingMs: 4_100, published: 3, reclaimed: 1, unclaimedNames: ["b"], unclaimedNameCount: 1 },
    };
    const ops = new OpsServer({
      hostname: "127.0.0.1",
      port: 0,
      locks: server.locks,
      auth: new AdminAuth("delay-page-token"),
      log: new Logger("error", () => {}),
      version: "0.0.0-test",
      isReady: () => true,
      lockDelay: () => delay,
    });
    try {
      const { page, errors } = await open(`http://127.0.0.1:${ops.port}`);
      const text = () => page.textContent("#lock-delay-text");
      await page.waitForSelector("#lock-delay", { state: "visible" });
      expect(await text()).toMatch(
        /^Lock-delay: 2 names held at the last clean stop are not granted for up to \d\.\d s more: their holders may still believe they hold them \(every other name is granted\) Reclaims: 1 of 3 grants the last clean stop published are back with their holders; the rest may come back for [34]\.\d s more, ahead of any other claim of their names\.$/,
      );
      // The grace over, the delay not: the sentence goes.
      delay = { why: "clean-restart", remainingMs: 4_000, names: 1, everyName: false };
      await page.waitForFunction(() => !document.getElementById("lock-delay-text")?.textContent?.includes("Reclaims:"));
      expect(await text()).toStartWith("Lock-delay: 1 name held at the last clean stop");
      delay = null;
      await page.waitForSelector("#lock-delay", { state: "hidden" });
      expect(errors).toEqual([]);
      await page.close();
    } finally {
      await ops.stop();
      await server.stop();
    }
  }, 60_000);
});
