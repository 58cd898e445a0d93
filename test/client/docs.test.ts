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
import { WirePeer, startServer } from "../helpers/wire.ts";
import { eventually } from "./fake-server.ts";
import { engineOf } from "../helpers/engine.ts";

const ROOT = resolve(import.meta.dir, "../..");
const doc = await Bun.file(join(ROOT, "docs/client.md")).text();
const examples = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
const dir = mkdtempSync(join(tmpdir(), "lockd-docs-"));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("docs/client.md has runnable examples", () => {
  expect(examples.length).toBeGreaterThanOrEqual(4);
});

/**
 * The library runs on Node.js 20+, and Node 20 and 22 cannot parse an
 * `await using` declaration (Bun can, and lowers it, so the runs below
 * would not notice): the examples use try/finally.
 */
test("docs/client.md's examples parse on Node.js 20: no `await using`", () => {
  const offending = examples.map((source, i) => ({ i: i + 1, line: source.split("\n").find((l) => /\bawait\s+using\s+[A-Za-z_$]/.test(l)) }));
  expect(offending.filter((e) => e.line !== undefined)).toEqual([]);
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
    await eventually(() => engineOf(server).sessions.size === 0, 5000, "every session of the example to end");
  }, 20_000);
});

/**
 * docs/writing-a-client.md section 6 is a byte-level session: replay every
 * `X -> bytes` against a real server and check every `X <- bytes` is what
 * that connection receives next, byte for byte.
 */
test("writing-a-client.md: the worked byte-level session is what the server says", async () => {
  const text = await Bun.file(join(ROOT, "docs/writing-a-client.md")).text();
  const section = text.slice(text.indexOf("## 6."), text.indexOf("## 7."));
  type Step = { peer: string; dir: "->" | "<-" | "--"; bytes: number[] };
  const steps: Step[] = [];
  const encoder = new TextEncoder();
  const hexAndText = (rest: string): number[] => {
    const bytes: number[] = [];
    const m = /^((?:[0-9a-f]{2}\s+)*[0-9a-f]{2})?\s*(?:"([^"]*)")?/.exec(rest.trim())!;
    if (m[1]) bytes.push(...m[1].split(/\s+/).map((h) => parseInt(h, 16)));
    if (m[2] !== undefined) bytes.push(...encoder.encode(m[2]));
    return bytes;
  };
  for (const line of section.split("\n")) {
    if (!line.startsWith("    ")) continue;
    const step = /^\s+(\w+) (->|<-|--) (.*)$/.exec(line);
    if (step) steps.push({ peer: step[1]!, dir: step[2] as Step["dir"], bytes: step[2] === "--" ? [] : hexAndText(step[3]!) });
    else if (/^\s+(?:[0-9a-f]{2}\s*)+$/.test(line)) steps.at(-1)!.bytes.push(...hexAndText(line));
  }
  expect(steps.length).toBeGreaterThan(15);

  const server = startServer();
  const peers = new Map<string, WirePeer>();
  const received = new Map<string, number>();
  try {
    for (const step of steps) {
      if (step.dir === "--") {
        if (step.peer === "server") void server.stop();
        else peers.get(step.peer)!.end();
        continue;
      }
      let peer = peers.get(step.peer);
      if (peer === undefined) {
        peer = await WirePeer.connect(server.port);
        peers.set(step.peer, peer);
        received.set(step.peer, 0);
      }
      if (step.dir === "->") {
        peer.write(new Uint8Array(step.bytes));
        continue;
      }
      const index = received.get(step.peer)!;
      received.set(step.peer, index + 1);
      const frame = await peer.frame(index);
      const bytes = [frame.type, frame.flags, frame.body.length >> 8, frame.body.length & 0xff, ...frame.body];
      expect({ peer: step.peer, bytes: hex(bytes) }).toEqual({ peer: step.peer, bytes: hex(step.bytes) });
    }
  } finally {
    for (const peer of peers.values()) peer.terminate();
    await server.stop();
  }
});

function hex(bytes: readonly number[]): string {
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(" ");
}
