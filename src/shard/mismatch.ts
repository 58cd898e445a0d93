/**
 * The words of a WRONG_SHARD refusal (docs/protocol.md section 12.2), both
 * ways: the server's message (what the guard sends), read back by a client,
 * which then says what differs between its map and the server's: the shard
 * names (and how many), the generation, or (names and generation the same)
 * which address it listed under which shard. The server cannot say that:
 * it does not know the client's map. Pure.
 */
import { describeShards } from "./placement.ts";

/** What a server that refused a name says about itself and the name. */
export interface ServerShardView {
  /** The server's shard. */
  readonly shard: string;
  /** The shard names of its map, in its order. */
  readonly shards: readonly string[];
  readonly generation: number;
  /** The shard the name belongs to in its map. */
  readonly owner: string;
}

/** The WRONG_SHARD message of a server that is `view.shard` of `view.shards`. */
export function wrongShardMessage(view: ServerShardView): string {
  return (
    `this server is shard ${view.shard} of ${describeShards(view.shards, view.generation)}, where this lock belongs to shard ${view.owner}: ` +
    `the client's server map differs from the servers'; fix the map (LOCKD_SERVER) and claim again`
  );
}

const MESSAGE = /^this server is shard ([a-z0-9][a-z0-9_-]*) of ([a-z0-9][a-z0-9_,-]*) \(generation (\d+)\), where this lock belongs to shard ([a-z0-9][a-z0-9_-]*):/;

/** The server's view from its WRONG_SHARD message, or null when the message is not in these words (another server). */
export function parseWrongShard(message: string): ServerShardView | null {
  const m = MESSAGE.exec(message);
  if (m === null) return null;
  return { shard: m[1]!, shards: m[2]!.split(","), generation: Number(m[3]), owner: m[4]! };
}

/** What the client knows of the claim that was refused. */
export interface ClientShardView {
  /** The shard names of the client's map, in its order. */
  readonly shards: readonly string[];
  readonly generation: number;
  /** The shard the client placed the name on. */
  readonly shard: string;
  /** The address of the client's map (of `shard`) that refused it, as HOST:PORT; undefined when not known. */
  readonly address: string | undefined;
}

/**
 * The refusal in the client's words, after "lock NAME: ": where the client
 * sent the name, what the server there is, and what differs. Without a
 * readable server message (`server` null), the server's own words.
 */
export function describeMismatch(client: ClientShardView, server: ServerShardView | null, serverMessage: string): string {
  const sentTo = client.address === undefined ? "" : ` and sent it to ${client.address}`;
  const head = `the client's map ${describeShards(client.shards, client.generation)} places it on shard ${client.shard}${sentTo}`;
  if (server === null) return `${head}, but ${serverMessage || "the server says it is another shard's"}`;
  const theirs = new Set(server.shards);
  const ours = new Set(client.shards);
  const onlyOurs = client.shards.filter((name) => !theirs.has(name));
  const onlyTheirs = server.shards.filter((name) => !ours.has(name));
  const sameNames = onlyOurs.length === 0 && onlyTheirs.length === 0;
  const sameGeneration = server.generation === client.generation;
  const differs: string[] = [];
  if (!sameNames) {
    const only = [
      onlyOurs.length > 0 ? `${onlyOurs.join(",")} only in the client's` : "",
      onlyTheirs.length > 0 ? `${onlyTheirs.join(",")} only in the server's` : "",
    ].filter((part) => part !== "");
    differs.push(`the shards (${client.shards.length} in the client's map, ${server.shards.length} in the server's; ${only.join("; ")})`);
  }
  if (!sameGeneration) differs.push(`the generation (${client.generation} in the client's map, ${server.generation} in the server's)`);
  if (server.shard !== client.shard) {
    const at = client.address ?? "the address it asked";
    differs.push(`the addresses: the client's map lists ${at}, a server of shard ${server.shard}, under shard ${client.shard}`);
  }
  const there = client.address === undefined ? "the server" : "the server there";
  const serverMap = sameNames && sameGeneration ? "of the same shards and generation" : `of ${describeShards(server.shards, server.generation)}`;
  const owner = server.owner === client.shard ? "" : `, where it belongs to shard ${server.owner}`;
  const what = differs.length === 0 ? `the maps differ` : `what differs is ${differs.join(", and ")}`;
  return `${head}, but ${there} is shard ${server.shard} ${serverMap}${owner}: ${what}; fix the map (LOCKD_SERVER) and claim again`;
}
