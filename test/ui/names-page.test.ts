/// <reference lib="dom" />
// The operator's page (/ui) in chromium: lock names that look alike when
// rendered as sent (invisible and combining code points, a variation
// selector, a tag character, a Cyrillic letter, trailing and doubled
// spaces) look different in the table, the detail panel and the
// confirmation dialog; force-release names the holder the dialog showed; a lock opened in the page is in its address (and an
// address opens it); the page's icon is served; the queue keeps short owner
// labels on one line. The lock and ops servers run in this process; every
// wait is playwright's wait for a DOM condition (bounded by its timeout) or
// for a request the test holds.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page, type Route } from "playwright-core";
import { Logger } from "../../src/log/logger.ts";
import { AdminAuth } from "../../src/ops/admin.ts";
import type { LockServer } from "../../src/server/server.ts";
import { OpsServer } from "../../src/ops/server.ts";
import { startServer, WirePeer } from "../helpers/wire.ts";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", Bun.which("chromium") ?? ""].find((p) => p !== "" && existsSync(p));
if (CHROMIUM === undefined) {
  console.warn("test/ui/names-page.test.ts: skipped: no chromium found (apt-get install chromium; .ci/run installs it)");
}
const SHOTS = join(import.meta.dir, "screenshots");
const WAIT = 15_000;
const TOKEN = "names-page-token";

const BASE = "jobs/nightly";
/** Each name, and the text the page shows for it. */
const NAMES: readonly (readonly [string, string])[] = [
  [BASE, "jobs/nightly"],
  ["jobs/nightly\u180E", "jobs/nightly\\u{180E}"], // MONGOLIAN VOWEL SEPARATOR
  ["jobs/nightly\uFE0F", "jobs/nightly\\u{FE0F}"], // VARIATION SELECTOR-16
  ["jobs/night\u034Fly", "jobs/night\\u{034F}ly"], // COMBINING GRAPHEME JOINER
  ["jobs/nightly\u{E0041}", "jobs/nightly\\u{E0041}"], // TAG LATIN CAPITAL LETTER A
  ["jobs/nightly ", "jobs/nightly␣"], // a trailing space
  ["jobs/n\u0456ghtly", "jobs/n\\u{0456}ghtly"], // CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I
  ["jobs nightly", "jobs␣nightly"],
  ["jobs  nightly", "jobs␣␣nightly"], // two spaces, which HTML would collapse into one
  ["jobs/nightly\\u{180E}", "jobs/nightly\\\\u{180E}"], // the escape's own text, typed: the backslash is doubled
  ["jobs/nightly\u2423", "jobs/nightly\\u{2423}"], // the marker of a space, sent as a character
];

describe.skipIf(CHROMIUM === undefined)("the operator's page: names, links, icon and queue, in chromium", () => {
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
    for (const [name] of NAMES) peers.push(await WirePeer.claim(server.port, name, 120_000, { owner: "o" }));
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: ["--no-sandbox"], headless: true });
    mkdirSync(SHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    for (const peer of peers.splice(0)) peer.terminate();
    await browser?.close();
    await ops?.stop();
    await server?.stop();
  });

  /** A page on `path` that records page errors, console errors and answers of 400 and above. */
  async function open(path = "/ui"): Promise<{ page: Page; problems: string[] }> {
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

  /**
   * Stop the page's polling: its next board request is held (never
   * answered), so its loop waits there and nothing is drawn again while the
   * test takes pictures. Resolves once a request is held.
   */
  async function freeze(page: Page): Promise<void> {
    let held!: () => void;
    const first = new Promise<void>((resolve) => (held = resolve));
    await page.route("**/ui/v1/board*", (_route: Route) => held());
    await first;
  }

  const rowSelector = (name: string, cell: string) => `#rows tr[data-lock=${JSON.stringify(name)}] ${cell}`;

  /** A picture's identity: equal bytes are equal pictures (same size and pixels). */
  const picture = async (page: Page, selector: string) => Bun.hash(await page.locator(selector).screenshot()).toString(16);

  test("look-alike names render differently from each other and from jobs/nightly in the table, the detail panel and the dialog", async () => {
    const { page, problems } = await open();
    await page.waitForFunction((n) => document.querySelectorAll("#rows tr").length >= n, NAMES.length);
    await freeze(page);

    // The table: each name as its escaped text, in a picture of its own.
    const table: string[] = [];
    for (const [name, text] of NAMES) {
      expect(await page.textContent(rowSelector(name, "button.name"))).toBe(text);
      table.push(await picture(page, rowSelector(name, "button.name")));
    }
    // Every owner cell says "o": their pictures are alike on every row, so a
    // difference between two names' pictures is their text's, not their row's.
    const owners = new Set<string>();
    for (const [name] of NAMES) owners.add(await picture(page, rowSelector(name, "td:nth-child(2)")));
    expect(owners.size).toBe(1);
    expect(new Set(table).size).toBe(NAMES.length);

    // The detail panel and the confirmation dialog, for each name in turn.
    const detail: string[] = [];
    const dialog: string[] = [];
    for (const [name, text] of NAMES) {
      await page.click(rowSelector(name, "button.name"));
      await page.waitForFunction((n) => document.getElementById("detail")?.dataset.lock === n && document.querySelector("#d-holder button.danger") !== null, name);
      expect(await page.textContent("#d-name")).toBe(text);
      detail.push(await picture(page, "#d-name"));
      await page.click("#d-holder button.danger");
      expect(await page.textContent("#confirm-text")).toStartWith(`Force-release "${text}", held by session `);
      dialog.push(await picture(page, "#confirm-text .lockname"));
      await page.click("#confirm-no");
    }
    expect(new Set(detail).size).toBe(NAMES.length);
    expect(new Set(dialog).size).toBe(NAMES.length);
    await page.screenshot({ path: join(SHOTS, "look-alikes.png"), fullPage: true });

    // The check can fail: the same names as sent, drawn in the same place, are alike.
    const raw = async (name: string) => {
      await page.evaluate((n) => void (document.getElementById("d-name")!.textContent = n), name);
      return picture(page, "#d-name");
    };
    const plain = await raw(BASE);
    const alike = [];
    for (const [name] of NAMES.slice(1)) if ((await raw(name)) === plain) alike.push(name);
    expect(alike.length).toBeGreaterThan(0);
    expect(problems).toEqual([]);
    await page.close();
  }, 120_000);

  test("force-release sends the holder the dialog showed: once it has left and a waiter holds the lock, nothing is released and the page says why", async () => {
    const name = "deploy/prod";
    const a = await WirePeer.claim(server.port, name, 120_000, { owner: "seen-A" });
    const b = await WirePeer.claim(server.port, name, 120_000, { owner: "next-B" });
    peers.push(a, b);
    const { page, problems } = await open(`/ui#lock=${encodeURIComponent(name)}`);
    const posts: string[] = [];
    page.on("request", (request) => void (request.method() === "POST" && posts.push(request.url())));
    await page.fill("#token", TOKEN);
    await page.waitForFunction(() => document.getElementById("d-holder")?.textContent?.includes("seen-A"));
    await page.click("#d-holder button.danger");
    const question = (await page.textContent("#confirm-text"))!;
    const token = a.frames[0]!.token!.toString();
    expect(question).toContain(`with token ${token} ("seen-A"`);
    // The holder the dialog names leaves; the waiter is promoted; then the operator confirms.
    a.end();
    await b.until(() => b.frames[1], 10_000, "B's grant");
    await page.click("#confirm-yes");
    await page.waitForFunction(() => document.getElementById("message")?.classList.contains("error"));
    const message = (await page.textContent("#message"))!;
    expect(message).toContain("Refused force-release (HTTP 409) — HOLDER_CHANGED:");
    expect(message).toContain('(owner "next-B")');
    expect(message).toContain("nothing was released");
    expect(posts).toHaveLength(1);
    expect(new URL(posts[0]!).searchParams.get("token")).toBe(token);
    expect(b.frames).toHaveLength(2); // still the holder: no ERROR
    expect(b.isClosed).toBe(false);
    // The refusal's answer, and the browser's console line for it: nothing else went wrong.
    expect(problems).toEqual([expect.stringMatching(/^409 .*\/v1\/locks\/force-release\?name=deploy%2Fprod&session=\d+&token=\d+$/), expect.stringContaining("status of 409")]);
    // Asked again, the dialog names B, and B is released.
    await page.waitForFunction(() => document.getElementById("d-holder")?.textContent?.includes("next-B"));
    await page.click("#d-holder button.danger");
    await page.click("#confirm-yes");
    await b.until(() => b.frames[2], 10_000, "B's ERROR");
    await page.waitForFunction(() => document.getElementById("message")?.textContent?.startsWith("Force-released"));
    // Since: at most the view of the lock, free now (404), and the console's line for it.
    for (const problem of problems.slice(2)) expect(problem).toMatch(/^404 .*\/v1\/locks\?name=deploy%2Fprod&limit=100&holders=100$|status of 404/);
    await page.close();
  }, 60_000);

  test("a lock opened in the page is in its address, an address with #lock= opens it (on load and when it changes), and closing clears it", async () => {
    const name = "orders/eu west#1?x=%41&y";
    const peer = await WirePeer.claim(server.port, name, 120_000, { owner: "linked-owner" });
    peers.push(peer);
    const { page, problems } = await open();
    await page.waitForSelector(rowSelector(name, "button.name"));
    await page.click(rowSelector(name, "button.name"));
    await page.waitForFunction((n) => document.getElementById("detail")?.dataset.lock === n, name);
    const link = await page.evaluate(() => location.href);
    expect(link).toBe(`${base}/ui#lock=${encodeURIComponent(name)}`);
    expect(await page.title()).toBe("orders/eu␣west#1?x=%41&y · lockd");

    // The link, opened anew, shows that lock's detail without a click.
    const { page: second, problems: more } = await open(`/ui#lock=${encodeURIComponent(name)}`);
    await second.waitForFunction(() => document.getElementById("d-holder")?.textContent?.includes("linked-owner"));
    expect(await second.isVisible("#detail")).toBe(true);
    expect(await second.textContent("#d-name")).toBe("orders/eu␣west#1?x=%41&y");
    // The address changed by hand (or Back): the page follows.
    await second.evaluate((n) => void (location.hash = `lock=${encodeURIComponent(n)}`), BASE);
    await second.waitForFunction((n) => document.getElementById("detail")?.dataset.lock === n, BASE);
    // Closed: the address is the page's own again.
    await second.click("#d-close");
    expect(await second.isHidden("#detail")).toBe(true);
    expect(await second.evaluate(() => location.href)).toBe(`${base}/ui`);
    expect(await second.title()).toBe("lockd");
    expect(problems).toEqual([]);
    expect(more).toEqual([]);
    // A lock nobody holds opens too, and says so (its view is a 404, the browser's console notes it).
    await second.evaluate(() => void (location.hash = "lock=nobody%20here"));
    await second.waitForFunction(() => document.getElementById("d-holder")?.textContent === "Nobody holds or waits for this lock now.");
    // A malformed address opens nothing.
    await second.evaluate(() => void (location.hash = "lock=%E0%A4%A"));
    await second.waitForSelector("#detail", { state: "hidden" });
    await page.close();
    await second.close();
    peer.terminate();
  }, 60_000);

  test("the page has an icon: /favicon.ico and /ui/favicon.svg answer 200, and loading the page gets no error answer", async () => {
    for (const path of ["/favicon.ico", "/ui/favicon.svg"]) {
      const response = await fetch(base + path, { signal: AbortSignal.timeout(10_000) });
      expect(response.status, path).toBe(200);
      expect(response.headers.get("content-type")).toBe("image/svg+xml");
      expect(await response.text()).toStartWith("<svg ");
    }
    expect((await fetch(`${base}/favicon.ico`, { method: "POST", signal: AbortSignal.timeout(10_000) })).status).toBe(405);
    const { page, problems } = await open();
    expect(await page.getAttribute('link[rel="icon"]', "href")).toBe("/ui/favicon.svg");
    // A second poll answered: everything the page loads has been asked for by now.
    await page.waitForFunction((before) => document.getElementById("status")?.textContent !== before, await page.textContent("#status"));
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);

  test("the queue keeps short owner labels on one line; a long one wraps within the panel", async () => {
    const name = "queue/wrap";
    const owners = ["worker-7 on host-b", "host-b/pid-4242", "x".repeat(200)];
    peers.push(await WirePeer.claim(server.port, name, 120_000, { owner: "holder" }));
    for (const owner of owners) peers.push(await WirePeer.claim(server.port, name, 120_000, { owner }));
    const { page, problems } = await open(`/ui#lock=${encodeURIComponent(name)}`);
    await page.waitForFunction((n) => document.querySelectorAll("#d-queue tr").length === n, owners.length);
    await freeze(page);
    // Found and measured in one step inside the page: a detail refresh in flight may still redraw the queue.
    const lines = await page.evaluate(() =>
      Array.from(document.querySelectorAll("#d-queue tr td:nth-child(3)"), (cell) => {
        const range = document.createRange();
        range.selectNodeContents(cell);
        // Lines of text: the distinct tops of the text's boxes.
        return [cell.textContent, new Set(Array.from(range.getClientRects(), (box) => Math.round(box.top))).size] as const;
      }),
    );
    expect(lines.map(([owner, count]) => `${owner}: ${count === 1 ? "one line" : "wrapped"}`)).toEqual([
      `${owners[0]}: one line`,
      `${owners[1]}: one line`,
      `${owners[2]}: wrapped`,
    ]);
    // The table fits the panel: nothing scrolls sideways at this width.
    const [scroll, width] = await page.$eval(".queue-wrap", (wrap) => [wrap.scrollWidth, wrap.clientWidth]);
    expect(scroll).toBeLessThanOrEqual(width);
    await page.screenshot({ path: join(SHOTS, "queue.png"), fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);
});
