/// <reference lib="dom" />
// The operator's page (/ui) of an instance that is not its service's active,
// in chromium: a banner says it serves no locks (and why it will not take
// over, if it will not), its empty table is not shown as the service's
// state, and the page follows when the role changes. The ops server runs in
// this process with a role switched by hand (no PostgreSQL; the real roles
// are in test/coordinator/failover.test.ts). Every wait is playwright's wait
// for a DOM condition (bounded by its timeout).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium } from "playwright-core";
import { Logger } from "../../src/log/logger.ts";
import { AdminAuth } from "../../src/ops/admin.ts";
import type { LockServer } from "../../src/server/server.ts";
import { OpsServer } from "../../src/ops/server.ts";
import type { CoordinatorMetrics, RoleView } from "../../src/ops/sources.ts";
import { startServer, WirePeer } from "../helpers/wire.ts";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", Bun.which("chromium") ?? ""].find((p) => p !== "" && existsSync(p));
if (CHROMIUM === undefined) {
  console.warn("test/ui/standby-page.test.ts: skipped: no chromium found (apt-get install chromium; .ci/run installs it)");
}
const SHOTS = join(import.meta.dir, "screenshots");
/** playwright's bound on each wait for the page: generous, for a loaded machine. */
const WAIT = 15_000;
/** A service name with markup in it: shown as these characters. */
const SERVICE = "orders<b>eu</b>";

describe.skipIf(CHROMIUM === undefined)("the operator's page of a standby, in chromium", () => {
  let server: LockServer;
  let ops: OpsServer;
  let browser: Browser;
  let holder: WirePeer;
  let view: RoleView = { role: "standby", epoch: 3, service: SERVICE, instance: "test", active: null, activeOps: null };

  beforeAll(async () => {
    server = startServer();
    ops = new OpsServer({
      hostname: "127.0.0.1",
      port: 0,
      locks: server.locks,
      roles: { view: () => view, metrics: () => ({ ...view }) as CoordinatorMetrics },
      shard: { shard: "b", shards: ["a", "b"], generation: 7 },
      auth: new AdminAuth("standby-page-token"),
      log: new Logger("error", () => {}),
      version: "0.0.0-test",
      isReady: () => view.role === "active",
    });
    // The lock server's table has a holder: shown only once this instance is the active.
    holder = await WirePeer.claim(server.port, "held", 120_000, { owner: "holder-A" });
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: ["--no-sandbox"], headless: true });
    mkdirSync(SHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    holder?.terminate();
    await browser?.close();
    await ops?.stop();
    await server?.stop();
  });

  test("a standby shows a banner instead of its table and totals, naming the active and linking to its page; it goes when the role becomes active, and comes back with the refusal", async () => {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.setDefaultTimeout(WAIT);
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    page.on("console", (message) => {
      // A CSP violation is reported here.
      if (message.type() === "error" && message.text().includes("Content Security Policy")) errors.push(message.text());
    });
    expect((await page.goto(`http://127.0.0.1:${ops.port}/ui`))?.status()).toBe(200);

    await page.waitForSelector("#standby", { state: "visible" });
    expect(await page.textContent("#standby-text")).toBe(`This instance is a standby of service ${SERVICE}: it serves no locks. Open the active instance's page.`);
    expect(await page.isHidden("#standby-refusal")).toBe(true);
    expect(await page.isHidden("#locks-section")).toBe(true); // no "0 locks" table posing as the service's state
    expect(await page.isHidden("#totals")).toBe(true);
    // The admin token does nothing here (no locks to act on): no field for it.
    expect(await page.isHidden("#token-label")).toBe(true);
    expect(await page.textContent("#shard")).toBe("shard b · generation 7");
    expect(await page.textContent("#role")).toBe(`service ${SERVICE} · standby · epoch 3`);
    expect(await page.$$("#standby b")).toEqual([]); // the name is text, not markup
    expect(await page.isHidden("#standby-active")).toBe(true); // the row names no active: nothing to link to

    // The row names the active and the ops address it advertises: the banner names it and links to its page (this page's scheme).
    view = { role: "standby", epoch: 3, service: SERVICE, instance: "test", active: "db1/pid-42/<i>x</i>", activeOps: "10.0.0.5:7701" };
    await page.waitForSelector("#standby-active-link");
    expect(await page.textContent("#standby-active")).toBe("The active is db1/pid-42/<i>x</i>, ops at 10.0.0.5:7701.");
    expect(await page.textContent("#standby-active-link")).toBe("10.0.0.5:7701");
    expect(await page.getAttribute("#standby-active-link", "href")).toBe("http://10.0.0.5:7701/ui");
    expect(await page.$$("#standby i")).toEqual([]); // the instance id is text, not markup
    await page.screenshot({ path: join(SHOTS, "standby.png"), fullPage: true });
    // An active that advertises no address (an older lockd, a wildcard --ops): named, with no link.
    view = { role: "standby", epoch: 3, service: SERVICE, instance: "test", active: "db1/pid-42/9f3a01bc", activeOps: null };
    await page.waitForSelector("#standby-active-link", { state: "detached" });
    expect(await page.textContent("#standby-active")).toBe("The active is db1/pid-42/9f3a01bc; it advertises no ops address (see --advertise-ops).");

    view = { role: "active", epoch: 4, service: SERVICE, instance: "test", active: null, activeOps: null };
    await page.waitForSelector("#standby", { state: "hidden" });
    await page.waitForSelector("#locks-section", { state: "visible" });
    await page.waitForSelector('#rows tr[data-lock="held"]');
    expect(await page.isVisible("#totals")).toBe(true);
    expect(await page.isVisible("#token")).toBe(true); // the active's page takes the token for its actions
    expect(await page.textContent('#rows tr[data-lock="held"] td:nth-child(2)')).toBe("holder-A");
    expect(await page.textContent("#role")).toBe(`service ${SERVICE} · active · epoch 4`);
    expect(await page.textContent("#shard")).toBe("shard b · generation 7");

    view = { role: "standby", epoch: 5, service: SERVICE, instance: "test", active: null, activeOps: null, refusal: "its shard map (generation 7) differs from the active's (generation 8)" };
    await page.waitForSelector("#standby-refusal", { state: "visible" });
    expect(await page.textContent("#standby-refusal")).toBe("It will not take over: its shard map (generation 7) differs from the active's (generation 8)");
    expect(await page.isHidden("#locks-section")).toBe(true);
    expect(await page.isHidden("#token-label")).toBe(true);

    view = { role: "stopped", epoch: 5, service: SERVICE, instance: "test", active: null, activeOps: null };
    await page.waitForFunction(() => document.getElementById("standby-text")?.textContent?.includes("is stopped"));
    expect(await page.textContent("#standby-text")).toBe(`This instance of service ${SERVICE} is stopped: it serves no locks. Open the active instance's page.`);
    expect(await page.isHidden("#standby-refusal")).toBe(true);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);
});
