/**
 * The words lower rooms use when a message must point at a setting: here,
 * the flags (and variables) the CLI reads them from, taken from the option
 * tables. No file outside src/cli names a flag (test/layout/flags.test.ts).
 */
import type { EngineWords } from "../core/engine.ts";
import type { ShardWords } from "../failover/holder.ts";
import type { OpsWords } from "../ops/server.ts";
import type { DaemonWords } from "../server/daemon.ts";
import { SERVE_OPTIONS } from "./config.ts";

const o = SERVE_OPTIONS;

export const SHARD_WORDS: ShardWords = { service: o.service.flag, shard: o.shard.flag, shards: o.shards.flag, shardsGeneration: o.shardsGeneration.flag };

export const ENGINE_WORDS: EngineWords = { maxLease: `this server's ${o.maxLease.flag}`, maxSessionsPerSource: o.maxSessionsPerSource.flag };

export const OPS_WORDS: OpsWords = {
  adminToken: `start lockd serve with ${o.adminTokenFile.flag} FILE, ${o.adminTokenFile.env}=FILE, or ${o.adminToken.env}=TOKEN`,
  advertiseOps: o.advertiseOps.flag,
  allowHost: `add it to ${o.opsAllowHost.flag} (${o.opsAllowHost.env})`,
};

export const DAEMON_WORDS: DaemonWords = { engine: ENGINE_WORDS, ops: OPS_WORDS, advertiseOps: `${o.advertiseOps.flag} (${o.advertiseOps.env})` };
