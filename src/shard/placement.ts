/**
 * Placement: which shard a lock name belongs to, by rendezvous (highest
 * random weight) hashing over the shard NAMES (docs/protocol.md section
 * 12.1, byte by byte, with test vectors in test/conformance/placement.json
 * that the Go and Python clients check too):
 *
 *     weight(shard, lock) = the first 8 bytes of
 *                           SHA-256( UTF-8(shard) || 0x00 || UTF-8(lock) ),
 *                           read as an unsigned big-endian 64-bit integer
 *     shard of lock       = the shard with the largest weight; on equal
 *                           weights, the name first in byte order
 *
 * Only names go into the hash: moving a shard to other machines moves no
 * lock, and adding a shard moves exactly the names whose new weight beats
 * their old winner (about 1/(N+1) of them), each to the new shard.
 *
 * Pure: used by the client library, the CLI and the server's guard. On
 * Bun it hashes with Bun.SHA256 into reused buffers; on Node (the client
 * library runs there too) with node:crypto. Both are checked on the vectors. Comparing the 8 bytes
 * lexicographically is comparing the big-endian integers, so no 64-bit
 * arithmetic is needed.
 */
import type { Hash } from "node:crypto";
import { createRequire } from "node:module";
import { AddressError } from "../net/address.ts";
import { shardNameProblem, type ServerMap } from "./map.ts";

const encoder = new TextEncoder();

/**
 * node:crypto's createHash, loaded on first use: importing node:crypto costs
 * a Bun process about 2.5 ms (compiled, Bun 1.4), where `lockd run` and the
 * server hash with Bun.SHA256 and most clients have one shard and hash
 * nothing.
 */
let nodeCreateHash: ((algorithm: string) => Hash) | undefined;
function createHash(algorithm: string): Hash {
  nodeCreateHash ??= (createRequire(import.meta.url)("node:crypto") as typeof import("node:crypto")).createHash;
  return nodeCreateHash(algorithm);
}

/** The 8-byte weight of `lock` on `shard` (big-endian). */
export function weightBytes(shard: string, lock: string | Uint8Array): Uint8Array {
  const hash = createHash("sha256");
  hash.update(encoder.encode(shard));
  hash.update(ZERO);
  hash.update(typeof lock === "string" ? encoder.encode(lock) : lock);
  return new Uint8Array(hash.digest().subarray(0, 8));
}

/** The weight as a hex string of 16 digits (what the test vectors list). */
export function weightHex(shard: string, lock: string | Uint8Array): string {
  return Buffer.from(weightBytes(shard, lock)).toString("hex");
}

const ZERO = new Uint8Array(1);

/** Bun's SHA-256 (no hash object per call), or null on Node. */
const BUN_SHA256: ((input: Uint8Array, out: Uint8Array) => unknown) | null =
  typeof Bun !== "undefined" ? (input, out) => Bun.SHA256.hash(input, out) : null;

/** -1, 0, 1 as `a` is below, equal to or above `b` (8-byte big-endian weights). */
function compareWeights(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < 8; i++) {
    if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  }
  return 0;
}

/**
 * A set of shard names and the placement over them. Names are validated
 * (shardNameProblem) and may be given in any order: the placement does
 * not depend on it.
 */
export class Placement {
  readonly shards: readonly string[];
  /** UTF-8(shard) || 0x00 for each shard: the hash's fixed prefix. */
  private readonly prefixes: readonly Uint8Array[];
  private readonly longestPrefix: number;
  private scratch = new Uint8Array(1024);
  private readonly digest = new Uint8Array(64);
  private readonly bestWeight = new Uint8Array(8);

  constructor(shards: readonly string[]) {
    if (shards.length === 0) throw new AddressError("no shard names given (example: alpha,beta)", "");
    const seen = new Set<string>();
    for (const shard of shards) {
      const problem = shardNameProblem(shard);
      if (problem !== null) throw new AddressError(problem, shard);
      if (seen.has(shard)) throw new AddressError(`shard ${JSON.stringify(shard)} is named twice`, shard);
      seen.add(shard);
    }
    this.shards = [...shards];
    this.prefixes = shards.map((shard) => {
      const bytes = encoder.encode(shard);
      const prefix = new Uint8Array(bytes.length + 1);
      prefix.set(bytes);
      return prefix;
    });
    this.longestPrefix = Math.max(...this.prefixes.map((p) => p.length));
  }

  /** The index (in `shards`) of the shard `lock` belongs to. `lock` as text or its UTF-8 bytes. */
  indexOf(lock: string | Uint8Array): number {
    if (this.shards.length === 1) return 0;
    const bytes = typeof lock === "string" ? encoder.encode(lock) : lock;
    return BUN_SHA256 === null ? this.indexOfPortable(bytes) : this.indexOfBun(bytes, BUN_SHA256);
  }

  /** node:crypto (Node and Bun): one hash object per shard. */
  private indexOfPortable(bytes: Uint8Array): number {
    let best = -1;
    let bestWeight: Uint8Array | null = null;
    for (let i = 0; i < this.prefixes.length; i++) {
      const weight = createHash("sha256").update(this.prefixes[i]!).update(bytes).digest();
      const order = bestWeight === null ? 1 : compareWeights(weight, bestWeight);
      if (order > 0 || (order === 0 && this.shards[i]! < this.shards[best]!)) {
        best = i;
        bestWeight = weight;
      }
    }
    return best;
  }

  /**
   * Bun's one-shot SHA-256 into reused buffers (the server's guard runs
   * once per ACQUIRE): the name is copied once, right after the longest
   * prefix, and each shard's prefix is written just before it.
   */
  private indexOfBun(bytes: Uint8Array, sha256: (input: Uint8Array, out: Uint8Array) => unknown): number {
    const at = this.longestPrefix;
    if (this.scratch.length < at + bytes.length) this.scratch = new Uint8Array(at + bytes.length + 256);
    const scratch = this.scratch;
    scratch.set(bytes, at);
    const digest = this.digest;
    const best8 = this.bestWeight;
    let best = -1;
    for (let i = 0; i < this.prefixes.length; i++) {
      const prefix = this.prefixes[i]!;
      scratch.set(prefix, at - prefix.length);
      sha256(scratch.subarray(at - prefix.length, at + bytes.length), digest);
      const order = best < 0 ? 1 : compareWeights(digest, best8);
      if (order > 0 || (order === 0 && this.shards[i]! < this.shards[best]!)) {
        best = i;
        for (let k = 0; k < 8; k++) best8[k] = digest[k]!;
      }
    }
    return best;
  }

  /** The name of the shard `lock` belongs to. */
  shardOf(lock: string | Uint8Array): string {
    return this.shards[this.indexOf(lock)]!;
  }
}

/** The placement of a named map; null for a plain list (one unnamed shard: nothing to place). */
export function placementOf(map: ServerMap): Placement | null {
  if (map.shards.length === 1 && map.shards[0]!.name === "") return null;
  return new Placement(map.shards.map((shard) => shard.name));
}

/** "alpha,beta,gamma (generation 2)": a map as the server and the client describe it. */
export function describeShards(shards: readonly string[], generation: number): string {
  return `${shards.join(",")} (generation ${generation})`;
}
