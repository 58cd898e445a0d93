/**
 * isatty(3) for `lockd run`, which decides on every run whether COMMAND
 * gets a process group of its own (stdin not a terminal) or stays in the
 * terminal's job. node:tty's isatty would do, but loading node:tty (which
 * loads node:net and the stream classes) costs `lockd run` about 3 ms of
 * its start-up (compiled, Bun 1.4). So, in order: Bun's own tty binding
 * (the function behind node:tty's isatty, without the module: about 0.02
 * ms), the C library's isatty through bun:ffi (about 0.2 ms: bun:ffi
 * compiles a trampoline), and node:tty only where neither works.
 */
import { createRequire } from "node:module";
import { LIBC_NAMES } from "./libc.ts";

let nativeIsatty: ((fd: number) => boolean) | null | undefined;

function binding(): ((fd: number) => boolean) | null {
  try {
    const tty = (process as unknown as { binding(name: string): { isTTY?: unknown } }).binding("tty_wrap");
    if (typeof tty.isTTY === "function") {
      const isTTY = tty.isTTY as (fd: number) => unknown;
      return (fd) => isTTY(fd) === true;
    }
  } catch {
    // not Bun, or a Bun without it
  }
  return null;
}

function libc(): ((fd: number) => boolean) | null {
  const { dlopen, FFIType } = createRequire(import.meta.url)("bun:ffi") as typeof import("bun:ffi");
  for (const name of LIBC_NAMES[process.platform] ?? []) {
    try {
      const lib = dlopen(name, { isatty: { args: [FFIType.i32], returns: FFIType.i32 } });
      return (fd) => lib.symbols.isatty(fd) === 1;
    } catch {
      // the next name
    }
  }
  return null;
}

/** Whether file descriptor `fd` is a terminal. */
export function isatty(fd: number): boolean {
  if (nativeIsatty === undefined) nativeIsatty = binding() ?? libc();
  if (nativeIsatty !== null) return nativeIsatty(fd);
  return (createRequire(import.meta.url)("node:tty") as typeof import("node:tty")).isatty(fd);
}
