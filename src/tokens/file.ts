/**
 * FileTokens: fencing tokens that keep increasing across restarts and
 * crashes of the server that uses the same data directory.
 *
 * The rule is reserve-before-issue. `<data-dir>/tokens` holds a floor: no
 * token above it has ever been issued. Before the first token of a block is
 * handed out, the block's end is written durably (write to tokens.tmp,
 * fsync, rename over tokens, fsync the directory). A crash therefore loses at
 * most the unused rest of a block (tokens skip, which fencing allows) but can
 * never make the server issue a token it issued before. On a clean shutdown
 * `close()` writes the last token issued, so a restart skips nothing.
 *
 * Only the first grant of each block waits for the disk (one fsync pair);
 * with the default block of 100,000 that is rare on any real load.
 *
 * While a FileTokens is open it holds the directory exclusively (DirLock: an
 * flock(2) the kernel drops when the process dies): a second server on the
 * same directory would reserve blocks of its own and the floor could go
 * back when one of them stops.
 *
 * The first block is reserved by `start()`, which `lockd serve` calls only
 * once its listeners are bound: a start that fails (a port in use) leaves
 * the floor as it was.
 *
 * The file is one line, `lockd-tokens v1 floor=<n> crc=<crc32 hex>`. A file
 * that does not parse or whose checksum is wrong stops start-up: restarting
 * tokens from 1 would silently break every guarded resource.
 */
import { mkdirSync, readFileSync, statSync } from "node:fs";
import { crc, replaceDurably } from "./durable.ts";
import { dirname, join } from "node:path";
import type { TokenSource } from "../core/tokens.ts";
import { DirLock, DirLockError } from "./dir-lock.ts";

const FILE = "tokens";
const FORMAT = /^lockd-tokens v1 floor=(\d{1,16}) crc=([0-9a-f]{8})\n?$/;

export class TokenStoreError extends Error {
  constructor(
    message: string,
    options?: ErrorOptions,
    /**
     * "corrupt": the floor file is there but unreadable as a floor; "io": the
     * directory or file cannot be used; "busy": another process (a running
     * server) holds the directory.
     */
    readonly kind: "corrupt" | "io" | "busy" = "io",
    /**
     * "other": the operator should use another directory or fix this one;
     * "file": the path given for the directory is a file. The CLI words
     * the advice with its flag (src/cli/files.ts storeMessage).
     */
    readonly advice: "other" | "file" | null = null,
  ) {
    super(message, options);
    this.name = "TokenStoreError";
  }
}

function line(floor: number): string {
  const body = `lockd-tokens v1 floor=${floor}`;
  return `${body} crc=${crc(body)}\n`;
}


/** Read the floor from `dir`: 0 when there is no file yet. Throws TokenStoreError when it is unreadable or corrupt. */
export function readFloor(dir: string): number {
  const path = join(dir, FILE);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw new TokenStoreError(`cannot read the token floor ${path}: ${(error as Error).message}`, { cause: error });
  }
  const match = FORMAT.exec(text);
  const floor = match === null ? Number.NaN : Number(match[1]);
  if (match === null || !Number.isSafeInteger(floor) || crc(`lockd-tokens v1 floor=${match[1]}`) !== match[2]) {
    throw new TokenStoreError(
      `the token floor ${path} is corrupt (${JSON.stringify(text.slice(0, 80))}); refusing to start, since tokens must never go back. ` +
        `Restore the file from a backup, or, if every guarded resource can accept it, write a floor above any token ever issued ` +
        `(see docs/operations.md, "Fencing tokens and the data directory").`,
      undefined,
      "corrupt",
    );
  }
  return floor;
}

/** Durably replace the floor file: write a temp file, fsync, rename, fsync the directory. */
export function writeFloor(dir: string, floor: number): void {
  const path = join(dir, FILE);
  try {
    replaceDurably(dir, path, line(floor));
  } catch (error) {
    throw new TokenStoreError(`cannot write the token floor ${path}: ${(error as Error).message}`, { cause: error });
  }
}

export class FileTokens implements TokenSource {
  last: number;
  /** The highest token the floor file allows; next() reserves more past it. */
  private reserved: number;

  private constructor(
    readonly dir: string,
    readonly blockSize: number,
    floor: number,
    private readonly onFatal: (error: TokenStoreError) => never,
    private readonly lock: DirLock,
  ) {
    this.last = floor;
    this.reserved = floor;
  }

  /**
   * Open (creating) the data directory, lock it for this process and read
   * the floor. Reserves nothing: `start()` does, once the server can serve.
   * `blockSize`: tokens reserved per write of the floor (`--token-block`).
   */
  static open(dir: string, blockSize: number, onFatal: (error: TokenStoreError) => never = rethrow): FileTokens {
    if (!Number.isSafeInteger(blockSize) || blockSize < 1) throw new RangeError(`token block must be a positive integer, got ${blockSize}`);
    const lock = lockDataDir(dir);
    try {
      return new FileTokens(dir, blockSize, readFloor(dir), onFatal, lock);
    } catch (error) {
      lock.release();
      throw error;
    }
  }

  /**
   * Reserve the first block now, so an unwritable floor fails at start-up,
   * not at the first grant. Throws TokenStoreError. (Without it the first
   * `next()` reserves.)
   */
  start(): void {
    if (this.last < this.reserved) return;
    const end = this.last + this.blockSize;
    writeFloor(this.dir, end);
    this.reserved = end;
  }

  next(): number {
    if (this.last >= this.reserved) this.reserve(); // once per block: the only disk wait on the grant path
    return ++this.last;
  }

  /**
   * Clean shutdown: record the last token issued, so the next start skips
   * nothing, then let go of the directory (also when the write fails).
   */
  close(): void {
    try {
      if (this.lock.held) {
        writeFloor(this.dir, this.last);
        this.reserved = this.last;
      }
    } finally {
      this.lock.release();
    }
  }

  /**
   * Let go of the directory without writing anything, as a process that
   * dies does: the floor stays at the reserved block's end.
   */
  abandon(): void {
    this.lock.release();
  }

  /**
   * When a block cannot be reserved (disk full, directory gone) no token can
   * be issued safely, and a grant without one would break fencing: `onFatal`
   * decides. The server logs and exits, so clients move to a healthy one.
   */
  private reserve(): void {
    const end = this.last + this.blockSize;
    try {
      writeFloor(this.dir, end);
    } catch (error) {
      this.onFatal(error as TokenStoreError);
    }
    this.reserved = end;
  }
}

/**
 * Create `dir` if needed and lock it, with one clear message for each way
 * this fails: a file in the way, no permission, a read-only file system,
 * another server holding it.
 */
export function lockDataDir(dir: string): DirLock {
  prepareDataDir(dir);
  try {
    return DirLock.acquire(dir);
  } catch (error) {
    if (!(error instanceof DirLockError)) throw error;
    if (error.kind === "held") throw new TokenStoreError(error.message, { cause: error }, "busy");
    if (error.kind === "unsupported") throw new TokenStoreError(error.message, { cause: error });
    const cause = error.cause as NodeJS.ErrnoException | undefined;
    const why = cause?.code === undefined ? error.message : `${errnoText(cause.code) ?? cause.message}`;
    throw new TokenStoreError(`cannot use the data directory ${dir}: ${why}`, { cause: error }, "io", "other");
  }
}

function errnoText(code: string): string | undefined {
  if (code === "EACCES" || code === "EPERM") return "permission denied: the server's user cannot write there";
  if (code === "EROFS") return "it is on a read-only file system";
  if (code === "ENOSPC") return "no space left on the device";
  return undefined;
}

/** mkdir -p, turning ENOTDIR / EEXIST-on-a-file / EACCES / EROFS into sentences. */
function prepareDataDir(dir: string): void {
  const fileAt = (path: string): boolean => {
    try {
      return !statSync(path).isDirectory();
    } catch {
      return false;
    }
  };
  if (fileAt(dir)) throw new TokenStoreError(`the data directory ${dir} is a file, not a directory`, undefined, "io", "file");
  try {
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOTDIR" || code === "EEXIST") {
      let up = dirname(dir);
      while (up !== dirname(up) && !fileAt(up)) up = dirname(up);
      const culprit = fileAt(up) ? `${up} is a file, not a directory` : (error as Error).message;
      throw new TokenStoreError(`cannot create the data directory ${dir}: ${culprit}`, { cause: error }, "io", "other");
    }
    const why = (code !== undefined ? errnoText(code) : undefined) ?? (error as Error).message;
    throw new TokenStoreError(`cannot create the data directory ${dir}: ${why}`, { cause: error }, "io", "other");
  }
}

function rethrow(error: TokenStoreError): never {
  throw error;
}
