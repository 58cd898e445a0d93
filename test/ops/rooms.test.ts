// The ops room's interfaces (issue 19): it reads a lock source and a role
// source (src/ops/sources.ts), never the engine's nodes or the server
// object, and the daemon is the only place that wires ops, failover and
// the lock server together. Checked on the imports of the source files.
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

const SRC = join(import.meta.dir, "../../src");

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? files(path) : path.endsWith(".ts") ? [path] : [];
  });
}

/** Every `import ... from "..."` of a file: the names it takes and the module, resolved to src/. */
function imports(file: string): { names: string; from: string; typeOnly: boolean }[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/^(?:import|export)\s+(type\s+)?(\{[^}]*\}|\*\s+as\s+\w+|\w+)?[^;]*?from\s+"([^"]+)";/gms)].map((m) => ({
    names: m[2] ?? "",
    from: m[3]!.startsWith(".") ? relative(SRC, join(file, "..", m[3]!)) : m[3]!,
    typeOnly: m[1] !== undefined,
  }));
}

test("src/ops imports neither the lock server, its connections, the daemon nor the failover shell, and no engine node", () => {
  const ops = files(join(SRC, "ops"));
  expect(ops.length).toBeGreaterThan(5);
  for (const file of ops) {
    for (const { names, from } of imports(file)) {
      const where = `${relative(SRC, file)} imports ${names} from ${from}`;
      expect(from.startsWith("failover/"), where).toBe(false);
      // Only the process's open-file limit is read from src/server (a figure of /metrics).
      if (from.startsWith("server/")) expect(from, where).toBe("server/limits.ts");
      expect(/\b(Lock|Session|Engine|EngineView|Conn|LockServer|Roles)\b/.test(names), where).toBe(false);
    }
  }
});

test("only the daemon wires the ops server to the lock server and the failover shell", () => {
  // A type-only import (the CLI's words for the ops server's messages) wires nothing.
  const wiring = files(SRC).filter((file) => imports(file).some(({ from, typeOnly }) => from === "ops/server.ts" && !typeOnly));
  expect(wiring.map((file) => relative(SRC, file))).toEqual(["server/daemon.ts"]);
});

test("the lock server keeps its engine private: no caller outside src/server reaches `.engine` of a server", () => {
  for (const file of files(SRC)) {
    const path = relative(SRC, file);
    if (path.startsWith("core/") || path.startsWith("server/")) continue;
    expect(/\bserver\??\.(engine|view)\b/.test(readFileSync(file, "utf8")), path).toBe(false);
  }
});
