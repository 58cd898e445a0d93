/// <reference lib="dom" />
// The operator's page (/ui) in a real browser: Debian's chromium, driven by
// playwright-core, against a real `lockd serve` child with real clients (the
// client library, and raw protocol peers). Every wait is on an event: a
// protocol frame, a log line, or a DOM condition playwright waits for
// (bounded by its timeout). Screenshots go to test/ui/screenshots/ (gitignored).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { LockClient } from "../../src/client/index.ts";
import { encodeAcquire, FrameType } from "../../src/protocol/index.ts";
import { ErrorCode } from "../../src/protocol/constants.ts";
import { Wakeup } from "../helpers/events.ts";
import { WirePeer } from "../helpers/wire.ts";
import { ChildServer } from "../fixtures/ops-child.ts";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", Bun.which("chromium") ?? ""].find((p) => p !== "" && existsSync(p));
if (CHROMIUM === undefined) {
  console.warn("test/ui/page.test.ts: skipped: no chromium found (apt-get install chromium; .ci/run installs it)");
}
const SHOTS = join(import.meta.dir, "screenshots");
const TOKEN = "ui-test-token-0123456789";
/** playwright's bound on each wait for the page: generous, for a loaded machine. */
const WAIT = 15_000;

/** What the page shows for a lock name: printable ASCII as sent (a backslash doubled), a space as ␣, anything else as \u{XXXX}. */
const nameShown = (name: string) =>
  Array.from(name, (c) => {
    const code = c.codePointAt(0)!;
    if (code === 0x20) return "␣";
    if (code === 0x5c) return "\\\\";
    return code > 0x20 && code < 0x7f ? c : `\\u{${code.toString(16).toUpperCase().padStart(4, "0")}}`;
  }).join("");

describe.skipIf(CHROMIUM === undefined)("the operator's page in chromium", () => {
  let server: ChildServer;
  let browser: Browser;
  let base: string;
  let listenPort: number;
  const peers: WirePeer[] = [];

  beforeAll(async () => {
    server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], { LOCKD_ADMIN_TOKEN: TOKEN });
    const start = await server.event("server.listening");
    listenPort = Number(String(start.listen).split(":").pop());
    base = String(start.ui).replace(/\/ui$/, "");
    expect(start.ui).toBe(`http://${start.ops}/ui`); // the startup line links the page
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: ["--no-sandbox"], headless: true });
    mkdirSync(SHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    for (const peer of peers.splice(0)) peer.terminate();
    await browser?.close();
    if (server !== undefined) await server[Symbol.asyncDispose]();
  });

  /** A fresh page on /ui that records dialogs and page errors. */
  async function open(): Promise<{ page: Page; dialogs: string[]; errors: string[] }> {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.setDefaultTimeout(WAIT);
    const dialogs: string[] = [];
    const errors: string[] = [];
    page.on("dialog", (dialog) => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
    page.on("pageerror", (error) => errors.push(error.message));
    const response = await page.goto(`${base}/ui`);
    expect(response?.status()).toBe(200);
    await page.waitForFunction(() => document.getElementById("status")?.textContent?.startsWith("live"));
    return { page, dialogs, errors };
  }

  async function claim(name: string, owner: string): Promise<WirePeer> {
    const peer = await WirePeer.claim(listenPort, name, 120_000, { owner });
    peers.push(peer);
    return peer;
  }

  /** The text of each cell of the queue table, row by row. */
  const queueRows = (page: Page) =>
    page.$$eval("#d-queue tr", (rows) => rows.map((row) => Array.from(row.children, (cell) => cell.textContent ?? "")));

  /** The table row of a lock, waiting for it to appear. */
  async function rowOf(page: Page, name: string): Promise<string[]> {
    await page.waitForFunction((n) => Array.from(document.querySelectorAll("#rows tr")).some((tr) => (tr as HTMLElement).dataset.lock === n), name);
    return page.$$eval("#rows tr", (rows, n) => {
      const row = rows.find((tr) => (tr as HTMLElement).dataset.lock === n)!;
      return Array.from(row.children, (cell) => cell.textContent ?? "");
    }, name);
  }

  async function selectLock(page: Page, name: string): Promise<void> {
    await rowOf(page, name);
    // Found and clicked in one step inside the page: the table is re-rendered
    // every second, so a handle taken in one call can be detached by the next.
    await page.evaluate(
      (n) => Array.from(document.querySelectorAll<HTMLElement>("#rows tr")).find((tr) => tr.dataset.lock === n)!.querySelector<HTMLElement>("button.name")!.click(),
      name,
    );
    await page.waitForFunction((n) => document.getElementById("detail")?.dataset.lock === n, name);
  }

  test("the table shows the holder and the detail view its waiters in FIFO order; both update when the holder closes", async () => {
    const name = "orders/fifo";
    const client = new LockClient({ servers: `127.0.0.1:${listenPort}` });
    const held = await client.acquire(name, { lease: 60_000, owner: "holder-A" });
    const b = await claim(name, "waiter-B");
    const c = await claim(name, "waiter-C");
    expect(b.frames[0]!.type).toBe(FrameType.WAITING);
    expect(c.frames[0]!.type).toBe(FrameType.WAITING);

    const { page, errors } = await open();
    const row = await rowOf(page, name);
    expect(await page.isHidden("#lock-delay")).toBe(true); // a first start on its data directory owes no lock-delay
    expect(row[0]).toBe(name);
    expect(row[1]).toBe("holder-A");
    expect(row[2]).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(row[5]).toBe("2");
    await selectLock(page, name);
    await page.waitForFunction(() => document.querySelectorAll("#d-queue tr").length === 2);
    const queue = await queueRows(page);
    expect(queue.map((cells) => [cells[0], cells[2]])).toEqual([
      ["1", "waiter-B"],
      ["2", "waiter-C"],
    ]);
    for (const cells of queue) expect(cells[4]).toMatch(/^\d+(\.\d)? (ms|s)$/); // each waiter's wait so far
    expect(await page.textContent("#d-holder")).toContain("holder-A");
    await page.screenshot({ path: join(SHOTS, "fifo.png"), fullPage: true });

    await held.release();
    await b.until(() => b.frames.find((f) => f.type === FrameType.ACQUIRED), 10_000, "B's grant");
    // The page follows by itself: B holds, C is alone in the queue.
    await page.waitForFunction(
      (n) => {
        const tr = Array.from(document.querySelectorAll("#rows tr")).find((r) => (r as HTMLElement).dataset.lock === n);
        return tr?.children[1]?.textContent === "waiter-B" && tr?.children[5]?.textContent === "1";
      },
      name,
    );
    await page.waitForFunction(() => document.querySelectorAll("#d-queue tr").length === 1 && document.getElementById("d-holder")?.textContent?.includes("waiter-B"));
    expect((await queueRows(page)).map((cells) => [cells[0], cells[2]])).toEqual([["1", "waiter-C"]]);
    expect(errors).toEqual([]);
    await page.close();
    b.terminate();
    c.terminate();
  });

  test("force-release from the page: refused with a clear message without the token, promotes the next waiter with it", async () => {
    const name = "orders/force";
    const a = await claim(name, "stuck-A");
    const b = await claim(name, "next-B");
    expect(a.frames[0]!.type).toBe(FrameType.ACQUIRED);
    const { page, errors } = await open();
    const posts: { url: string; authorization: string | undefined }[] = [];
    page.on("request", (request) => {
      if (request.method() === "POST") posts.push({ url: request.url(), authorization: request.headers().authorization });
    });
    await selectLock(page, name);
    await page.waitForFunction(() => document.getElementById("d-holder")?.textContent?.includes("stuck-A"));

    // No token: the page asks for confirmation, sends the action, and shows the server's refusal.
    await page.click("#d-holder button.danger");
    expect(await page.isVisible("#confirm")).toBe(true);
    expect(await page.textContent("#confirm-text")).toContain(`Force-release "${name}"`);
    await page.click("#confirm-yes");
    await page.waitForFunction(() => document.getElementById("message")?.classList.contains("error"));
    const refusal = (await page.textContent("#message"))!;
    expect(refusal).toContain("Refused force-release (HTTP 401)");
    expect(refusal).toContain("send Authorization: Bearer <admin token>");
    expect(refusal).toContain("Enter the admin token");
    expect(a.isClosed).toBe(false); // still the holder
    expect(b.frames.length).toBe(1);

    // Cancel does nothing.
    await page.click("#d-holder button.danger");
    await page.click("#confirm-no");
    expect(await page.isHidden("#confirm")).toBe(true);

    // With the token: A gets FORCE_RELEASED, B is granted, the page says so.
    await page.fill("#token", TOKEN);
    await page.click("#d-holder button.danger");
    await page.click("#confirm-yes");
    await b.until(() => b.frames.find((f) => f.type === FrameType.ACQUIRED), 10_000, "B's grant");
    await a.until(() => a.frames.find((f) => f.type === FrameType.ERROR), 10_000, "A's ERROR");
    expect(a.frames.find((f) => f.type === FrameType.ERROR)!.code).toBe(ErrorCode.FORCE_RELEASED);
    await page.waitForFunction(() => {
      const m = document.getElementById("message");
      return m !== null && !m.classList.contains("error") && m.textContent!.startsWith("Force-released");
    });
    expect(await page.textContent("#message")).toContain('("next-B") now holds it');
    await page.waitForFunction(() => document.getElementById("d-holder")?.textContent?.includes("next-B"));
    await page.screenshot({ path: join(SHOTS, "force-release.png"), fullPage: true });

    // The token went as a header on the action only: never in a URL, a cookie or storage.
    expect(posts.map((p) => p.authorization)).toEqual([undefined, `Bearer ${TOKEN}`]);
    for (const post of posts) expect(post.url).not.toContain(TOKEN);
    expect(await page.evaluate(() => [document.cookie, localStorage.length, sessionStorage.length])).toEqual(["", 0, 0]);
    expect((await page.context().cookies()).length).toBe(0);
    // Logged as the CLI's actions are, with the browser as the agent.
    const logged = await server.event("admin.force_release");
    expect(logged.lock).toBe(name);
    expect(logged.owner).toBe("stuck-A");
    expect(String(logged.agent)).toContain("Chrome");
    const refused = await server.event("admin.refused");
    expect(refused.reason).toBe("no bearer token");
    expect(errors).toEqual([]);
    await page.close();
    a.terminate();
    b.terminate();
  });

  test("kick from the page, with the token and a confirmation, ends that waiter only; the others keep their order", async () => {
    const name = "orders/kick";
    const a = await claim(name, "holder-K");
    const b = await claim(name, "waiter-1");
    const c = await claim(name, "waiter-2");
    const d = await claim(name, "waiter-3");
    const { page, errors } = await open();
    await page.fill("#token", TOKEN);
    await selectLock(page, name);
    await page.waitForFunction(() => document.querySelectorAll("#d-queue tr").length === 3);
    // Found and clicked in one step (the queue is re-rendered on refresh).
    await page.evaluate(() => document.querySelectorAll("#d-queue tr")[1]!.querySelector<HTMLElement>("button")!.click());
    expect(await page.textContent("#confirm-text")).toContain('("waiter-2"');
    expect(c.frames.length).toBe(1); // nothing happens before the confirmation
    await page.click("#confirm-yes");
    await c.until(() => c.frames.find((f) => f.type === FrameType.ERROR), 10_000, "C's ERROR");
    expect(c.frames.find((f) => f.type === FrameType.ERROR)!.code).toBe(ErrorCode.KICKED);
    await page.waitForFunction(() => document.getElementById("message")?.textContent?.startsWith("Kicked session"));
    await page.waitForFunction(() => document.querySelectorAll("#d-queue tr").length === 2);
    expect((await queueRows(page)).map((cells) => [cells[0], cells[2]])).toEqual([
      ["1", "waiter-1"],
      ["2", "waiter-3"],
    ]);
    expect((await server.event("admin.kick")).owner).toBe("waiter-2");
    expect([a.frames.length, b.frames.length, d.frames.length]).toEqual([1, 1, 1]);
    expect(errors).toEqual([]);
    await page.close();
    for (const peer of [a, b, c, d]) peer.terminate();
  });

  test("lock names and owner labels are text: markup, quotes, RTL marks and 512-byte names render as sent and run nothing", async () => {
    const hostile = [
      "<img src=x onerror=alert(1)>",
      `quote"d 'name' </td></tr><script>alert(2)</script>`,
      "rtl\u202eevil\u202c \u200fmark",
      "é".repeat(256), // 512 bytes of UTF-8
    ];
    const owner = "<script>alert(3)</script><img src=y onerror=alert(4)>";
    for (const name of hostile) {
      const peer = await claim(name, owner);
      expect(peer.frames[0]!.type).toBe(FrameType.ACQUIRED);
    }
    const waiter = await claim(hostile[0]!, `"><svg onload=alert(5)>`);
    expect(waiter.frames[0]!.type).toBe(FrameType.WAITING);
    const { page, dialogs, errors } = await open();
    for (const name of hostile) {
      const row = await rowOf(page, name);
      expect(row[0]).toBe(nameShown(name));
      expect(row[1]).toBe(owner);
    }
    // Printable ASCII as sent, spaces visible, and the bidi override cannot disguise the name: "rtl\u202eevil" would read "rtllive".
    expect(nameShown(hostile[2]!)).toBe("rtl\\u{202E}evil\\u{202C}␣\\u{200F}mark");
    expect(nameShown(hostile[0]!)).toBe("<img␣src=x␣onerror=alert(1)>");
    expect(nameShown(hostile[3]!)).toBe("\\u{00E9}".repeat(256));
    await selectLock(page, hostile[0]!);
    await page.waitForFunction(() => document.querySelectorAll("#d-queue tr").length === 1);
    expect((await queueRows(page))[0]![2]).toBe(`"><svg onload=alert(5)>`);
    await page.click("#d-holder button.danger");
    expect(await page.textContent("#confirm-text")).toContain(`"${nameShown(hostile[0]!)}"`);
    await page.click("#confirm-no");
    await selectLock(page, hostile[2]!);
    expect(await page.textContent("#d-name")).toBe("rtl\\u{202E}evil\\u{202C}␣\\u{200F}mark");
    await page.screenshot({ path: join(SHOTS, "hostile-names.png"), fullPage: true });
    // One more refresh of everything, then: no element came from the data, no dialog, no error.
    await page.waitForFunction(() => document.getElementById("status")?.textContent?.startsWith("live"));
    expect(await page.evaluate(() => document.querySelectorAll("img, svg foreignObject, iframe, object, embed").length)).toBe(0);
    expect(await page.evaluate(() => Array.from(document.scripts, (s) => s.getAttribute("src")))).toEqual(["/ui/ops-ui.js"]);
    expect(await page.evaluate(() => document.querySelectorAll("svg[onload], [onerror]").length)).toBe(0);
    expect(dialogs).toEqual([]);
    expect(errors).toEqual([]);
    await page.close();
  });

  test("the page's answers carry a strict CSP (no inline script), nosniff, no framing and no referrer", async () => {
    for (const path of ["/ui", "/ui/ops-ui.js", "/ui/ops-ui.css", "/ui/v1/board"]) {
      const response = await fetch(base + path, { signal: AbortSignal.timeout(10_000) });
      expect(response.status).toBe(200);
      const csp = response.headers.get("content-security-policy")!;
      expect(csp).toContain("script-src 'self'");
      expect(csp).not.toContain("unsafe-inline");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(response.headers.get("x-content-type-options")).toBe("nosniff");
      expect(response.headers.get("referrer-policy")).toBe("no-referrer");
      await response.arrayBuffer();
    }
    // The browser enforces it: an inline script injected into the DOM does not
    // run, and the browser reports the violation (the event shows the check happened).
    const { page } = await open();
    const result = await page.evaluate(async () => {
      const violation = new Promise<string>((resolve) => {
        document.addEventListener("securitypolicyviolation", (event) => resolve(event.effectiveDirective), { once: true });
        setTimeout(() => resolve("no violation reported in 5 s"), 5000);
      });
      const script = document.createElement("script");
      script.textContent = "window.__inline = true";
      document.body.append(script);
      const directive = await violation;
      return { directive, ran: (window as unknown as { __inline?: boolean }).__inline === true };
    });
    expect(result.ran).toBe(false);
    expect(result.directive).toStartWith("script-src");
    await page.close();
  });

  test("with 10,000 locks the counts stay exact, the list is capped, and prefix filter and sort work server-side", async () => {
    const COUNT = 10_000;
    // The locks the earlier tests still hold (read live, not from a snapshot).
    const before = (await (await fetch(`${base}/v1/locks?limit=1`, { signal: AbortSignal.timeout(10_000) })).json()).total as number;
    const bulk = await holdMany(listenPort, COUNT, "bulk/");
    try {
      const { page, errors } = await open();
      const all = before + COUNT;
      await page.waitForFunction(
        (n) => document.getElementById("counts")?.textContent === `showing 200 of ${n.toLocaleString("en-US")} locks; ${n.toLocaleString("en-US")} locks held or awaited in all`,
        all,
      );
      expect(await page.$$eval("#rows tr", (rows) => rows.length)).toBe(200);
      expect(await page.textContent("#t-locks")).toBe(all.toLocaleString("en-US"));
      await page.fill("#prefix", "bulk/");
      await page.waitForFunction(
        (n) => document.getElementById("counts")?.textContent?.startsWith(`showing 200 of ${n} locks with names starting "bulk/"`),
        COUNT.toLocaleString("en-US"),
      );
      await page.fill("#prefix", "bulk/0999");
      await page.waitForFunction(() => document.getElementById("counts")?.textContent?.startsWith(`showing 10 of 10 locks with names starting "bulk/0999"`));
      expect(await page.$$eval("#rows tr", (rows) => rows.map((r) => (r as HTMLElement).dataset.lock))).toEqual(
        Array.from({ length: 10 }, (_, i) => `bulk/0999${i}`),
      );
      await page.click('th button[data-sort="name"]'); // name, descending
      await page.waitForFunction(() => (document.querySelector("#rows tr") as HTMLElement | null)?.dataset.lock === "bulk/09999");
      await page.fill("#prefix", "");
      await page.waitForFunction(() => document.querySelectorAll("#rows tr").length === 200);
      await page.screenshot({ path: join(SHOTS, "ten-thousand.png"), fullPage: false });
      expect(errors).toEqual([]);
      await page.close();
    } finally {
      bulk.close();
    }
  }, 120_000);
});

/**
 * Hold `count` locks named PREFIX00000.. from raw sockets: one connection and
 * one ACQUIRE each, at most 500 connecting at once, bounded by 60 s.
 */
async function holdMany(port: number, count: number, prefix: string): Promise<{ close(): void }> {
  const sockets: import("bun").Socket<{ got: number }>[] = [];
  const events = new Wakeup();
  let granted = 0;
  let failed = 0;
  const BATCH = 500;
  const close = () => {
    for (const socket of sockets) socket.terminate();
  };
  try {
    for (let start = 0; start < count; start += BATCH) {
      const end = Math.min(count, start + BATCH);
      const connects: Promise<unknown>[] = [];
      for (let i = start; i < end; i++) {
        const frame = encodeAcquire({ name: `${prefix}${String(i).padStart(5, "0")}`, leaseMs: 120_000, owner: `bulk-${i}`, try: false });
        connects.push(
          Bun.connect<{ got: number }>({
            hostname: "127.0.0.1",
            port,
            data: { got: 0 },
            socket: {
              open(socket) {
                socket.write(frame);
              },
              data(socket, chunk) {
                // The first answer is ACQUIRED: a 4-byte header and an 8-byte token.
                if (socket.data.got === 0) {
                  if (chunk[0] === FrameType.ACQUIRED) granted++;
                  else failed++;
                  events.wake();
                }
                socket.data.got += chunk.length;
              },
              close() {
                failed++;
                events.wake();
              },
            },
          }).then((socket) => sockets.push(socket)),
        );
      }
      await Promise.all(connects);
      await events.until(() => granted + failed >= end, 30_000, () => `grants ${granted}/${end}, failed ${failed}`);
      if (failed > 0) throw new Error(`${failed} of the bulk claims failed`);
    }
  } catch (error) {
    close();
    throw error;
  }
  return { close };
}
