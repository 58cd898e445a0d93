/**
 * Replacing a one-line record of the data directory so that a crash leaves
 * either the old line or the new one, never a torn one: write a temp file,
 * fsync it, rename it over the record, fsync the directory. The token floor
 * and the lease record are written this way; `crc` checksums their lines.
 */
import { closeSync, fsyncSync, openSync, renameSync, writeSync } from "node:fs";

/** Durably replace `path` (in directory `dir`) with `text`. Throws the file system's error. */
export function replaceDurably(dir: string, path: string, text: string): void {
  const temp = `${path}.tmp`;
  const fd = openSync(temp, "w", 0o644);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temp, path);
  const dirFd = openSync(dir, "r");
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

/** The CRC-32 of a record's body, as 8 hex digits. */
export function crc(text: string): string {
  return (Bun.hash.crc32(text) >>> 0).toString(16).padStart(8, "0");
}
