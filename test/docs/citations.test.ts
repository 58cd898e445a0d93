/**
 * The docs stand on this repository alone: every file they link, name
 * ("how-it-works.md") or quote as a path (`src/client/schedule.ts`) exists
 * here, every "X.md section N" (and a bare "section N", meaning the same
 * page) names a numbered heading that X has, and every #anchor of a link is
 * a heading of its target.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
const PAGES = ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

const texts = new Map<string, string>();
for (const page of PAGES) texts.set(page, await Bun.file(join(ROOT, page)).text());

/** Text outside fenced code blocks (a sample log or shell line is not a citation). */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, "");
}

/** Headings of a page: their numbers ("8.3") and GitHub anchors ("83-pessimism-count-from-the-send"). */
function headings(text: string): { numbers: Set<string>; anchors: Set<string> } {
  const numbers = new Set<string>();
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of prose(text).split("\n")) {
    const m = /^#{1,6}\s+(.*)$/.exec(line);
    if (m === null) continue;
    const title = m[1]!.trim();
    const number = /^(\d+(?:\.\d+)*)\.?\s/.exec(title);
    if (number !== null) numbers.add(number[1]!);
    const slug = title
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return { numbers, anchors };
}

/** A page name as written ("protocol.md", "docs/protocol.md", "../deploy/x") to a repository path, or null. */
function locate(from: string, name: string): string | null {
  const candidates = [join(dirname(from), name), name, join("docs", name)];
  for (const candidate of candidates) {
    const path = relative(ROOT, resolve(ROOT, candidate));
    if (!path.startsWith("..") && existsSync(join(ROOT, path))) return path;
  }
  return null;
}

describe.each(PAGES)("%s", (page) => {
  const text = prose(texts.get(page)!);

  test("every link to a file in the repository resolves, anchors included", () => {
    const broken: string[] = [];
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue; // http:, mailto:
      const [path, anchor] = target.split("#") as [string, string | undefined];
      const file = path === "" ? page : locate(page, path);
      if (file === null) {
        broken.push(`${target}: no such file`);
        continue;
      }
      if (anchor !== undefined && file.endsWith(".md") && !headings(texts.get(file) ?? "").anchors.has(anchor)) broken.push(`${target}: no heading #${anchor}`);
    }
    expect(broken).toEqual([]);
  });

  test("every repository path it quotes (`src/...`, `test/...`) exists", () => {
    const missing: string[] = [];
    for (const m of text.matchAll(/`((?:src|test|bench|deploy|bin|docs)\/[\w./-]*)`/g)) {
      if (!existsSync(join(ROOT, m[1]!))) missing.push(m[1]!);
    }
    expect(missing).toEqual([]);
  });

  test("every X.md it names exists here, and every section it cites is a heading there", () => {
    const broken: string[] = [];
    // "protocol.md section 8.3", "how-it-works.md, section 2", "design.md 4a", or a bare "section 6" (this page).
    const re = /(?:\b([\w./-]+\.md)\b(?:\)|\])?(?:,? (section|rule|§) ?(\d+(?:\.\d+)*)| (\d+\w*)\b)?)|\bsection (\d+(?:\.\d+)*)\b/g;
    for (const m of text.matchAll(re)) {
      const [whole, name, kind, number, bareNumber, ownSection] = m;
      if (name !== undefined) {
        const file = locate(page, name);
        if (file === null) {
          broken.push(`${whole}: ${name} is not in this repository`);
          continue;
        }
        if (bareNumber !== undefined) broken.push(`${whole}: say "section ${bareNumber}"`);
        if (kind === "rule") broken.push(`${whole}: cite the section ("section 7, rule N")`);
        if (number !== undefined && !headings(texts.get(file)!).numbers.has(number)) broken.push(`${whole}: ${name} has no section ${number}`);
      } else if (ownSection !== undefined && !headings(text).numbers.has(ownSection)) {
        // A bare "section N" right after a link to another page belongs to that page.
        const before = text.slice(Math.max(0, m.index! - 80), m.index!);
        const linked = /\]\(([\w./-]+\.md)\)[^.]*$/.exec(before);
        const file = linked === null ? null : locate(page, linked[1]!);
        if (file === null || !headings(texts.get(file)!).numbers.has(ownSection)) broken.push(`${whole}: ${page} has no section ${ownSection}`);
      }
    }
    expect(broken).toEqual([]);
  });
});
