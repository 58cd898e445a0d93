/**
 * Load client (a child of bench/load.ts): holds `count` live lockd sessions
 * over raw sockets, each heartbeating on protocol.md section 8.2's schedule,
 * with churn (closes followed by new claims) and lock contention as asked.
 *
 * Per session the state is one small object (LoadSession) that is also its
 * own FrameSink and its own timer-wheel entry: the client schedules every
 * session's next heartbeat and its pessimism watchdog in one TimerWheel
 * (src/core/wheel.ts, the server's own) driven by one setTimeout, so
 * thousands of sessions cost one timer, not thousands.
 *
 * Schedule (protocol.md 8.2): the client library's own functions
 * (src/client/schedule.ts: `heartbeatInterval`, `smoothRtt`,
 * `clientTimeout`), with MIN_INTERVAL_MS as the floor; one heartbeat in
 * flight, the next sent `interval` after the previous reply. The smoothed
 * RTT is fed by heartbeats only (a claim's round trip during the ramp says
 * more about the accept queue than about the steady state). Pessimism: if
 * clientTimeout (lease x 0.8) passes since the send of the last answered
 * frame, the client gives up the session itself (counted as
 * `lostConfirmations`; that is a client-caused end, and a sign the machine
 * is overloaded). The library's ClaimMachine is not used per session: its
 * recovery rules (reconnect and requeue on SHUTTING_DOWN or LEASE_EXPIRED)
 * would hide exactly the ends this bench counts, and one object per
 * session with its own reader is what keeps 100,000 sessions cheap.
 *
 * Whatever ends a session that the client did not end itself is counted:
 * ERROR LEASE_EXPIRED (`expiredNotCaused`, must be 0, when it arrives less
 * than a lease after the session's last send; `expiredClientSilent` when the
 * client had sent nothing for a whole lease), any other ERROR, and closes
 * without an ERROR. A LEASE_EXPIRED that arrives after the client has given
 * the session up itself is not looked at.
 *
 * Source address: past about 14,000 connections from one source to one
 * destination, Linux's connect() scans every even ephemeral port before it
 * tries the odd ones, and each connect costs milliseconds of kernel time
 * (__inet_hash_connect / __inet_check_established in a profile). Binding a
 * source address with port 0 does not help: bind()'s own port search walks
 * every port in use, on any address (inet_bind2_bucket_find). So with
 * `source` set, each session binds an explicit port of its own on that
 * 127.0.0.x address, counting up from 10,000 (below the ephemeral range
 * 32768-60999, so it never takes a port another process's connect or
 * listen on port 0 would pick) and skipping any that are in use. That needs
 * node:net (Bun.connect cannot bind in Bun 1.4.5); without `source`, the
 * sessions use Bun.connect from the default source.
 *
 * Usage: bun bench/load-client.ts <port> <count> <firstLock> <leaseMs> <contention> <churnPerSec> [source]
 */
import type { SocketHandler } from "bun";
import net from "node:net";
import { clientTimeout, heartbeatInterval, smoothRtt } from "../src/client/schedule.ts";
import { TimerWheel, type WheelDriver, type WheelEntry, type WheelOwner } from "../src/core/wheel.ts";
import {
  ErrorCode,
  FLAG_REPLY,
  FrameReader,
  FrameType,
  HEARTBEAT_FRAME,
  encodeAcquire,
  type FrameSink,
} from "../src/protocol/index.ts";
import { ready, serveRequests } from "./lib/child.ts";
import { SERVER_LIMITS } from "./lib/peer.ts";
import { Samples, summarize } from "./lib/stats.ts";

const [portArg, countArg, firstLockArg, leaseArg, contentionArg, churnArg, sourceArg] = process.argv.slice(2);
const SOURCE = sourceArg ?? "";
const PORT = Number(portArg);
const COUNT = Number(countArg);
const FIRST_LOCK = Number(firstLockArg);
const LEASE_MS = Number(leaseArg);
const CONTENTION = Math.max(1, Number(contentionArg));
const CHURN_PER_SEC = Number(churnArg);
const CLIENT_TIMEOUT = clientTimeout(LEASE_MS);
/**
 * protocol.md 8.2 leaves minHeartbeatInterval to the client. Not too small:
 * when the server is slow the RTT correction shortens the interval, which
 * adds load exactly when there is too much (see docs/performance.md).
 */
const MIN_INTERVAL_MS = LEASE_MS / 10;
const LOCKS = Math.ceil(COUNT / CONTENTION);

const State = { CONNECTING: 0, SENT: 1, WAITING: 2, OWNER: 3, ENDED: 4 } as const;
type State = (typeof State)[keyof typeof State];

/** One ACQUIRE frame per lock, built once. */
const acquireFrames: Uint8Array[] = Array.from({ length: LOCKS }, (_, i) =>
  encodeAcquire({ name: `load/${FIRST_LOCK + i}`, leaseMs: LEASE_MS, owner: `load-client/${process.pid}`, try: false }),
);
/** When the owner of each lock was closed by churn (0 when no handover is pending). */
const ownerClosedAt = new Float64Array(LOCKS);

const counters = {
  heartbeats: 0,
  expiredNotCaused: 0,
  expiredClientSilent: 0,
  otherErrors: 0,
  unexpectedCloses: 0,
  lostConfirmations: 0,
  churned: 0,
  claims: 0,
  connectFailures: 0,
};
const handover = new Samples(1 << 15);
const claim = new Samples(1 << 15);
const rtt = new Samples(1 << 16);
let settled = 0;
let live = 0;
let maxSettled = 0;

/** What a session needs of its socket; a Bun socket and a node:net socket both fit. */
interface Wire {
  write(bytes: Uint8Array): unknown;
  end(): unknown;
}

class LoadSession implements FrameSink, WheelEntry {
  socket: Wire | null = null;
  readonly reader = new FrameReader(SERVER_LIMITS);
  state: State = State.CONNECTING;
  /** Closed by this client (churn or lost confirmation): whatever follows is ours. */
  leaving = false;
  inFlight = false;
  sentAt = 0;
  /** The send time of the last answered frame: the claim is confirmed up to here. */
  confirmedAt = 0;
  /** Smoothed heartbeat round trip; undefined until the first heartbeat is answered. */
  srtt: number | undefined = undefined;
  startedAt = 0;
  now = 0;
  index = -1;
  wheelNext: WheelEntry | null = null;
  wheelPrev: WheelEntry | null = null;
  wheelSlot = -1;
  wheelTick = 0;

  constructor(readonly lock: number) {}

  onFrame(type: number, flags: number, bytes: Uint8Array, offset: number): boolean {
    // Frames still arriving for a session this client already ended are not its business.
    if (this.state === State.ENDED) return false;
    const now = this.now;
    if (type === FrameType.ERROR) {
      if (bytes[offset] !== ErrorCode.LEASE_EXPIRED) counters.otherErrors++;
      // The server's lastSeen is at or after our last send, so a lease that
      // ends less than a lease after that send was ended early: not ours. One
      // that ends later means this client sent nothing for a whole lease (its
      // event loop stalled past even the pessimism watchdog): client-caused.
      else if (now - this.sentAt < LEASE_MS) counters.expiredNotCaused++;
      else counters.expiredClientSilent++;
      this.end(false);
      return false;
    }
    if ((flags & FLAG_REPLY) !== 0) {
      // The answer to ACQUIRE or to the heartbeat in flight.
      if (this.state === State.SENT) {
        claim.add(now - this.startedAt);
        counters.claims++;
        settled++;
        if (settled > maxSettled) maxSettled = settled;
      } else {
        const sample = now - this.sentAt;
        rtt.add(sample);
        this.srtt = smoothRtt(this.srtt, sample);
        counters.heartbeats++;
      }
      this.inFlight = false;
      this.confirmedAt = this.sentAt;
      if (type === FrameType.ACQUIRED) this.state = State.OWNER;
      else if (this.state === State.SENT) this.state = State.WAITING;
      const interval = heartbeatInterval(LEASE_MS, this.srtt ?? 0, MIN_INTERVAL_MS);
      wheel.schedule(this, now + interval);
      return true;
    }
    // A push: promotion from the queue.
    if (type === FrameType.ACQUIRED && this.state === State.WAITING) {
      this.state = State.OWNER;
      const closedAt = ownerClosedAt[this.lock]!;
      if (closedAt > 0) {
        handover.add(now - closedAt);
        ownerClosedAt[this.lock] = 0;
      }
    }
    return true;
  }

  /** The wheel says: time for the next heartbeat, or the watchdog ran out. */
  due(now: number): number {
    if (this.state === State.ENDED) return -1;
    if (now - this.confirmedAt >= CLIENT_TIMEOUT) {
      counters.lostConfirmations++;
      // Give up the claim (client-caused), and claim again after a jittered
      // pause of up to a lease: reconnecting at once would add load exactly
      // when the machine could not keep up.
      this.close(false);
      const lock = this.lock;
      setTimeout(() => void open(lock), Math.random() * LEASE_MS);
      return -1;
    }
    if (this.inFlight) return this.confirmedAt + CLIENT_TIMEOUT;
    this.inFlight = true;
    this.sentAt = now;
    this.socket!.write(HEARTBEAT_FRAME);
    return this.confirmedAt + CLIENT_TIMEOUT;
  }

  /** The client ends the session (churn, lost confirmation), then claims again on the same lock. */
  close(replace: boolean): void {
    if (this.state === State.ENDED) return;
    if (this.state === State.OWNER) ownerClosedAt[this.lock] = performance.now();
    this.leaving = true;
    this.end(replace);
    this.socket?.end();
  }

  /** Forget the session; with `replace`, open a new claim on the same lock (at the tail). */
  end(replace: boolean): void {
    if (this.state === State.ENDED) return;
    if (this.state === State.WAITING || this.state === State.OWNER) settled--;
    this.state = State.ENDED;
    wheel.remove(this);
    removeLive(this);
    if (replace) void open(this.lock);
  }
}

const handlers: SocketHandler<LoadSession> = {
  binaryType: "uint8array",
  data(socket, chunk: Uint8Array) {
    const s = socket.data;
    s.now = performance.now();
    s.reader.push(chunk, s);
  },
  end(socket) {
    gone(socket.data);
  },
  close(socket) {
    gone(socket.data);
  },
  error(socket) {
    gone(socket.data);
  },
};

const FIRST_SOURCE_PORT = 10_000;
const LAST_SOURCE_PORT = 32_767;
let nextSourcePort = FIRST_SOURCE_PORT;

/** Connect from SOURCE and a port of our own, trying the next port when one is taken. */
async function connectFrom(s: LoadSession): Promise<Wire> {
  for (let attempt = 0; attempt < 1000; attempt++) {
    const port = nextSourcePort;
    nextSourcePort = port === LAST_SOURCE_PORT ? FIRST_SOURCE_PORT : port + 1;
    try {
      return await connectFromPort(s, port);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EADDRINUSE") throw error;
    }
  }
  throw new Error(`no free source port on ${SOURCE}`);
}

/** node:net from SOURCE:port; the session's events as with Bun.connect. */
function connectFromPort(s: LoadSession, localPort: number): Promise<Wire> {
  return new Promise<Wire>((resolve, reject) => {
    let connected = false;
    const socket = net.connect({ host: "127.0.0.1", port: PORT, localAddress: SOURCE, localPort, noDelay: true });
    socket.once("connect", () => {
      connected = true;
      resolve(socket);
    });
    socket.on("data", (chunk: Uint8Array) => {
      s.now = performance.now();
      s.reader.push(chunk, s);
    });
    socket.on("end", () => gone(s));
    socket.on("close", () => gone(s));
    socket.on("error", (error) => {
      if (!connected) reject(error);
      else gone(s);
    });
    socket.on("close", () => {
      if (!connected) reject(new Error("closed before connected"));
    });
  });
}

function gone(s: LoadSession): void {
  if (s.state === State.ENDED) return;
  if (!s.leaving) counters.unexpectedCloses++;
  s.end(false);
}

// --- the set of live sessions (for churn's random pick), O(1) add and remove ---

const sessions: LoadSession[] = [];

function addLive(s: LoadSession): void {
  s.index = sessions.length;
  sessions.push(s);
  live++;
}

function removeLive(s: LoadSession): void {
  if (s.index < 0) return;
  const last = sessions.pop()!;
  if (last !== s) {
    sessions[s.index] = last;
    last.index = s.index;
  }
  s.index = -1;
  live--;
}

async function open(lock: number): Promise<void> {
  const s = new LoadSession(lock);
  s.startedAt = performance.now();
  addLive(s);
  try {
    s.socket = SOURCE === "" ? await Bun.connect<LoadSession>({ hostname: "127.0.0.1", port: PORT, data: s, socket: handlers }) : await connectFrom(s);
  } catch {
    counters.connectFailures++;
    s.end(false);
    return;
  }
  if (s.state === State.ENDED) return;
  // The claim is confirmed from the moment ACQUIRE is sent (protocol.md 8.3), not from the connect.
  const sent = performance.now();
  s.state = State.SENT;
  s.sentAt = sent;
  s.confirmedAt = sent;
  s.inFlight = true;
  s.socket.write(acquireFrames[lock]!);
  wheel.schedule(s, sent + CLIENT_TIMEOUT);
}

// --- one timer for every session ------------------------------------------------

const owner: WheelOwner<LoadSession> = { due: (s, now) => s.due(now) };
let timer: ReturnType<typeof setTimeout> | null = null;
let armedFor = 0;
/** How late the one timer fired at worst (ms): the client's own event-loop delay. */
let timerLateMax = 0;
const fire = (): void => {
  timer = null;
  const late = performance.now() - armedFor;
  if (late > timerLateMax) timerLateMax = late;
  wheel.advance(performance.now(), owner);
};
const driver: WheelDriver = {
  arm(tick: number) {
    if (timer !== null) clearTimeout(timer);
    armedFor = tick;
    timer = setTimeout(fire, Math.max(0, Math.ceil(tick - performance.now())));
  },
};
const wheel = new TimerWheel<LoadSession>(performance.now());
wheel.setDriver(driver);

// --- churn ------------------------------------------------------------------------

let churnBudget = 0;
let churnTimer: ReturnType<typeof setInterval> | null = null;

function startChurn(): void {
  if (CHURN_PER_SEC <= 0 || churnTimer !== null) return;
  let last = performance.now();
  churnTimer = setInterval(() => {
    const now = performance.now();
    churnBudget += ((now - last) / 1000) * CHURN_PER_SEC;
    last = now;
    while (churnBudget >= 1 && sessions.length > 0) {
      churnBudget--;
      const s = sessions[Math.floor(Math.random() * sessions.length)]!;
      if (s.state !== State.WAITING && s.state !== State.OWNER) continue;
      counters.churned++;
      s.close(true);
    }
  }, 10);
}

// --- ramp up, then answer the orchestrator ----------------------------------------

const rampStart = performance.now();
// Batches of 100 connects per process keep the server's accept queue from overflowing
// (an overflow drops the SYN, and the kernel retries it only after a second).
for (let i = 0; i < COUNT; i += 100) {
  const batch: Promise<void>[] = [];
  for (let j = i; j < Math.min(COUNT, i + 100); j++) batch.push(open(Math.floor(j / CONTENTION)));
  await Promise.all(batch);
}
// Wait (bounded) until every session has its answer.
for (let waited = 0; settled < COUNT && waited < 30_000; waited += 50) await Bun.sleep(50);
const rampMs = performance.now() - rampStart;

function resetCounters(): void {
  for (const key of Object.keys(counters) as (keyof typeof counters)[]) counters[key] = 0;
  handover.clear();
  claim.clear();
  rtt.clear();
  timerLateMax = 0;
}

serveRequests({
  start() {
    resetCounters();
    maxSettled = settled;
    startChurn();
    return {};
  },
  report() {
    const h = summarize(handover.toArray());
    const c = summarize(claim.toArray());
    const r = summarize(rtt.toArray());
    return {
      counters: { ...counters },
      timerLateMax,
      live,
      settled,
      maxSettled,
      handover: { n: handover.count, p50: h.p50, p99: h.p99, samples: Array.from(handover.toArray()) },
      claim: { n: claim.count, p50: c.p50, p99: c.p99 },
      rtt: { p50: r.p50, p99: r.p99 },
    };
  },
});
ready({ settled, live, rampMs });
