/**
 * Shards under seeded random schedules: several engines, each one shard of
 * a map with its guard (src/shard/guard.ts) and its tokens in the map's
 * generation (src/shard/tokens.ts) over a counter of its own that survives
 * restarts (as a data directory's floor does), and clients whose maps lag
 * behind the servers' by random amounts. The map changes (a shard added or
 * removed, the generation raised) the way docs/operations.md says to roll
 * it: shards that lose names restart (or stop) first, shards that gain
 * names last, one server per step, with client traffic in between.
 *
 * Checked after every step:
 * - single grant: no lock name has an owner on two shards at once;
 * - placement: every grant is by the shard the granting server's map puts
 *   the name on (a client with a stale map is refused, never granted);
 * - tokens: every grant of a name is above every earlier grant of that name,
 *   and every token issued after a map change is above every token issued
 *   before it, on any shard.
 *
 * Self-tests break the procedure to show the checks catch it: `early-start`
 * starts the gaining shards before the losing ones have restarted (two
 * shards grant one name), `same-generation` changes the map without raising
 * the generation (a moved name's token goes back).
 */
import { Engine, type Session, type EngineOutput } from "../../src/core/index.ts";
import { encodeAcquire, FrameType, HEADER_LENGTH } from "../../src/protocol/index.ts";
import { Placement } from "../../src/shard/placement.ts";
import { shardGuard } from "../../src/shard/guard.ts";
import { GenerationTokens } from "../../src/shard/tokens.ts";
import { Rng } from "./prng.ts";
import { JumpingTokens } from "./world.ts";

export type ShardSelfTest = "early-start" | "same-generation";

export interface ShardSimOptions {
  readonly seed: number;
  readonly steps?: number;
  readonly selfTest?: ShardSelfTest;
  readonly trace?: (line: string) => void;
}

export interface ShardSimResult {
  readonly seed: number;
  readonly failure: { readonly step: number; readonly message: string } | null;
  readonly counters: { grants: number; wrongShard: number; mapChanges: number; movedGrants: number };
}

interface Conn {
  readonly client: number;
  readonly name: string;
  readonly shard: string;
  session: Session<Conn> | null;
  token: number | null;
  closed: boolean;
}

interface Map_ {
  readonly generation: number;
  readonly shards: readonly string[];
}

interface Server {
  readonly name: string;
  /** The counter behind this shard's tokens: kept across restarts. */
  readonly counter: JumpingTokens;
  engine: Engine<Conn> | null;
  map: Map_;
}

class Failure extends Error {}

const NAMES = Array.from({ length: 24 }, (_, i) => `sim/${i}`);
const POOL = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];

export function simulateShards(options: ShardSimOptions): ShardSimResult {
  const rng = new Rng(options.seed);
  const steps = options.steps ?? 300;
  const trace = options.trace ?? (() => {});
  const counters = { grants: 0, wrongShard: 0, mapChanges: 0, movedGrants: 0 };
  const now = 1000;
  const conns: Conn[] = [];
  /** The highest token granted for each name, and by generation. */
  const lastToken = new Map<string, number>();
  const highestOf = new Map<number, number>();
  const lastShard = new Map<string, string>();
  let step = 0;

  const transport: EngineOutput<Conn> = {
    send(conn, frame) {
      if (frame[0] === FrameType.ACQUIRED) granted(conn, Number(new DataView(frame.buffer, frame.byteOffset).getBigUint64(HEADER_LENGTH)));
    },
    close(conn, frame) {
      if (frame !== null && frame[0] === FrameType.ERROR && frame[HEADER_LENGTH] === 0x24) counters.wrongShard++;
      conn.closed = true;
    },
  };

  const servers = new Map<string, Server>();
  let serverMap: Map_ = { generation: 0, shards: POOL.slice(0, 2 + rng.int(2)) };
  const start = (name: string, map: Map_): void => {
    const server = servers.get(name) ?? { name, counter: new JumpingTokens(0, rng.fork()), engine: null, map };
    server.map = map;
    server.engine = new Engine<Conn>(
      transport,
      { ioTimeoutMs: 1e9, tokens: new GenerationTokens(server.counter, map.generation), shardGuard: shardGuard({ shard: name, shards: map.shards, generation: map.generation })! },
      now,
    );
    servers.set(name, server);
    trace(`step ${step}: start ${name} with ${map.shards.join(",")} gen ${map.generation}`);
  };
  const stop = (name: string): void => {
    const server = servers.get(name)!;
    server.engine?.shutdown(now);
    server.engine = null;
    trace(`step ${step}: stop ${name}`);
  };
  for (const name of serverMap.shards) start(name, serverMap);

  /** Each client's map: some lag behind the servers' after a change. */
  const clients: Map_[] = Array.from({ length: 4 }, () => serverMap);
  /** The server steps of a change still to do, in order, one per schedule step. */
  let pending: (() => void)[] = [];

  function granted(conn: Conn, token: number): void {
    counters.grants++;
    const server = servers.get(conn.shard)!;
    const owner = new Placement(server.map.shards).shardOf(conn.name);
    if (owner !== conn.shard) throw new Failure(`${conn.shard} granted ${conn.name}, which its map ${server.map.shards.join(",")} puts on ${owner}`);
    const last = lastToken.get(conn.name) ?? 0;
    if (token <= last) throw new Failure(`token ${token} for ${conn.name} on ${conn.shard} is not above the last token ${last} of that name`);
    for (const [generation, high] of highestOf) {
      if (generation < server.map.generation && token <= high) {
        throw new Failure(`token ${token} of generation ${server.map.generation} on ${conn.shard} is not above ${high}, issued in generation ${generation}`);
      }
    }
    if (servers.size > 0 && lastToken.has(conn.name) && lastShard.get(conn.name) !== conn.shard) counters.movedGrants++;
    lastToken.set(conn.name, token);
    lastShard.set(conn.name, conn.shard);
    highestOf.set(server.map.generation, Math.max(highestOf.get(server.map.generation) ?? 0, token));
    conn.token = token;
    trace(`step ${step}: ${conn.shard} grants ${conn.name} to client ${conn.client}, token ${token}`);
  }

  function checkSingleGrant(): void {
    const owners = new Map<string, string>();
    for (const server of servers.values()) {
      if (server.engine === null) continue;
      for (const [name, lock] of server.engine.locks) {
        if (lock.owner === null) continue;
        const other = owners.get(name);
        if (other !== undefined) throw new Failure(`${name} has an owner on ${other} and on ${server.name}`);
        owners.set(name, server.name);
      }
    }
  }

  function acquire(client: number): void {
    const map = clients[client]!;
    const name = rng.pick(NAMES);
    const shard = new Placement(map.shards).shardOf(name);
    const engine = servers.get(shard)?.engine ?? null;
    if (engine === null) return; // refused: that shard's server is down
    const conn: Conn = { client, name, shard, session: null, token: null, closed: false };
    conn.session = engine.open(conn, now);
    if (conn.session === null) return;
    conns.push(conn);
    const frame = encodeAcquire({ name, leaseMs: 1e9, owner: `c${client}`, try: rng.chance(0.2) });
    engine.frame(conn.session, FrameType.ACQUIRE, frame, HEADER_LENGTH, frame.length - HEADER_LENGTH, now);
  }

  function release(): void {
    const open = conns.filter((c) => !c.closed);
    if (open.length === 0) return;
    const conn = rng.pick(open);
    conn.closed = true;
    servers.get(conn.shard)?.engine?.closed(conn.session!, now);
  }

  function changeMap(): void {
    const current = serverMap.shards;
    const add = current.length < 3 || (current.length < POOL.length && rng.chance(0.6));
    const removed = add ? null : rng.pick(current);
    const shards = add ? [...current, POOL.find((s) => !current.includes(s))!] : current.filter((s) => s !== removed);
    const generation = options.selfTest === "same-generation" ? serverMap.generation : serverMap.generation + 1;
    const next: Map_ = { generation, shards };
    counters.mapChanges++;
    trace(`step ${step}: map change to ${shards.join(",")} gen ${generation}`);
    const restart = (s: string) => () => {
      stop(s);
      start(s, next);
    };
    // Shards that lose names go first: restarted with the new map (an added shard takes names
    // from every old one), or stopped (the removed one). Shards that gain names go last.
    const losing = add ? current.map(restart) : [() => stop(removed!)];
    const gaining = add ? [() => start(shards[shards.length - 1]!, next)] : shards.map(restart);
    pending = options.selfTest === "early-start" ? [...gaining, ...losing] : [...losing, ...gaining];
    serverMap = next; // clients may pick the new map up from now on, in any order
  }

  try {
    for (step = 1; step <= steps; step++) {
      const roll = rng.float();
      if (pending.length > 0 && roll < 0.25) {
        pending.shift()!();
      } else if (pending.length === 0 && roll < 0.04) {
        changeMap();
      } else if (roll < 0.6) {
        acquire(rng.int(clients.length));
      } else if (roll < 0.85) {
        release();
      } else {
        const client = rng.int(clients.length); // a client picks up the current servers' map
        clients[client] = serverMap;
      }
      checkSingleGrant();
    }
    return { seed: options.seed, failure: null, counters };
  } catch (error) {
    if (!(error instanceof Failure)) throw error;
    trace(`step ${step}: FAIL ${error.message}`);
    return { seed: options.seed, failure: { step, message: error.message }, counters };
  }
}
