/**
 * bench/floor/acquire.ts in a binary that carries all of lockd's code: the
 * same program, compiled with lockd's flags (--splitting too) together with
 * every module of src/cli/main.ts, which it never loads. Against the plain
 * floor it shows what a start costs a single binary for holding the whole
 * server beside the command (bench/startup.ts).
 *
 * Usage: acquire-in-lockd HOST:PORT NAME [-- COMMAND ARGS...]
 */
import "./acquire.ts";

// Never true (acquire.ts exits first): it only makes the bundle hold lockd's chunks.
if (process.env.LOCKD_BENCH_NEVER === "load lockd") await import("../../src/cli/main.ts");
