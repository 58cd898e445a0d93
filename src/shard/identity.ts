/**
 * Which shard of which map a server is: the one shape every room reads (the
 * guard, generation tokens, the failover holder, the ops answers). A server
 * that is not one shard of several has `shard` null and no names.
 */

export interface ShardIdentity {
  /** This server's shard; null when the server is not one shard of several. */
  readonly shard: string | null;
  /** Every shard's name, sorted (empty when `shard` is null). */
  readonly shards: readonly string[];
  /** The map's generation: the high bits of every token (src/shard/tokens.ts). */
  readonly generation: number;
}

/** A server without shards, at generation 0. */
export const NO_SHARDS: ShardIdentity = { shard: null, shards: [], generation: 0 };
