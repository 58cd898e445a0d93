/**
 * The server's side of sharding: the guard that refuses an ACQUIRE for a
 * name that belongs to another shard (ERROR WRONG_SHARD, docs/protocol.md
 * section 12.2). Pure: the engine calls it once per ACQUIRE (never per
 * heartbeat).
 */
import type { ShardIdentity } from "./identity.ts";
import { encodeError } from "../protocol/frames.ts";
import { ErrorCode } from "../protocol/constants.ts";
import { wrongShardMessage } from "./mismatch.ts";
import { Placement } from "./placement.ts";

/**
 * The guard for `settings.shard`: null when every name is ours (no shard,
 * or a map of one), else a function that returns the WRONG_SHARD frame for
 * a name another shard owns, and null for ours.
 */
export function shardGuard(settings: ShardIdentity): ((name: string) => Uint8Array | null) | null {
  if (settings.shard === null || settings.shards.length < 2) return null;
  const placement = new Placement(settings.shards);
  const self = settings.shard;
  // One message per other shard, made once.
  const messages = new Map(settings.shards.map((owner) => [owner, wrongShardMessage({ shard: self, shards: settings.shards, generation: settings.generation, owner })]));
  return (name) => {
    const owner = placement.shardOf(name);
    if (owner === self) return null;
    return encodeError(ErrorCode.WRONG_SHARD, messages.get(owner)!);
  };
}
