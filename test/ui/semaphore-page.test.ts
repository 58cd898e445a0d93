/// <reference lib="dom" />
// The operator's page with semaphores and shared locks, in chromium: the
// table's Holders cell (count and mode), the detail panel's holders (slot or
// shared, session, owner, token), each waiter's mode in the queue, and a
// force-release per holder that names that holder's session and token and
// releases it and no other. Against an in-process lock server and ops
// server; every wait is on a protocol frame or a DOM condition.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { Logger } from "../../src/log/logger.ts";
import { AdminAuth } from "../../src/ops/admin.ts";
import type { LockServer } from "../../src/server/server.ts";
import { OpsServer } from "../../src/ops/server.ts";
import { decodeSlot, ErrorCode, FrameType } from "../../src/protocol/index.ts";
import { startServer, WirePeer } from "../helpers/wire.ts";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", Bun.which("chromium") ?? ""].find((p) => p !== "" && existsSync(p));
if (CHROMIUM === undefined) {
  console.warn("test/ui/semaphore-page.test.ts: skipped: no chromium found (apt-get install chromium; .ci/run installs it)");
}
const SHOTS = join(import.meta.dir, "screenshots");
const WAIT = 15_000;
const TOKEN = "semaphore-page-token";

describe.skipIf(CHROMIUM === undefined)("the operator's page with semaphores and shared locks, in chromium", () => {
  let server: LockServer;
  let ops: OpsServer;
  let browser: Browser;
  let base: string;
  const peers: WirePeer[] = [];

  beforeAll(async () => {
    server = startServer();
    ops = new OpsServer({
      hostname: "127.0.0.1",
      port: 0,
      locks: server.locks,
      auth: new AdminAuth(TOKEN),
      log: new Logger("error", () => {}),
      version: "0.0.0-test",
      isReady: () => true,
    });
    base = `http://127.0.0.1:${ops.port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: ["--no-sandbox"], headless: true });
    mkdirSync(SHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    for (const peer of peers.splice(0)) peer.terminate();
    await browser?.close();
    await ops?.stop();
    await server?.stop();
  });

  async function claim(name: string, owner: string, options: { limit?: number; shared?: boolean }): Promise<WirePeer> {
    const peer = await WirePeer.claim(server.port, name, 120_000, { ...options, owner });
    peers.push(peer);
    return peer;
  }

  /** A page on `path` that records page errors, console errors and answers of 400 and above. */
  async function open(path: string): Promise<{ page: Page; problems: string[] }> {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.setDefaultTimeout(WAIT);
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(`console: ${message.text()}`);
    });
    page.on("response", (response) => {
      if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`);
    });
    expect((await page.goto(base + path))?.status()).toBe(200);
    await page.waitForFunction(() => document.getElementById("status")?.textContent?.startsWith("live"));
    return { page, problems };
  }

  /** The holders table of the detail panel: each row's cells' text, with its session and token. */
  const holderRows = (page: Page) =>
    page.$$eval("#d-holders tbody tr", (rows) =>
      rows.map((row) => ({
        cells: Array.from(row.children, (cell) => cell.textContent ?? "").slice(0, 6),
        session: (row as HTMLElement).dataset.session,
        token: (row as HTMLElement).dataset.token,
      })),
    );

  const slotOf = (peer: WirePeer, frame = 0) => decodeSlot(peer.frames[frame]!.body, 0, peer.frames[frame]!.body.length);

  test("a semaphore: every holder with its slot and token, the waiters' limit; force-release of the middle holder releases it alone and its waiter takes the slot", async () => {
    const name = "pool/gpu";
    const holders = [await claim(name, "h0", { limit: 3 }), await claim(name, "h1", { limit: 3 }), await claim(name, "h2", { limit: 3 })];
    const waiter = await claim(name, "w0", { limit: 3 });
    expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);
    const { page, problems } = await open(`/ui#lock=${encodeURIComponent(name)}`);
    const posts: string[] = [];
    page.on("request", (request) => {
      if (request.method() === "POST") posts.push(request.url());
    });

    // The table: the Holders cell has the count and the limit.
    await page.waitForFunction((n) => document.querySelector(`#rows tr[data-lock="${n}"] td.mode`)?.textContent === "semaphore 3/3", name);
    // The panel: the mode, every holder in slot order (granted in that order), the queue with the waiter's mode.
    await page.waitForFunction(() => document.querySelectorAll("#d-holders tbody tr").length === 3 && document.querySelectorAll("#d-queue tr").length === 1);
    expect(await page.textContent("#d-mode")).toBe("semaphore of 3 · 3 holding");
    const rows = await holderRows(page);
    expect(rows.map((r) => [r.cells[0], r.cells[2], r.cells[4]])).toEqual(holders.map((p, i) => [String(slotOf(p)), `h${i}`, p.frames[0]!.token!.toString()]));
    expect(rows.map((r) => r.cells[0])).toEqual(["0", "1", "2"]);
    for (const r of rows) expect(r.cells[5]).toMatch(/^\d+(\.\d)? (ms|s)$/); // held for
    expect(await page.$eval("#d-queue tr", (tr) => [tr.children[2]!.textContent, (tr as HTMLElement).dataset.mode])).toEqual(["w0", "limit 3"]);
    await page.screenshot({ path: join(SHOTS, "semaphore.png"), fullPage: true });

    // The middle holder's own button: the dialog names its session, slot and token.
    const middle = rows[1]!;
    await page.fill("#token", TOKEN);
    await page.evaluate((session) => document.querySelector<HTMLElement>(`#d-holders tr[data-session="${session}"] button.danger`)!.click(), middle.session!);
    const question = (await page.textContent("#confirm-text"))!;
    expect(question).toStartWith(`Force-release "${name}", held by session ${middle.session}, slot 1 with token ${middle.token} ("h1", 127.0.0.1:`);
    expect(question).toContain("the other holders keep the lock");
    await page.click("#confirm-yes");
    await holders[1]!.until(() => holders[1]!.frames[1], 10_000, "h1's ERROR");
    expect(holders[1]!.frames[1]!.code).toBe(ErrorCode.FORCE_RELEASED);
    await waiter.until(() => waiter.frames[1], 10_000, "w0's grant");
    expect(waiter.frames[1]!.type).toBe(FrameType.ACQUIRED);
    expect(slotOf(waiter, 1)).toBe(1);
    // Nobody else was touched.
    expect(holders[0]!.frames).toHaveLength(1);
    expect(holders[2]!.frames).toHaveLength(1);
    expect(posts).toHaveLength(1);
    const sent = new URL(posts[0]!).searchParams;
    expect([sent.get("name"), sent.get("session"), sent.get("token")]).toEqual([name, middle.session!, middle.token!]);
    await page.waitForFunction(() => document.getElementById("message")?.textContent?.startsWith("Force-released"));
    expect(await page.textContent("#message")).toContain(`from session ${middle.session}: session `);
    expect(await page.textContent("#message")).toContain('("w0") now holds it');
    // The panel follows: w0 in slot 1, the queue empty.
    await page.waitForFunction(() => Array.from(document.querySelectorAll("#d-holders tbody tr"), (tr) => tr.children[2]!.textContent).join(",") === "h0,h2,w0" && document.querySelectorAll("#d-queue tr").length === 0);
    expect((await holderRows(page)).map((r) => [r.cells[0], r.cells[2]])).toEqual([["0", "h0"], ["2", "h2"], ["1", "w0"]]);
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);

  test("a read/write lock: the writer, the readers' mode in the queue, then the shared holders, one of them force-released by its own button", async () => {
    const name = "rw/catalog";
    const writer = await claim(name, "writer", {});
    const readers = [await claim(name, "r0", { shared: true }), await claim(name, "r1", { shared: true })];
    const { page, problems } = await open(`/ui#lock=${encodeURIComponent(name)}`);
    await page.waitForFunction(() => document.querySelectorAll("#d-holders tbody tr").length === 1 && document.querySelectorAll("#d-queue tr").length === 2);
    expect(await page.textContent("#d-mode")).toBe("exclusive · 1 holding");
    expect((await holderRows(page)).map((r) => [r.cells[0], r.cells[2]])).toEqual([["—", "writer"]]);
    expect(await page.$$eval("#d-queue tr", (trs) => trs.map((tr) => (tr as HTMLElement).dataset.mode))).toEqual(["shared", "shared"]);
    await page.waitForFunction((n) => document.querySelector(`#rows tr[data-lock="${n}"] td.mode`)?.textContent === "1 exclusive", name);

    // The writer leaves: both readers hold together.
    writer.end();
    for (const r of readers) await r.until(() => r.frames[1], 10_000, "a reader's grant");
    await page.waitForFunction(() => document.querySelectorAll("#d-holders tbody tr").length === 2 && document.querySelectorAll("#d-queue tr").length === 0);
    expect(await page.textContent("#d-mode")).toBe("shared · 2 holding");
    const rows = await holderRows(page);
    expect(rows.map((r) => [r.cells[0], r.cells[2], r.token])).toEqual(readers.map((p, i) => ["shared", `r${i}`, p.frames[1]!.token!.toString()]));
    await page.waitForFunction((n) => document.querySelector(`#rows tr[data-lock="${n}"] td.mode`)?.textContent === "2 shared", name);

    // The newer reader's button: it alone is released; the message says the other still holds.
    await page.fill("#token", TOKEN);
    await page.evaluate((session) => document.querySelector<HTMLElement>(`#d-holders tr[data-session="${session}"] button.danger`)!.click(), rows[1]!.session!);
    expect(await page.textContent("#confirm-text")).toContain(`held by session ${rows[1]!.session}, shared with token ${rows[1]!.token} ("r1"`);
    await page.click("#confirm-yes");
    await readers[1]!.until(() => readers[1]!.frames[2], 10_000, "r1's ERROR");
    expect(readers[1]!.frames[2]!.code).toBe(ErrorCode.FORCE_RELEASED);
    expect(readers[0]!.frames).toHaveLength(2);
    await page.waitForFunction(() => document.getElementById("message")?.textContent?.startsWith("Force-released"));
    expect(await page.textContent("#message")).toContain("1 other holder still holds it");
    await page.waitForFunction(() => document.querySelectorAll("#d-holders tbody tr").length === 1);
    expect((await holderRows(page))[0]!.cells[2]).toBe("r0");
    await page.screenshot({ path: join(SHOTS, "shared.png"), fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);
});
