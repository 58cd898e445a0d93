/**
 * The lockd server as a bench child: `new LockServer` on 127.0.0.1:0 in its
 * own process, answering the bench IPC requests (CPU, RSS, heap) and adding
 * the engine's counters, so the benchmarks can check, for example, that no
 * session ended by LEASE_EXPIRED. Usage: bun bench/lib/server-child.ts [ioTimeoutMs]
 */
import { Logger } from "../../src/log/logger.ts";
import { CLOSED_BY_PEER } from "../../src/core/session.ts";
import { ErrorCode } from "../../src/protocol/index.ts";
import { AdminAuth } from "../../src/ops/admin.ts";
import { LockServer } from "../../src/server/index.ts";
import { OpsServer } from "../../src/ops/server.ts";
import { BENCH_ADMIN_TOKEN } from "./admin-token.ts";
import { ready, serveRequests } from "./child.ts";
import { engineOf } from "../../test/helpers/engine.ts";

const server = new LockServer({ hostname: "127.0.0.1", port: 0, ioTimeoutMs: Number(process.argv[2] ?? 5000) });
const engine = engineOf(server);
// The real ops server, as `lockd serve` runs it (admin actions log at info: keep them off the bench's stderr).
const ops = new OpsServer({
  hostname: "127.0.0.1",
  port: 0,
  locks: server.locks,
  auth: new AdminAuth(BENCH_ADMIN_TOKEN),
  log: new Logger("error"),
  version: "bench",
  isReady: () => true,
});

serveRequests({}, () => ({
  sessions: engine.sessions.size,
  locks: engine.locks.size,
  connections: server.connectionCount,
  heartbeats: engine.stats.heartbeats,
  opened: engine.stats.opened,
  grantsImmediate: engine.stats.grantsImmediate,
  grantsPromoted: engine.stats.grantsPromoted,
  leaseExpired: engine.stats.ends[ErrorCode.LEASE_EXPIRED]!,
  ioTimeout: engine.stats.ends[ErrorCode.IO_TIMEOUT]!,
  protocolError: engine.stats.ends[ErrorCode.PROTOCOL_ERROR]!,
  overloaded: engine.stats.ends[ErrorCode.OVERLOADED]!,
  closedByPeer: engine.stats.ends[CLOSED_BY_PEER]!,
  wheelSize: engine.wheel.size,
  refiled: engine.wheel.refiled,
}));
ready({ port: server.port, opsPort: ops.port });
