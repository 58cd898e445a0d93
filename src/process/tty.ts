/**
 * isatty(3) for `lockd run`, which decides on every run whether COMMAND
 * gets a process group of its own (stdin not a terminal) or stays in the
 * terminal's job. node:tty's isatty would do, but loading node:tty (which
 * loads node:net and the stream classes) costs `lockd run` about 3 ms of
 * its start-up (compiled, Bun 1.4): here the C library's isatty through
 * bun:ffi, and node:tty only where no C library can be opened.
 */
import { dlopen, FFIType } from "bun:ffi";
import { createRequire } from "node:module";
import { LIBC_NAMES } from "./libc.ts";

let libcIsatty: ((fd: number) => boolean) | null | undefined;

function load(): ((fd: number) => boolean) | null {
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
  if (libcIsatty === undefined) libcIsatty = load();
  if (libcIsatty !== null) return libcIsatty(fd);
  return (createRequire(import.meta.url)("node:tty") as typeof import("node:tty")).isatty(fd);
}
