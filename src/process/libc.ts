/**
 * The C libraries bun:ffi tries, by platform (the list of tokens/dir-lock.ts):
 * glibc, musl (Alpine), macOS, FreeBSD. Its own module so that tty.ts, on
 * every `lockd run`, loads neither limits.ts nor its node:fs.
 */
export const LIBC_NAMES: Record<string, readonly string[]> = {
  linux: ["libc.so.6", "libc.musl-x86_64.so.1", "libc.musl-aarch64.so.1", "/lib/ld-musl-x86_64.so.1", "/lib/ld-musl-aarch64.so.1", "libc.so"],
  darwin: ["libc.dylib", "/usr/lib/libSystem.B.dylib"],
  freebsd: ["libc.so.7"],
};
