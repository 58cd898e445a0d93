// What each command loads: the bundle `npm run build` compiles (bun build
// --splitting) has a chunk per command, and a client command's chunks, with
// everything they import, hold no zod, no server, ops server, coordinator or
// page, and import none of the Node modules whose loading costs a command
// milliseconds (node:net, node:tls, node:crypto, node:tty; for lockd run
// node:fs too: docs/performance.md).
// And the IP literal checks that replace node:net's agree with it.
import { expect, test } from "bun:test";
import * as net from "node:net";
import { join } from "node:path";
import { isIPv4, isIPv6 } from "../../src/net/address.ts";

const ROOT = join(import.meta.dir, "../..");

interface Chunk {
  /** The source modules bundled into it (its `// path` comments). */
  readonly modules: string[];
  /** Chunks it imports statically. */
  readonly chunks: string[];
  /** Chunks it imports dynamically, by the specifier main.ts wrote. */
  readonly dynamic: string[];
  /** Built-in modules it imports statically ("fs", "node:net", "bun:ffi"). */
  readonly builtins: string[];
}

async function bundle(): Promise<Map<string, Chunk>> {
  const result = await Bun.build({ entrypoints: [join(ROOT, "src/cli/main.ts")], splitting: true, target: "bun", format: "esm" });
  expect(result.success).toBe(true);
  const chunks = new Map<string, Chunk>();
  for (const output of result.outputs) {
    if (!output.path.endsWith(".js")) continue;
    const text = await output.text();
    const name = output.path.replace(/^.*\//, "");
    const specifiers = [...text.matchAll(/^(?:import|export)\b[^;]*?\bfrom\s*"([^"]+)"/gms)].map((m) => m[1]!);
    chunks.set(name, {
      modules: [...text.matchAll(/^\/\/ ((?:src|node_modules)\/\S+)$/gm)].map((m) => m[1]!),
      chunks: specifiers.filter((s) => s.startsWith("./")).map((s) => s.slice(2)),
      dynamic: [...text.matchAll(/import\("\.\/([^"]+)"\)/g)].map((m) => m[1]!),
      builtins: specifiers.filter((s) => !s.startsWith("./")),
    });
  }
  return chunks;
}

/** A chunk and every chunk it imports statically. */
function closure(chunks: Map<string, Chunk>, start: string): Chunk[] {
  const seen = new Set<string>();
  const out: Chunk[] = [];
  const visit = (name: string) => {
    if (seen.has(name)) return;
    seen.add(name);
    const chunk = chunks.get(name);
    expect({ name, found: chunk !== undefined }).toEqual({ name, found: true });
    out.push(chunk!);
    for (const next of chunk!.chunks) visit(next);
  };
  visit(start);
  return out;
}

const HEAVY_BUILTINS = ["net", "tls", "crypto", "tty", "node:net", "node:tls", "node:crypto", "node:tty"];
const SERVER_ROOMS = /^src\/(server|ops|core|failover|tokens)\/|^src\/cli\/(serve|serving|coordinator|words|config)\.ts$|^node_modules\/zod\//;
/**
 * Server-side modules a client command may load, pure functions both sides
 * share: status words the coordinator's replication report as the server
 * does; the admin verbs read a fencing token and a session id as the ops
 * server does.
 */
const SHARED = new Set(["src/failover/replication.ts", "src/ops/admin.ts"]);

test("a client command loads no zod, no server and no node:net, node:tls, node:crypto or node:tty", async () => {
  const chunks = await bundle();
  const main = chunks.get("main.js")!;
  // main.js itself: the dispatch and nothing of any command.
  const entry = closure(chunks, "main.js").flatMap((c) => c.modules);
  expect(entry.filter((m) => m !== "src/cli/main.ts" && m !== "src/cli/exit.ts" && m !== "src/cli/errors.ts" && m !== "src/version.ts")).toEqual([]);
  /**
   * What a command loads: the chunk main.ts imports dynamically that holds
   * src/cli/FILE.ts (run.ts: the one run-fast.ts imports when the claim
   * needs the client), and that chunk's imports.
   */
  const byCommand = (file: string) => {
    const from = file === "run" ? chunks.get(main.dynamic.find((d) => chunks.get(d)?.modules.includes("src/cli/run-fast.ts"))!)! : main;
    const name = from.dynamic.find((d) => chunks.get(d)?.modules.includes(`src/cli/${file}.ts`));
    expect({ file, found: name !== undefined }).toEqual({ file, found: true });
    return closure(chunks, name!);
  };
  for (const command of ["run-fast", "run", "status", "admin", "shard-of"]) {
    const loaded = byCommand(command);
    const modules = loaded.flatMap((c) => c.modules);
    expect({ command, server: modules.filter((m) => SERVER_ROOMS.test(m) && !SHARED.has(m)) }).toEqual({ command, server: [] });
    expect({ command, builtins: loaded.flatMap((c) => c.builtins).filter((b) => HEAVY_BUILTINS.includes(b)) }).toEqual({ command, builtins: [] });
  }
  // lockd run, the command run most often, loads node:fs only when it reads a file (a certificate) or searches /proc.
  for (const file of ["run-fast", "run"]) expect(byCommand(file).flatMap((c) => c.builtins).filter((b) => b === "fs" || b === "node:fs")).toEqual([]);
  // Its fast start (a plain run granted at once) loads none of the client's machine (only its schedule), the protocol tables, the option parser or the help.
  const fast = byCommand("run-fast").flatMap((c) => c.modules);
  expect(fast.filter((m) => /^src\/(protocol|shard|net)\/|^src\/client\/(client|claim|machine|errors|lock|tls-problem)\.ts$|^src\/cli\/(run|options\/.*)\.ts$/.test(m))).toEqual([]);
  expect(fast).toEqual(expect.arrayContaining(["src/cli/run-fast.ts", "src/cli/run-holding.ts", "src/client/opened.ts", "src/client/bun-transport.ts"]));
  // And serve does load the server (the check above can fail).
  expect(byCommand("serve").flatMap((c) => c.modules)).toEqual(expect.arrayContaining(["src/server/daemon.ts", "src/cli/config.ts"]));
}, 30_000);

test("isIPv4 and isIPv6 agree with node:net's", () => {
  const samples = [
    "1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1.2.3.4 ", " 1.2.3.4", "1.2.3.-4", "a.b.c.d",
    "::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1::2::3", ":::", "::ffff:1.2.3.4", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4",
    "FFFF::", "ffff::FFFF", "g::1", "12345::", "fe80::1%eth0", "fe80::1%1", "fe80::1%", "fe80::1%a.b-c:d", "[::1]", "::1 ", "localhost", "",
  ];
  for (const host of samples) expect({ host, v4: isIPv4(host), v6: isIPv6(host) }).toEqual({ host, v4: net.isIPv4(host), v6: net.isIPv6(host) });
});
