/**
 * simulateBelievers(seed): the failover simulation with real engines and
 * clients, judged from the clients' side.
 *
 * The world of coordinator.ts (two or three instances of one service, each a
 * role machine of src/failover/machine.ts with its own clock, against the
 * model of the coordinator row in row.ts: delayed and lost statements,
 * outages, pauses, kills, restarts, clean stops), where each active term
 * runs a real Engine (src/core/engine.ts) wired as roles.ts wires it:
 *
 * - a LockDelay built from the `activate` action's delay (every name, and
 *   each published name, counted from the activation on that instance's
 *   clock), whose raise goes out as the machine's `raise` statement and lands
 *   through `raiseDone`, `LockDelay.raised` and `Engine.resume`;
 * - the grant guard: `mayGrant` and `mayConfirm` read the machine's deadline;
 * - `Engine.resume` when a delay ends, a raise lands or a token block arrives;
 * - step-down: `Engine.shutdown` (SHUTTING_DOWN to every session); clean
 *   stop: `machine.stop(now, engine.held(...))`, then the engine shuts down
 *   and the release goes out.
 *
 * Simulated clients, each with its own clock (rate within the same spread
 * as the instances'), claim a few names at whichever instance they reach
 * (a standby refuses the connection, a dead one does not answer) and follow
 * protocol.md section 8: one frame in flight, heartbeats every lease/4 less
 * twice the smoothed round trip, the deadline 0.8 x lease after the send of
 * the last answered frame (the ACQUIRE's send until it is answered), a grant
 * read at or after the deadline confirms nothing. They release after a
 * while, give up waiting after a while, and are paused (nothing runs, their
 * clock goes on) or cut off (the network drops their connections silently:
 * neither side sees a close). Leases: in a "mixed" seed each client's lease
 * is drawn log-uniformly from 1 ms up to C, 10 x C or 100 x C (C the
 * coordinator lease); in a "uniform" seed every client has the same lease,
 * drawn from C/4 to 100 x C and one the row records exactly, and all want
 * one name, so that handoffs are as tight as the lock-delay allows.
 *
 * The world adds, to coordinator.ts's events: an instance cut off from the
 * coordinator only (its clients still reach it) or from the whole network, a
 * process kill (clients see their connections reset) or a host death (they
 * see nothing), and a paused instance that wakes the way an event loop does
 * (its sockets before its timers, mostly) and may stall again before its
 * timers run. And an adversary that strikes at the worst moment, just after
 * an active confirmed a holder whose lease needs a lock-delay: the active
 * freezes (for about as long as the holder still believes), dies with its
 * host, is cut off, or stops cleanly while the holder is cut off; more often
 * so when the active has just woken (failures come in bursts).
 *
 * Checked at every moment a client comes to believe it holds a name (a grant
 * reaches it before its deadline): no other client's belief in that name is
 * still in force in real time, each belief ending at 0.8 x its lease after
 * the send of its last answered frame, on its own client's clock. No
 * tolerance is added: clock rates differ by what the clocks were drawn with
 * (1 +- rateSpread, see there), and the design's own margin (2 % of the
 * lease waited for) must absorb that. Also, as in coordinator.ts, at every grant the
 * granting instance is the row's holder in the row's epoch and its token is
 * above every earlier one and not above the row's floor; and every reply a
 * client reads answers a frame it sent.
 *
 * The `selfTest` variants plant a bug on purpose to show the check catches it.
 */
import { delayFor, LockDelay, MAX_PUBLISHED_NAMES, roundLease } from "../../src/core/delay.ts";
import {
  Engine,
  type EngineOutput,
  type GrantGuard,
  NO_SLOT,
  type ReclaimEntry,
  type ReclaimOptions,
  type Session,
  SessionState,
  SHARED_CLAIM,
  type TokenSource,
} from "../../src/core/index.ts";
import {
  decodeAcquire,
  decodeAcquired,
  decodeError,
  decodeSlot,
  encodeAcquire,
  ErrorCode,
  errorCodeName,
  FLAG_RECLAIM,
  FLAG_RECLAIMABLE,
  FLAG_REPLY,
  FrameType,
  HEADER_LENGTH,
  HEARTBEAT_FRAME,
  OPTION_RECLAIM,
} from "../../src/protocol/index.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CoordinatorRow, Outcome, type RoleAction } from "../../src/failover/machine.ts";
import { type DrivenMachine, drivenMachine } from "../helpers/role-machine.ts";
import { LeasesFile, startDelay } from "../../src/tokens/leases.ts";
import { EventQueue } from "./events.ts";
import { Rng } from "./prng.ts";
import { RowModel } from "./row.ts";

/**
 * Planted bugs.
 * - no-delay: a new term skips its lock-delay.
 * - short-delay: every delay is one coordinator lease short.
 * - no-carry: an instance ignores the row's carried lease (lease_carry_ms),
 *   so its delay is computed from a lease smaller than the real largest when
 *   its predecessor was itself inside its delay.
 * - no-raise: a grant does not wait for the row's largest lease to cover its
 *   lease (the store is told nothing), so the next term's delay is too short.
 * - no-heartbeat-guard: the heartbeat guard is ignored: an active past its
 *   deadline still answers heartbeats (GrantGuard.mayConfirm always yes).
 * - no-restart-delay (single-server seeds): the lease record is lost before
 *   each start, so a restarted server holds nothing back.
 * - reclaim-after-eof (reclaim seeds, single-server and coordinated): a
 *   client whose grant was reclaimable reclaims after a bare EOF or reset
 *   too, believing meanwhile, as if it had had SHUTTING_DOWN with RECLAIM.
 * - short-grace (reclaim seeds): a restart after a clean stop, or a term
 *   taking over a released row, holds each published name back 1 ms less
 *   than its lock-delay.
 * - reclaim-any-token (reclaim seeds): the engine is given a published set
 *   that matches any reclaim (as if it did not check the set).
 * - reclaim-not-durable (single-server reclaim seeds): a reclaimed lease is
 *   not made durable in the lease record (what Engine.reclaimClaim alone
 *   does: the shell here covers it), so a crash after the grace under-delays it.
 * - grace-not-carried (coordinated reclaim seeds): a term writes no carried
 *   lease (lease_carry_ms 0 in its renewals and its release), so a clean stop
 *   inside its grace drops the grace the earlier term's holders are owed:
 *   the next active holds back only the names this term held.
 * - no-cap-fold (coordinated reclaim seeds): the takeover does not make the
 *   term's largest lease cover the cap M (store.ts's takeover statement
 *   does), so the holders a term took back by reclaim are not covered when
 *   it fails in turn.
 * - reclaim-term-token (coordinated reclaim seeds): open reclaims accept a
 *   token issued in the term (the bound read as the term's first reserved
 *   block, not the last token issued before it).
 * - tell-early (coordinated reclaim seeds): a clean stop tells its holders
 *   to reclaim before its release has landed (at once, as it sends it).
 */
export type BelieverSelfTest =
  | "no-delay"
  | "short-delay"
  | "no-carry"
  | "no-raise"
  | "no-heartbeat-guard"
  | "no-restart-delay"
  | "reclaim-after-eof"
  | "short-grace"
  | "reclaim-any-token"
  | "reclaim-not-durable"
  | "grace-not-carried"
  | "no-cap-fold"
  | "reclaim-term-token"
  | "tell-early";

export const BELIEVER_BREAKS: readonly BelieverSelfTest[] = [
  "no-delay",
  "short-delay",
  "no-carry",
  "no-raise",
  "no-heartbeat-guard",
  "no-restart-delay",
  "reclaim-after-eof",
  "short-grace",
  "reclaim-any-token",
  "reclaim-not-durable",
  "grace-not-carried",
  "no-cap-fold",
  "reclaim-term-token",
  "tell-early",
];

export interface BelieverSimOptions {
  readonly seed: number;
  /** Events before the run ends (default 20,000). */
  readonly steps?: number;
  readonly trace?: (line: string) => void;
  readonly selfTest?: BelieverSelfTest;
  /**
   * Every clock's rate is drawn from 1 +- rateSpread. Default 0.01: rates
   * differ by up to about 2 %, which the lock-delay's margin covers (a wait of
   * 0.82 x lease for a holder's 0.8 x lease: a rate ratio of up to 1.025).
   * coordinator.ts draws from 1 +- 0.02 (ratios up to 1.04, which its 0.2 x
   * lease absorbs); with that spread here (`--rates 2`) the check fails now
   * and then, after clean stops and restarts, by about 1.5 % of the lease:
   * the margin, not the check, is what would have to change.
   */
  readonly rateSpread?: number;
  /**
   * A single server on a data directory instead of a coordinated service:
   * restarted after crashes and clean stops, its lock-delay from the lease
   * record (src/tokens/leases.ts, in a real temporary directory).
   * Default: every fifth seed (seed % 5 == 0), so that a seed replays the same way.
   */
  readonly single?: boolean;
}

export interface BelieverSimResult {
  readonly seed: number;
  readonly failure: { readonly step: number; readonly message: string } | null;
  /** Grants made by the engines. */
  readonly grants: number;
  /** Grants that reached their client in time: beliefs begun. */
  readonly beliefs: number;
  /**
   * Beliefs begun less than 0.1 x lease (the earlier holder's) after an earlier
   * holder's belief in that name lapsed unseen (the holder never heard it had
   * lost the lock), granted in another term: where the lock-delay decided.
   */
  readonly handoffs: number;
  /** The closest such handoff: the new belief began `ms` after the old one lapsed, `share` of the old lease. */
  readonly tightest: { readonly ms: number; readonly share: number } | null;
  /** Grants read at or after the client's deadline (confirm nothing). */
  readonly late: number;
  readonly takeovers: number;
  /** Terms that began with a lock-delay. */
  readonly delayedTerms: number;
  readonly stepDowns: number;
  readonly pauses: number;
  readonly kills: number;
  readonly partitions: number;
  /** Beliefs that lapsed unseen: the holder's deadline passed before it heard anything (cut off, paused, its server gone). */
  readonly lapsed: number;
  /** The largest lease a client believed with. */
  readonly longestLease: number;
  /** Reclaims (protocol.md section 14) clients sent, counting each connection one went out on; and those that re-confirmed a belief. */
  readonly reclaimsSent: number;
  readonly reclaims: number;
  /** Reclaims that ended the claim instead (refused, an error, a broken connection, or the deadline before an answer). */
  readonly reclaimsLost: number;
  /** Answers to a reclaim read at or after the client's deadline (they confirm nothing). */
  readonly lateReclaims: number;
  /** Reclaims sent on a second connection while the first was still open or its close in flight. */
  readonly doubleReclaims: number;
  /** Fresh claims of a published name that reached a restarted server during the name's grace. */
  readonly graceClaims: number;
  /** Connections of holders closed by a proxy in between: both sides see a close, the server promotes the next waiter. */
  readonly proxyCloses: number;
  /** Beliefs in a shared claim of a read/write lock, and in a semaphore's slot (single-server seeds). */
  readonly sharedBeliefs: number;
  readonly semaphoreBeliefs: number;
  /** The most clients that believed they held one name at once (beside each other: shared, or a semaphore's slots). */
  readonly mostBelievers: number;
  /** Simulated time the run covered (ms). */
  readonly simMs: number;
  /** The reclaim cap M of a single server or a coordinated service with reclaim on; -1: off. */
  readonly reclaimCap: number;
  /** A coordinated service (not a single server). */
  readonly coordinated: boolean;
  /** Reclaims granted in a coordinated term's open grace (no published grant: a token issued before the term). */
  readonly openReclaims: number;
  /** Clean stops of an active that published reclaimable grants (froze, released, then told its holders). */
  readonly publishingStops: number;
  /** Holders a coordinated term told to reclaim (SHUTTING_DOWN with RECLAIM): at a clean stop once its release landed, at a step-down. */
  readonly toldByStop: number;
  readonly toldByStepDown: number;
  /** Terms with reclaim on that ended (step-down, stop, kill) while their own grace still ran: the next failover inside a grace. */
  readonly graceFailovers: number;
  /** Reclaims begun on silence (protocol.md 14.3: heartbeats unanswered, the connection still open), and those granted. */
  readonly silenceReclaims: number;
  readonly silenceReclaimed: number;
  /** Stale reclaims sent (another connection naming an earlier holder's token, or one not issued before the term). */
  readonly staleReclaims: number;
}

class Violation extends Error {}

/** A monotonic clock: reads offset + rate x real time. */
interface Clock {
  readonly offset: number;
  readonly rate: number;
}

interface Task {
  /** Network input (a client's frame, a statement's answer) rather than a timer. */
  readonly io: boolean;
  readonly run: () => void;
}

interface Node extends Clock {
  readonly id: string;
  readonly machine: DrivenMachine;
  alive: boolean;
  /** Died with its host: nothing answers for it, not even a reset. */
  silent: boolean;
  pausedUntil: number;
  backlog: Task[];
  /** Running what came due while it was paused. */
  waking: boolean;
  timerSeq: number;
  pumpQueued: boolean;
  /** Cut off from the coordinator until then. */
  dbCutUntil: number;
  /** Cut off from the whole network until then (and from the coordinator): its connections are cut silently. */
  isolatedUntil: number;
  term: Term | null;
  /** A single server's lease record (null in a coordinated service, whose machine is then unused). */
  leases: LeasesFile | null;
  /** Its own reclaim cap (--reclaim-max-lease; null: off), folded into the row's at creation and takeover. */
  readonly reclaimMs: number | null;
  /** A clean stop publishing reclaimable grants: no grant and no heartbeat answered from the snapshot on. */
  frozen: boolean;
}

interface Term {
  readonly node: Node;
  readonly epoch: number;
  engine: Engine<Conn>;
  readonly delay: LockDelay;
  readonly conns: Set<Conn>;
  wheelSeq: number;
  delaySeq: number;
  readonly info: string;
  /** server.ts's onDelayOver: called once when the delay is over (a single server's data directory stops carrying). */
  onDelayOver: (() => void) | null;
  /** A single server's run after a clean stop: when each published name's grace ends (its clock), from the lease record. */
  readonly graceEnd: ReadonlyMap<string, number>;
  /** The reclaimable grants the last clean stop published, as the check sees them (null: none, after a crash). */
  readonly published: ReadonlyMap<string, readonly ReclaimEntry[]> | null;
  /** The reclaim cap this term serves (-1: reclaim off): a grant is RECLAIMABLE iff its lease is at most this. */
  readonly reclaimCap: number;
  /** A coordinated term with reclaim on: until when (its clock) every name is held back (open reclaims), and the last token issued before it. */
  readonly everyUntil: number;
  readonly openBelow: number;
}

interface Conn {
  readonly id: number;
  readonly client: Client;
  readonly node: Node;
  term: Term | null;
  session: Session<Conn> | null;
  /** A partition cut it: nothing more is delivered either way, and neither side sees a close. */
  cut: boolean;
  serverDone: boolean;
  clientDone: boolean;
  /** The client gave up on it at its deadline, in this phase (a grant read later confirms nothing). */
  gaveUp: Claim["phase"] | null;
  /** When the last message each way is delivered (real ms): TCP keeps order. */
  upAt: number;
  downAt: number;
  /** Refused at its opening (nothing listened): the client may try again, nothing was said. */
  refused: boolean;
  /** The token of the last ACQUIRED the server sent on it (0: none): a later one with the same token is a heartbeat's answer. */
  grantedToken: number;
}

/** A close with `proxy`: a proxy in between closed the client's side; it closes the server's once the client has read that. */
type Message = { readonly kind: "open" } | { readonly kind: "close"; readonly proxy?: true } | { readonly kind: "frame"; readonly bytes: Uint8Array };

interface Client extends Clock {
  readonly id: string;
  pausedUntil: number;
  backlog: (() => void)[];
  cutUntil: number;
  claim: Claim | null;
  conns: Set<Conn>;
  serial: number;
  /** The lease of its claims (0: none drawn yet). */
  leaseMs: number;
  /** Reclaims when its grant was flagged RECLAIMABLE (the clients' default); false: the option turned off. */
  readonly reclaims: boolean;
}

interface Claim {
  readonly serial: number;
  readonly name: string;
  readonly leaseMs: number;
  readonly try: boolean;
  /** Stop waiting at this moment (client clock). */
  readonly waitUntil: number;
  /** How long to hold once granted (client ms). */
  readonly holdMs: number;
  conn: Conn | null;
  /** reclaiming: it held, had SHUTTING_DOWN with RECLAIM, and believes until its deadline while it reclaims. */
  phase: "acquiring" | "waiting" | "holding" | "reclaiming";
  /** The name's limit (above 1: a semaphore), and a shared claim of a read/write lock. */
  readonly limit: number;
  shared: boolean;
  /** Its grant's token and slot (-1: not a semaphore's), and whether the last ACQUIRED of it had RECLAIMABLE. */
  token: number;
  slot: number;
  reclaimable: boolean;
  /** Send times (client clock) of the frames not answered yet: the ACQUIRE, then at most one HEARTBEAT. */
  outstanding: number[];
  /** The send of the last answered frame (the ACQUIRE's until it is answered): the deadline is 0.8 x lease after it. */
  base: number;
  srtt: number;
  hbSeq: number;
  belief: Belief | null;
  /** The instance its last connection went to: a reclaim tries the next address after it. */
  lastAt: Node | null;
  /** Reclaiming on silence (protocol.md 14.3): the reclaim's connection beside the old one, and the send of its ACQUIRE (client clock). */
  side: Conn | null;
  sideSentAt: number;
}

interface Belief {
  readonly client: Client;
  readonly name: string;
  /** Shared beside other shared beliefs (a read/write lock); or a semaphore's slot (-1: none). */
  readonly shared: boolean;
  readonly slot: number;
  readonly leaseMs: number;
  readonly token: number;
  /** The term that granted it, or that a reclaim re-confirmed it in. */
  from: Term;
  /** Real time it began. */
  readonly since: number;
  /** Client clock: in force while the client's clock reads less. */
  deadline: number;
  /** Real time the client dropped it (release, ERROR, close); null while it may be in force. */
  dropped: number | null;
}

const GIVE_UP = 0.8;
/** Timers fire this long (real ms) after their moment, so that the clock read then is past it. */
const EPS = 1e-3;

export function simulateBelievers(options: BelieverSimOptions): BelieverSimResult {
  const rng = new Rng(options.seed);
  const trace = options.trace;
  const selfTest = options.selfTest;
  const spread = options.rateSpread ?? 0.01;
  const logUniform = (lo: number, hi: number): number => Math.exp(Math.log(lo) + rng.float() * (Math.log(hi) - Math.log(lo)));
  const leaseMs = rng.pick([400, 1000, 2000, 4000]);
  const block = rng.pick([2, 3, 10, 1000]);
  const maxDelay = rng.pick([1, 10, leaseMs / 20, leaseMs / 5]);
  const lossRate = rng.pick([0, 0.01, 0.1]);
  const statementTimeout = Math.max(50, leaseMs / 2);
  const netDelay = rng.pick([0.1, 1, 10, leaseMs / 50]);
  const chaosMs = rng.pick([leaseMs / 2, 2 * leaseMs, 8 * leaseMs, 32 * leaseMs]);
  /**
   * The clients: "mixed" (each client's lease drawn log-uniformly from 1 ms up
   * to C, 10 x C or 100 x C for this seed, C the coordinator lease, and kept
   * from claim to claim most of the time), or "uniform" (every client uses one
   * lease, from C/4 to 100 x C, that the row records exactly, and they all
   * want one name: every handoff is as tight as the lock-delay allows).
   */
  const uniform = rng.chance(0.4);
  const names = uniform ? ["a"] : ["a", "b", "c"].slice(0, rng.weighted([2, 2, 1]) + 1);
  const clientCount = rng.range(uniform ? 3 : 2, 6);
  const maxLease = uniform ? roundLease(Math.round(logUniform(leaseMs / 4, 100 * leaseMs))) : rng.pick([1, 10, 100, 100]) * leaseMs;
  const ioTimeoutMs = leaseMs;
  /** How often the adversary strikes right after an active confirmed a holder (see `confirmed`). */
  const strikeRate = rng.pick([0.02, 0.1, 0.3, 0.3]);
  const steps = options.steps ?? 20_000;
  const single = options.single ?? options.seed % 5 === 0;
  /**
   * Reclaim (protocol.md section 14), in most single-server seeds and half
   * the coordinated ones: the cap M from every client's lease down to the
   * coordinator lease, so that some grants are reclaimable and some not.
   * -1: off. In a coordinated seed M is the service's (each instance's own
   * cap is M, now and then half of it or off: the row keeps the largest, see
   * `spawn`), and the holders of a frozen or cut-off active reclaim on
   * silence (`silenceReclaim`) too.
   */
  const reclaimCap = (single ? rng.chance(0.75) : rng.chance(0.5)) ? rng.pick([maxLease, maxLease, Math.max(1, Math.round(maxLease / 10)), leaseMs]) : -1;
  const reclaimOn = reclaimCap >= 0;
  /** Reclaim on a coordinated service (protocol.md section 14.2, rules 1-5). */
  const coordReclaim = reclaimOn && !single;
  /**
   * Each name's kind: exclusive in a coordinated seed; in a single-server
   * seed exclusive, a read/write lock (half its claims shared), or a
   * semaphore of 2 or 3 permits (every claim of a name agrees on its limit).
   */
  const kinds = new Map<string, { readonly limit: number; readonly rw: boolean }>();
  for (const name of names) {
    const kind = single ? rng.weighted([2, 1, 1]) : 0;
    kinds.set(name, { limit: kind === 2 ? rng.range(2, 3) : 1, rw: kind === 1 });
  }

  let now = 0;
  let seq = 0;
  let step = 0;
  const queue = new EventQueue();
  const store = new RowModel(block);
  let outageUntil = -1;
  const nodes: Node[] = [];
  const clients: Client[] = [];
  let serial = 0;
  let connSerial = 0;
  let lastToken = 0;
  const beliefs = new Map<string, Set<Belief>>(names.map((n) => [n, new Set()]));
  const stats = {
    grants: 0,
    beliefs: 0,
    handoffs: 0,
    late: 0,
    takeovers: 0,
    delayedTerms: 0,
    stepDowns: 0,
    pauses: 0,
    kills: 0,
    partitions: 0,
    lapsed: 0,
    longestLease: 0,
    reclaimsSent: 0,
    reclaims: 0,
    reclaimsLost: 0,
    lateReclaims: 0,
    doubleReclaims: 0,
    graceClaims: 0,
    proxyCloses: 0,
    sharedBeliefs: 0,
    semaphoreBeliefs: 0,
    mostBelievers: 0,
    openReclaims: 0,
    publishingStops: 0,
    toldByStop: 0,
    toldByStepDown: 0,
    graceFailovers: 0,
    silenceReclaims: 0,
    silenceReclaimed: 0,
    staleReclaims: 0,
  };
  /** What the last clean stop published for reclaim (the data directory's copy), until the next run starts with it. */
  let pendingPublished: Map<string, ReclaimEntry[]> | null = null;
  /** Tokens the token source issued and the engine has not sent yet: the next ACQUIRED with one is a fresh grant. */
  const freshTokens = new Set<number>();
  /** Each fresh grant's name and client: a reclaim keeps its token, for that client's claim only. */
  const tokenOwner = new Map<number, { readonly name: string; readonly client: Client }>();
  /** reclaim-any-token: the reclaim the engine is reading now, which the "published" set then matches. */
  let lastReclaim: { readonly name: string; readonly entry: ReclaimEntry } | null = null;
  const anyGrant = new (class extends Map<string, readonly ReclaimEntry[]> {
    override get(name: string): readonly ReclaimEntry[] | undefined {
      return lastReclaim !== null && lastReclaim.name === name ? [lastReclaim.entry] : undefined;
    }
  })();
  let tightest: { ms: number; share: number } | null = null;
  /** The instance whose term's engine is being built (reclaim-term-token reads the token bound then). */
  let opening: Node | null = null;

  const at = (time: number, run: () => void): void => queue.push({ at: Math.max(time, now), seq: seq++, run });
  const log = trace === undefined ? null : (line: string): void => trace(`${now.toFixed(3)} ${line}`);
  const local = (x: Clock): number => x.offset + x.rate * now;
  /** Real time at which x's clock reads `t`. */
  const realAt = (x: Clock, t: number): number => (t - x.offset) / x.rate;
  const rate = (): number => 1 + (rng.float() * 2 - 1) * spread;

  // --- instances ---------------------------------------------------------------------------

  /** Run `body` in instance x now, or when it resumes. */
  const inNode = (x: Node, io: boolean, body: () => void): void => {
    if (!x.alive) return;
    if (now < x.pausedUntil) x.backlog.push({ io, run: body });
    else body();
  };

  const spawn = (): Node => {
    // Reclaim on: its own cap mostly the service's, now and then half of it (the row's, raised only, is served) or off
    // (it honours the row's cap in its grace, but its stops and step-downs tell no holder to reclaim).
    const own = !coordReclaim ? null : [reclaimCap, reclaimCap, reclaimCap, reclaimCap, reclaimCap, reclaimCap, Math.max(1, Math.floor(reclaimCap / 2)), null][rng.int(8)]!;
    const x: Node = {
      id: `i${++serial}`,
      machine: drivenMachine({ leaseMs, block, initialFloor: 0 }),
      offset: rng.int(2 ** 40),
      rate: rate(),
      alive: true,
      silent: false,
      pausedUntil: -1,
      backlog: [],
      waking: false,
      timerSeq: 0,
      pumpQueued: false,
      dbCutUntil: -1,
      isolatedUntil: -1,
      term: null,
      leases: null,
      reclaimMs: own,
      frozen: false,
    };
    nodes.push(x);
    log?.(`${x.id} starts (rate ${x.rate.toFixed(4)}${coordReclaim ? `, reclaim cap ${own ?? "off"}` : ""})`);
    perform(x, x.machine.start(local(x)));
    return x;
  };

  /** Carry out the machine's actions, then arm its timer (roles.ts's run()). */
  const perform = (x: Node, actions: readonly RoleAction[]): void => {
    for (const action of actions) act(x, action);
    const wake = x.machine.nextWake();
    const mySeq = ++x.timerSeq;
    if (wake !== Infinity) {
      at(realAt(x, wake) + EPS, () =>
        inNode(x, false, () => {
          if (x.timerSeq === mySeq) perform(x, x.machine.tick(local(x)));
        }),
      );
    }
  };

  /** roles.ts's queuePump: the machine's next turn, soon. */
  const pump = (x: Node): void => {
    if (x.pumpQueued) return;
    x.pumpQueued = true;
    at(now, () =>
      inNode(x, false, () => {
        x.pumpQueued = false;
        perform(x, x.machine.tick(local(x)));
      }),
    );
  };

  /** One statement: executes after a delay (maybe not at all), answered (maybe not), bounded by the shell's timeout. */
  const statement = <T>(x: Node, name: string, exec: () => T, answer: (result: T | undefined) => RoleAction[], timeoutMs = statementTimeout): void => {
    let reported = false;
    // The answer is network input; the shell's timeout is a timer.
    const report = (result: T | undefined, io: boolean): void => {
      if (reported) return;
      reported = true;
      inNode(x, io, () => perform(x, answer(result)));
    };
    at(realAt(x, local(x) + timeoutMs), () => report(undefined, false));
    const execAt = now + rng.float() * maxDelay;
    if (rng.chance(lossRate) || now < x.dbCutUntil) return; // lost on the way there
    at(execAt, () => {
      if (now < outageUntil) return;
      const result = exec();
      log?.(`${x.id} ${name} executed -> ${JSON.stringify(result)}`);
      if (rng.chance(lossRate) || now < x.dbCutUntil) return; // the answer is lost
      at(now + rng.float() * maxDelay, () => report(result, true));
    });
  };

  const outcomeOf = <T>(result: T | null | undefined): Outcome => (result === undefined ? Outcome.FAILED : result === null || result === false ? Outcome.TAKEN : Outcome.OK);

  /** What the machine reads of a row: with no-carry, an instance that ignores the carried lease. */
  const seen = (row: CoordinatorRow | null, carry = 0): CoordinatorRow | null => (row === null || selfTest !== "no-carry" ? row : { ...row, carryLeaseMs: carry });

  /** The release as written: with grace-not-carried, without the carried lease (what the earlier epochs' holders are owed). */
  const carried = (action: Extract<RoleAction, { type: "release" }>): Extract<RoleAction, { type: "release" }> =>
    selfTest === "grace-not-carried" ? { ...action, carryLeaseMs: 0 } : action;

  const act = (x: Node, action: RoleAction): void => {
    const m = x.machine;
    switch (action.type) {
      case "read":
        statement(x, "read", () => store.row, (r) => (r === undefined ? m.readDone(local(x), null, true) : m.readDone(local(x), seen(r))));
        return;
      case "create":
        statement(x, "create", () => store.create(x.id, action.floor, leaseMs, x.reclaimMs ?? 0), (r) => m.createDone(local(x), r ?? null));
        return;
      case "takeover": {
        let before: CoordinatorRow | null = null;
        statement(
          x,
          "takeover",
          () => {
            before = store.row;
            return store.takeover(x.id, action.watched, leaseMs, true, x.reclaimMs ?? 0, selfTest !== "no-cap-fold");
          },
          // no-carry: the row's carried lease read as the old term's own largest lease only.
          (r) => m.takeoverDone(local(x), seen(r ?? null, (before as CoordinatorRow | null)?.maxLeaseMs ?? 0)),
        );
        return;
      }
      case "renew":
        statement(
          x,
          "renew",
          () => store.renew(x.id, action.epoch, selfTest === "grace-not-carried" ? 0 : action.carryLeaseMs),
          (ok) => {
            if (ok === true) x.term?.delay.retry(); // roles.ts: a raise that failed is asked again while the coordinator answers
            return m.renewDone(local(x), action.epoch, action.sentAt, outcomeOf(ok));
          },
        );
        return;
      case "reserve":
        statement(
          x,
          "reserve",
          () => store.reserve(x.id, action.epoch),
          (floor) => {
            const actions = m.reserveDone(local(x), action.epoch, outcomeOf(floor), floor ?? 0);
            if (typeof floor === "number") at(now, () => inNode(x, false, () => x.term !== null && resume(x.term))); // claims held back for want of a token
            return actions;
          },
        );
        return;
      case "raise": {
        const term = x.term;
        statement(
          x,
          "raise",
          () => store.raise(x.id, action.epoch, action.leaseMs),
          (max) => {
            const outcome = outcomeOf(max);
            const actions = m.raiseDone(local(x), action.epoch, outcome, max ?? 0);
            if (term !== null && term === x.term) {
              if (outcome === Outcome.OK) {
                term.delay.raised(max!);
                resume(term);
              } else if (outcome === Outcome.FAILED) {
                term.delay.raiseFailed();
              }
            }
            return actions;
          },
        );
        return;
      }
      case "release":
        statement(x, "release", () => store.release(x.id, carried(action)), () => []);
        return;
      case "activate":
        activate(x, action);
        return;
      case "stepDown": {
        stats.stepDowns++;
        log?.(`${x.id} steps down: ${action.reason}`);
        const term = x.term;
        x.term = null;
        if (term !== null) {
          // shell.ts: with this instance's own cap on and the term serving reclaim, reclaimable holders get SHUTTING_DOWN with RECLAIM.
          const tell = x.reclaimMs !== null && term.engine.reclaimOn;
          ended(term);
          term.engine.shutdown(local(x), tell);
        }
        return;
      }
    }
  };

  const guardOf = (x: Node): GrantGuard => ({
    mayGrant: () => {
      if (x.frozen) return false;
      if (x.machine.mayGrant(local(x))) return true;
      pump(x);
      return false;
    },
    mayConfirm: () => {
      const m = x.machine;
      if (x.frozen) return false;
      if (m.role === "active" && local(x) < m.deadline) return true;
      if (selfTest === "no-heartbeat-guard") {
        log?.(`${x.id} answers a heartbeat ${(local(x) - m.deadline).toFixed(3)} ms past its deadline (no-heartbeat-guard)`);
        return true;
      }
      pump(x);
      return false;
    },
  });

  /** The term's tokens: the machine's, each checked as coordinator.ts checks a grant. */
  const tokensOf = (x: Node): TokenSource => ({
    next: (): number => {
      const m = x.machine;
      const row = store.row;
      if (row === null || row.holder !== x.id || row.epoch !== m.epoch) {
        throw new Violation(`${x.id} granted in epoch ${m.epoch} while the row is ${JSON.stringify(row)}: two actives`);
      }
      const token = m.nextToken();
      if (token <= lastToken) throw new Violation(`token ${token} from ${x.id} is not above the last token ${lastToken}`);
      if (token > row.tokenFloor) throw new Violation(`token ${token} is above the row's floor ${row.tokenFloor}`);
      lastToken = token;
      if (coordReclaim) freshTokens.add(token);
      stats.grants++;
      log?.(`${x.id} grants token ${token} (epoch ${m.epoch})`);
      if (m.wantsReserve()) pump(x);
      return token;
    },
    get last(): number {
      // reclaim-term-token: the bound of open reclaims read as the term's first reserved block (as if from the row's floor).
      return selfTest === "reclaim-term-token" && opening === x ? x.machine.lastToken + block : x.machine.lastToken;
    },
  });

  const activate = (x: Node, action: Extract<RoleAction, { type: "activate" }>): void => {
    stats.takeovers++;
    const t = local(x);
    let every = action.delay.everyNameMs;
    let published = action.delay.names;
    // The check's account of the grace, from the machine's delay as decided: each name the clean stop published, and every name.
    const graceEnd = new Map<string, number>(published.map(([name, ms]) => [name, t + ms]));
    const everyUntil = t + every;
    if (selfTest === "no-delay") {
      every = 0;
      published = [];
    } else if (selfTest === "short-delay") {
      every = Math.max(0, every - leaseMs);
      published = published.map(([name, ms]) => [name, Math.max(0, ms - leaseMs)] as const);
    } else if (selfTest === "short-grace" && action.reclaimMaxLeaseMs > 0) {
      // Each name the clean stop published held back 1 ms less than its lock-delay.
      published = published.map(([name, ms]) => [name, Math.max(0, ms - 1)] as const);
    }
    if (every > 0 || published.length > 0) stats.delayedTerms++;
    const delay = new LockDelay({
      why: action.why === "released" ? "released" : "takeover",
      until: t + every,
      names: new Map(published.map(([name, ms]) => [name, t + ms])),
      durableMaxMs: action.maxLeaseMs,
      raise: (lease) => {
        if (selfTest === "no-raise") return true;
        perform(x, x.machine.raise(lease));
        return false;
      },
    });
    // shell.ts: the row's cap serves this term (raise-only, whoever set it); open reclaims while every name is held back.
    const cap = action.reclaimMaxLeaseMs;
    const grants = action.reclaim ?? new Map<string, readonly ReclaimEntry[]>();
    const reclaim: ReclaimOptions | null = cap > 0 ? { maxLeaseMs: cap, published: selfTest === "reclaim-any-token" ? anyGrant : grants, open: true } : null;
    const info =
      `${x.id} epoch ${action.epoch} (${action.why}; lock-delay: every name ${every} ms, ` +
      `${published.length === 0 ? "no published names" : published.map(([n, ms]) => `${n} ${ms} ms`).join(", ")}; largest lease ${action.maxLeaseMs} ms` +
      `${cap > 0 ? `; reclaim cap ${cap} ms, ${action.reclaim == null ? "nothing published" : `published ${JSON.stringify([...action.reclaim])}`}, tokens before the term up to ${x.machine.lastToken}` : ""})`;
    openTerm(x, action.epoch, delay, guardOf(x), tokensOf(x), info, null, reclaim === null ? null : { graceEnd, published: grants, reclaim, everyUntil });
    log?.(`active: ${info}, tokens from ${action.firstToken}`);
  };

  /**
   * A LockServer's engine for a term (or a single server's run), driven as
   * server.ts drives it; `run`: a single server's run on its data directory
   * (the graces its lease record owes, the published set, reclaim's options).
   */
  const openTerm = (
    x: Node,
    epoch: number,
    delay: LockDelay,
    guard: GrantGuard | null,
    tokens: TokenSource,
    info: string,
    onDelayOver: (() => void) | null,
    run: {
      readonly graceEnd: ReadonlyMap<string, number>;
      readonly published: ReadonlyMap<string, readonly ReclaimEntry[]> | null;
      readonly reclaim: ReclaimOptions | null;
      /** A coordinated term: until when every name is held back (its clock). */
      readonly everyUntil?: number;
    } | null,
  ): void => {
    const t = local(x);
    const term: Term = {
      node: x,
      epoch,
      engine: null as unknown as Engine<Conn>,
      delay,
      conns: new Set(),
      wheelSeq: 0,
      delaySeq: 0,
      info,
      onDelayOver: delay.over(t) ? null : onDelayOver,
      graceEnd: run?.graceEnd ?? new Map(),
      published: run?.published ?? null,
      reclaimCap: run?.reclaim?.maxLeaseMs ?? -1,
      everyUntil: run?.everyUntil ?? -Infinity,
      openBelow: tokens.last,
    };
    const transport: EngineOutput<Conn> = {
      send: (conn, frame) => {
        const reclaimed = (run !== null || coordReclaim) && frame[0] === FrameType.ACQUIRED && checkGrant(term, conn, frame);
        if (reclaimed && x.leases === null) afterReclaim(term, conn);
        if (reclaimed && x.leases !== null && selfTest !== "reclaim-not-durable") {
          // A reclaimed lease made durable in the lease record as any grant's is, before its ACQUIRED leaves (the record's
          // raise is synchronous): else, once the grace is over and the record no longer carries the last run's leases, a
          // crash leaves a record that does not cover this holder, and the next run grants its name at once. Engine.reclaimClaim
          // does not ask the delay (LockDelay.covers) itself; the shell does it here. (A coordinated term needs nothing: its
          // takeover made the term's largest lease cover the cap, store.ts; no-cap-fold breaks that.)
          term.delay.covers(conn.session!.leaseMs);
        }
        const strike = frame[0] === FrameType.ACQUIRED && (frame[1]! & FLAG_REPLY) !== 0 ? confirmed(x, conn) : null;
        sendDown(conn, { kind: "frame", bytes: frame.slice() }, strike);
      },
      close: (conn, frame) => {
        if (frame !== null && x.leases === null && frame[0] === FrameType.ERROR && (frame[1]! & FLAG_RECLAIM) !== 0) {
          if (x.frozen) {
            checkTold(term, conn);
            stats.toldByStop++;
          } else {
            stats.toldByStepDown++;
          }
        }
        conn.serverDone = true;
        term.conns.delete(conn);
        if (frame !== null) sendDown(conn, { kind: "frame", bytes: frame.slice() });
        sendDown(conn, { kind: "close" });
      },
    };
    x.term = term;
    const reclaim = run?.reclaim ?? null;
    opening = x;
    term.engine = new Engine<Conn>(transport, { ioTimeoutMs, tokens, ...(guard === null ? {} : { grantGuard: guard }), delay, ...(reclaim === null ? {} : { reclaim }) }, t);
    opening = null;
    term.engine.setDriver({
      arm: (tick) => {
        const mySeq = ++term.wheelSeq;
        at(realAt(x, tick) + EPS, () =>
          inNode(x, false, () => {
            if (x.term === term && term.wheelSeq === mySeq) term.engine.tick(local(x));
          }),
        );
      },
    });
    armDelay(term);
  };

  /**
   * Every ACQUIRED a server with reclaim on sends (a single server's run, a
   * coordinated term serving the row's cap): a fresh grant (a token just
   * issued, so above every earlier one) of a name the last clean stop
   * published only once the name's grace is over, and in a coordinated term
   * none while every name is held back; anything else (not a heartbeat's
   * answer) is a reclaim, which must name a grant that stop published, or
   * (a coordinated term's open reclaims) a token issued before the term,
   * with its token, to the client that token was granted to for that name
   * (or to the stale peer, for an earlier holder's token), while the grace
   * runs. A token is never issued twice: a reclaim names one issued before,
   * and a fresh one is above every token issued or named before.
   */
  const checkGrant = (term: Term, conn: Conn, frame: Uint8Array): boolean => {
    const token = Number(decodeAcquired(frame, HEADER_LENGTH));
    if (conn.grantedToken === token) return false; // a heartbeat's answer
    conn.grantedToken = token;
    const x = term.node;
    const session = conn.session;
    const name = session?.lock?.name;
    if (session === null || name === undefined) throw new Violation(`${x.id} sent ACQUIRED (token ${token}) on conn ${conn.id}, which holds no lock`);
    const end = term.graceEnd.get(name);
    const t = local(x);
    const coordinated = x.leases === null;
    if (freshTokens.delete(token)) {
      if (end !== undefined && t < end) {
        throw new Violation(
          `${x.id} granted "${name}" to a fresh claim (token ${token}, ${conn.client.id}) ${(end - t).toFixed(3)} ms before the name's grace ends ` +
            `(the last clean stop published it): ${term.info}`,
        );
      }
      if (t < term.everyUntil) {
        throw new Violation(`${x.id} granted "${name}" to a fresh claim (token ${token}, ${conn.client.id}) ${(term.everyUntil - t).toFixed(3)} ms before the name's grace ends (every name is held back): ${term.info}`);
      }
      if (tokenOwner.has(token)) throw new Violation(`${x.id} granted token ${token} ("${name}") to a fresh claim of ${conn.client.id}: a token issued twice`);
      tokenOwner.set(token, { name, client: conn.client });
      return false;
    }
    const entry = term.published?.get(name)?.find((e) => e.token === token && e.slot === session.slot);
    const open = entry === undefined && coordinated && t < term.everyUntil;
    if (open && token > term.openBelow) {
      throw new Violation(`${x.id} granted a reclaim of "${name}" with token ${token} to ${conn.client.id}, above the last token issued before its term (${term.openBelow}): ${term.info}`);
    }
    if (entry === undefined && !open) {
      const what = term.published === null ? "it published nothing (a first start, or after a crash)" : `it published ${JSON.stringify([...term.published])}`;
      throw new Violation(
        `${x.id} granted a reclaim of "${name}" with token ${token} to ${conn.client.id}, not a grant the last clean stop published (${what})${coordinated ? ", and not every name held back (no open reclaims)" : ""}: ${term.info}`,
      );
    }
    const owner = tokenOwner.get(token);
    if (owner === undefined && open && conn.client === rogue) {
      // A token at or below the floor before the term that no grant was given: an earlier term reserved it and did not use it.
      // The new active cannot tell, and need not: no fresh grant can have it, and none will (the check above, and
      // tokensOf: every fresh token is above every earlier one). Kept, so that a fresh grant of it would be caught.
      tokenOwner.set(token, { name, client: rogue });
    } else if (owner === undefined || owner.name !== name || (owner.client !== conn.client && !(coordinated && conn.client === rogue))) {
      throw new Violation(`${x.id} granted token ${token} ("${name}") to ${conn.client.id} by reclaim; it was granted to ${owner === undefined ? "nobody" : `${owner.client.id} for "${owner.name}"`}: a token issued twice`);
    }
    const graceOver = Math.max(end ?? -Infinity, coordinated ? term.everyUntil : -Infinity);
    if (t >= graceOver) throw new Violation(`${x.id} granted a reclaim of "${name}" (token ${token}, ${conn.client.id}) ${graceOver === -Infinity ? "outside any grace" : `${(t - graceOver).toFixed(3)} ms after its grace ended`}`);
    if (open) stats.openReclaims++;
    return true;
  };

  /**
   * A clean stop tells a holder to reclaim (SHUTTING_DOWN with RECLAIM) only
   * once its release has landed in the row with the holder's grant in the
   * published set (protocol.md 14.2, rule 2): the grant is durable before
   * the holder acts on it.
   */
  const checkTold = (term: Term, conn: Conn): void => {
    const session = conn.session;
    const name = session?.lock?.name;
    const published = store.released.get(term.epoch);
    const x = term.node;
    if (published === undefined) {
      throw new Violation(`${x.id} told ${conn.client.id} to reclaim "${name}" (token ${session?.token}) at its clean stop before its release (epoch ${term.epoch}) landed in the row`);
    }
    if (session === null || name === undefined || !(published?.get(name)?.some((e) => e.token === session.token && e.slot === session.slot) ?? false)) {
      throw new Violation(`${x.id} told ${conn.client.id} to reclaim "${name}" (token ${session?.token}) at its clean stop, a grant its release did not publish`);
    }
  };

  /** server.ts's resume(): grant what the delay, the durable lease or the tokens held back. */
  const resume = (term: Term): void => {
    const x = term.node;
    if (x.term !== term) return;
    const more = term.engine.resume(local(x));
    if (more) at(now, () => inNode(x, false, () => resume(term)));
    armDelay(term);
  };

  /** server.ts's armDelay(): a timer for the next end of a delay. */
  const armDelay = (term: Term): void => {
    const x = term.node;
    const next = term.delay.nextChange(local(x));
    const mySeq = ++term.delaySeq;
    if (next === Infinity) {
      const over = term.onDelayOver;
      if (over !== null && term.delay.over(local(x))) {
        term.onDelayOver = null;
        over();
      }
      return;
    }
    at(realAt(x, next) + EPS, () =>
      inNode(x, false, () => {
        if (term.delaySeq === mySeq) resume(term);
      }),
    );
  };

  const pauseNode = (x: Node, length: number): void => {
    stats.pauses++;
    x.pausedUntil = now + length;
    log?.(`${x.id} paused for ${length.toFixed(1)} ms`);
    at(x.pausedUntil, () => wake(x));
  };

  /**
   * A paused instance resumes: what came due runs now, mostly its network
   * input first (see below), else in order; and a stalled machine may stall
   * again after handling its input, before its timers run.
   */
  const wake = (x: Node): void => {
    if (!x.alive || now < x.pausedUntil) return;
    let tasks = x.backlog;
    x.backlog = [];
    let stallAt = -1;
    // A process stopped while idle in epoll_wait wakes with its sockets ready: the event loop runs their
    // callbacks before its timers (libuv's poll phase comes before the next timers phase).
    if (tasks.length > 1 && rng.chance(0.8)) {
      const io = tasks.filter((t) => t.io);
      tasks = [...io, ...tasks.filter((t) => !t.io)];
      if (io.length > 0 && io.length < tasks.length && rng.chance(0.3)) stallAt = io.length;
    }
    log?.(`${x.id} resumes (${tasks.length} events waiting${stallAt >= 0 ? `, stalls again after ${stallAt}` : ""})`);
    x.waking = true;
    try {
      for (let i = 0; i < tasks.length; i++) {
        if (!x.alive) return;
        if (i === stallAt && now >= x.pausedUntil) pauseNode(x, pauseLength());
        if (now < x.pausedUntil) {
          x.backlog = [...tasks.slice(i), ...x.backlog];
          return;
        }
        tasks[i]!.run();
      }
    } finally {
      x.waking = false;
    }
  };

  const pauseLength = (): number => {
    const kind = rng.weighted([5, 4, 1]);
    if (kind === 0) return rng.float() * 0.2 * leaseMs;
    if (kind === 1) return leaseMs * (0.5 + 2 * rng.float());
    return leaseMs * (2 + 18 * rng.float());
  };

  // --- the network between clients and instances -------------------------------------------

  /** One way, client to instance or back; now and then a stall (a lost segment retransmitted). */
  const latency = (): number => (rng.chance(0.002) ? rng.float() * leaseMs : rng.float() * netDelay);

  const sendUp = (conn: Conn, message: Message): void => {
    if (conn.cut) return;
    const t = Math.max(conn.upAt, now + latency());
    conn.upAt = t;
    at(t, () => {
      if (!conn.cut) arrive(conn, message);
    });
  };

  /** To the client; `then` (the adversary's strike) runs the moment the message reaches the client's host. */
  const sendDown = (conn: Conn, message: Message, then: (() => void) | null = null): void => {
    if (conn.cut) return;
    const t = Math.max(conn.downAt, now + latency());
    conn.downAt = t;
    at(t, () => {
      if (conn.cut) return;
      inClient(conn.client, () => clientGets(conn, message));
      then?.();
    });
  };

  /** The server's side closes (a reset, a refusal): the client sees the connection close. */
  const reset = (conn: Conn): void => {
    if (conn.serverDone) return;
    conn.serverDone = true;
    sendDown(conn, { kind: "close" });
  };

  /** A message reaches instance x's host. */
  const arrive = (conn: Conn, message: Message): void => {
    const x = conn.node;
    if (!x.alive) {
      if (message.kind === "open" && !x.silent) conn.refused = true;
      if (!x.silent && message.kind !== "close") reset(conn); // the process is gone: the kernel resets
      return;
    }
    // No listener while standby: the kernel refuses the connection, paused or not.
    if (message.kind === "open" && x.term === null) {
      conn.refused = true;
      reset(conn);
      return;
    }
    inNode(x, true, () => serverGets(conn, message));
  };

  const serverGets = (conn: Conn, message: Message): void => {
    const x = conn.node;
    const term = x.term;
    if (message.kind === "open") {
      if (term === null) {
        reset(conn);
        return;
      }
      conn.term = term;
      const session = term.engine.open(conn, local(x));
      if (session !== null) {
        conn.session = session;
        term.conns.add(conn);
      }
      return;
    }
    if (term === null || conn.term !== term || conn.serverDone || conn.session === null) return; // the server closed it already
    if (message.kind === "close") {
      conn.serverDone = true;
      term.conns.delete(conn);
      term.engine.closed(conn.session, local(x));
      return;
    }
    const bytes = message.bytes;
    if (bytes[0] === FrameType.ACQUIRE && (term.graceEnd.size > 0 || selfTest === "reclaim-any-token")) {
      const decoded = decodeAcquire(bytes, HEADER_LENGTH, bytes.length - HEADER_LENGTH);
      if (decoded.ok) {
        const request = decoded.request;
        const reclaim = request.reclaim;
        if (reclaim === undefined && local(x) < (term.graceEnd.get(request.name) ?? -Infinity)) stats.graceClaims++;
        const slot = request.limit > 1 ? reclaim?.slot ?? NO_SLOT : request.shared ? SHARED_CLAIM : NO_SLOT;
        lastReclaim = reclaim === undefined ? null : { name: request.name, entry: { token: reclaim.token, slot, limit: request.limit, leaseMs: request.leaseMs } };
      }
    }
    term.engine.frame(conn.session, bytes[0]!, bytes, HEADER_LENGTH, bytes.length - HEADER_LENGTH, local(x));
  };

  // --- clients -----------------------------------------------------------------------------

  /** Run `body` in client c now, or when it resumes; its deadline is looked at first, as its timer would. */
  const inClient = (c: Client, body: () => void): void => {
    const run = (): void => {
      expire(c);
      body();
    };
    if (now < c.pausedUntil) c.backlog.push(run);
    else run();
  };

  const clientTimer = (c: Client, localAt: number, body: () => void): void => {
    at(realAt(c, localAt) + EPS, () => inClient(c, body));
  };

  const think = (c: Client): void => {
    const old = c.claim;
    if (old !== null && old.side !== null) closeSide(old);
    c.claim = null;
    clientTimer(c, local(c) + logUniform(1, 4 * leaseMs), () => {
      if (c.claim === null) startClaim(c);
    });
  };

  const startClaim = (c: Client): void => {
    // A client mostly keeps its lease from claim to claim (an application's setting), and now and then picks another.
    // Half the time a lease the row records exactly (a step of roundLease): no rounding slack in the delay.
    if (uniform) {
      c.leaseMs = maxLease;
    } else if (c.leaseMs === 0 || rng.chance(0.3)) {
      const drawn = Math.max(1, Math.round(logUniform(1, maxLease)));
      c.leaseMs = Math.min(maxLease, rng.chance(0.5) ? roundLease(drawn) : drawn);
    }
    const lease = c.leaseMs;
    const name = rng.pick(names);
    const kind = kinds.get(name)!;
    const claim: Claim = {
      serial: ++c.serial,
      name,
      limit: kind.limit,
      shared: false,
      leaseMs: lease,
      try: rng.chance(0.1),
      // Half the claims are patient (up to about 400 heartbeats), the others give up sooner.
      waitUntil: local(c) + (rng.chance(0.5) ? 100 * lease : logUniform(lease, 100 * lease)),
      holdMs: lease * logUniform(0.05, 10),
      conn: null,
      phase: "acquiring",
      token: 0,
      slot: -1,
      reclaimable: false,
      outstanding: [],
      base: 0,
      srtt: 0,
      hbSeq: 0,
      belief: null,
      lastAt: null,
      side: null,
      sideSentAt: 0,
    };
    claim.shared = kind.rw && rng.chance(0.5);
    c.claim = claim;
    connect(c, claim);
  };

  const openConn = (c: Client, x: Node): Conn => {
    const conn: Conn = {
      id: ++connSerial,
      client: c,
      node: x,
      term: null,
      session: null,
      cut: now < c.cutUntil || now < x.isolatedUntil,
      serverDone: false,
      clientDone: false,
      gaveUp: null,
      upAt: 0,
      downAt: 0,
      refused: false,
      grantedToken: 0,
    };
    c.conns.add(conn);
    sendUp(conn, { kind: "open" });
    return conn;
  };

  /** Connect to an instance (a live one, now and then any) and send the ACQUIRE. */
  const connect = (c: Client, claim: Claim): void => {
    const live = nodes.filter((x) => x.alive);
    // A single server has one address: its current run, or the last one's (down: refused, or silent with its host).
    const x = single ? nodes[nodes.length - 1]! : live.length === 0 || rng.chance(0.1) ? rng.pick(nodes) : rng.pick(live);
    log?.(`${c.id} claims ${claim.name} (lease ${claim.leaseMs} ms${claim.try ? ", try" : ""}) at ${x.id}, conn ${connSerial + 1}`);
    const conn = openConn(c, x);
    claim.conn = conn;
    claim.lastAt = x;
    claim.phase = "acquiring";
    claim.srtt = 0;
    const t = local(c);
    claim.outstanding = [t];
    claim.base = t;
    sendUp(conn, { kind: "frame", bytes: encodeAcquire({ name: claim.name, leaseMs: claim.leaseMs, owner: c.id, try: claim.try, limit: claim.limit, shared: claim.shared }) });
    armDeadline(c, claim);
  };

  /**
   * protocol.md section 14.3: the holder had SHUTTING_DOWN with RECLAIM (or,
   * with reclaim-after-eof, a bare EOF). It still believes, until its
   * deadline, which does not move; it connects again after a moment (now and
   * then late, near the deadline) and reclaims.
   */
  const startReclaim = (c: Client, claim: Claim, why: string): void => {
    claim.phase = "reclaiming";
    claim.conn = null;
    claim.outstanding = [];
    const left = claim.base + GIVE_UP * claim.leaseMs - local(c);
    // Mostly soon, with the clients' reconnect pacing; now and then late: sent within a few round trips of the deadline.
    const wait = rng.chance(0.3) ? Math.max(0, left - rng.float() * 2 * netDelay) : rng.float() * Math.min(100, leaseMs / 4);
    log?.(`${c.id} will reclaim ${claim.name} (token ${claim.token}) after ${why}, in ${wait.toFixed(3)} ms; believes for ${(left / c.rate).toFixed(3)} ms more`);
    reclaimIn(c, claim, wait);
  };

  const reclaimIn = (c: Client, claim: Claim, wait: number): void => {
    clientTimer(c, local(c) + wait, () => {
      if (c.claim === claim && claim.phase === "reclaiming" && claim.conn === null) sendReclaim(c, claim);
    });
  };

  /**
   * Where a reclaim goes: a single server's address; in a coordinated
   * service the client's address list, from the one after `from` (wrapping):
   * a standby refuses the connection, and the client goes on to the next.
   * Instances long gone drop out of the list now and then.
   */
  const reclaimTarget = (from: Node | null): Node => {
    if (single) return nodes[nodes.length - 1]!;
    const list = nodes.filter((n) => n.alive || n === from || rng.chance(0.1));
    const i = from === null ? rng.int(list.length) : (list.indexOf(from) + 1) % list.length;
    return list[i]!;
  };

  /**
   * A stale reclaim of the name races a client's: another connection names a
   * token the stop did not publish (an earlier holder's). (A published token
   * is the grant's credential: whoever names it reclaims it, so a forged one
   * is not tried.) In a coordinated service now and then one the term may
   * issue itself (just above the last token issued before it: what open
   * reclaims must refuse).
   */
  const staleReclaim = (claim: Claim, x: Node): void => {
    const published = x.term?.published?.get(claim.name) ?? [];
    let stale = claim.token + 1;
    for (const [token, owner] of tokenOwner) {
      if (owner.name === claim.name && token < claim.token && (stale > claim.token || token > stale) && !published.some((e) => e.token === token)) stale = token;
    }
    // (Coordinated: open reclaims take any token issued before the term, whatever its name: a token of another name's
    // grant would be a forged credential, which reclaim does not defend against, so the stale peer names none.)
    if (coordReclaim && (stale > claim.token || rng.chance(0.3))) stale = (x.term?.openBelow ?? lastToken) + 1 + rng.int(Math.min(block, 5));
    stats.staleReclaims++;
    log?.(`a stale reclaim of ${claim.name} (token ${stale}) at ${x.id}, conn ${connSerial + 1}`);
    const forged = openConn(rogue, x);
    const forgedReclaim = claim.limit > 1 ? { token: stale, slot: claim.slot } : { token: stale };
    sendUp(forged, { kind: "frame", bytes: encodeAcquire({ name: claim.name, leaseMs: claim.leaseMs, owner: "stale", try: false, limit: claim.limit, shared: claim.shared, reclaim: forgedReclaim }) });
    at(now + leaseMs, () => closeUp(forged));
  };

  /** ACQUIRE with RECLAIM and the grant's token, to the server's address; its send is what the deadline counts from if it is granted. */
  const sendReclaim = (c: Client, claim: Claim): void => {
    const x = reclaimTarget(claim.lastAt);
    claim.lastAt = x;
    log?.(`${c.id} reclaims ${claim.name} (token ${claim.token}) at ${x.id}, conn ${connSerial + 1}`);
    const conn = openConn(c, x);
    claim.conn = conn;
    claim.srtt = 0;
    claim.outstanding = [local(c)];
    stats.reclaimsSent++;
    const reclaim = claim.limit > 1 ? { token: claim.token, slot: claim.slot } : { token: claim.token };
    sendUp(conn, { kind: "frame", bytes: encodeAcquire({ name: claim.name, leaseMs: claim.leaseMs, owner: c.id, try: claim.try, limit: claim.limit, shared: claim.shared, reclaim }) });
    if (rng.chance(coordReclaim ? 0.2 : 0.1)) staleReclaim(claim, x);
    // Now and then the client takes the connection for stuck and reclaims on a second one, closing the first or leaving it open.
    if (rng.chance(0.15)) {
      clientTimer(c, local(c) + rng.float() * 2 * netDelay, () => {
        if (c.claim !== claim || claim.phase !== "reclaiming" || claim.conn !== conn) return;
        stats.doubleReclaims++;
        if (rng.chance(0.5)) closeUp(conn);
        sendReclaim(c, claim);
      });
    }
  };

  const armDeadline = (c: Client, claim: Claim): void => {
    clientTimer(c, claim.base + GIVE_UP * claim.leaseMs, () => {});
  };

  /** The client's deadline passed: a holder has lost the lock (a pending reclaim with it), a waiter or an unanswered claim moves on. */
  const expire = (c: Client): void => {
    const claim = c.claim;
    if (claim === null || (claim.conn === null && claim.phase !== "reclaiming") || local(c) < claim.base + GIVE_UP * claim.leaseMs) return;
    log?.(`${c.id} deadline passed (${claim.phase}, conn ${claim.conn?.id ?? "none"})`);
    if (claim.conn !== null) {
      claim.conn.gaveUp = claim.phase;
      closeUp(claim.conn);
      claim.conn = null;
    }
    if (claim.phase === "holding" || claim.phase === "reclaiming") {
      stats.lapsed++;
      if (claim.phase === "reclaiming") stats.reclaimsLost++;
      endBelief(claim, null); // it lapsed at its deadline
      think(c);
    } else {
      requeue(c, claim);
    }
  };

  const closeUp = (conn: Conn): void => {
    if (conn.clientDone) return;
    conn.clientDone = true;
    sendUp(conn, { kind: "close" });
  };

  /** Claim again at another address after a short backoff, unless the wait is over. */
  const requeue = (c: Client, claim: Claim): void => {
    claim.conn = null;
    if (local(c) >= claim.waitUntil) {
      think(c);
      return;
    }
    clientTimer(c, local(c) + rng.float() * Math.min(100, leaseMs / 4), () => {
      if (c.claim === claim && claim.conn === null) connect(c, claim);
    });
  };

  /** The lock is lost (or given back): the belief ends now, the work stops. */
  const drop = (c: Client, claim: Claim): void => {
    if (claim.phase === "reclaiming") stats.reclaimsLost++;
    endBelief(claim, now);
    think(c);
  };

  const clientGets = (conn: Conn, message: Message): void => {
    const c = conn.client;
    const claim = c.claim;
    if (message.kind === "close") {
      if (message.proxy === true) sendUp(conn, { kind: "close" }); // the proxy closes the server's side now
      else conn.serverDone = true;
      conn.clientDone = true;
      c.conns.delete(conn);
    }
    if (claim !== null && claim.side === conn) {
      sideGets(c, claim, conn, message);
      return;
    }
    if (claim === null || claim.conn !== conn) {
      // A connection the client already left: a grant on it, read at or after the deadline, confirms nothing.
      if (conn.gaveUp !== null && conn.gaveUp !== "holding" && message.kind === "frame" && message.bytes[0] === FrameType.ACQUIRED) {
        if (conn.gaveUp === "reclaiming") stats.lateReclaims++;
        else stats.late++;
        conn.gaveUp = null;
      }
      return;
    }
    if (message.kind === "close") {
      log?.(`${c.id} conn ${conn.id} closed${conn.refused ? " (refused)" : ""}`);
      claim.conn = null;
      if (claim.phase === "reclaiming") {
        // Refused: nothing listened yet (the server not back): try again, paced. A connection that broke: lost.
        if (conn.refused) reclaimIn(c, claim, rng.float() * Math.min(100, leaseMs / 4));
        else drop(c, claim);
      } else if (claim.phase === "holding") {
        if (selfTest === "reclaim-after-eof" && claim.reclaimable && c.reclaims) startReclaim(c, claim, "a bare EOF (reclaim-after-eof)");
        else drop(c, claim);
      } else {
        requeue(c, claim);
      }
      return;
    }
    if (message.kind !== "frame") return;
    const bytes = message.bytes;
    const type = bytes[0]!;
    if (type === FrameType.ERROR) {
      const error = decodeError(bytes, HEADER_LENGTH, bytes.length - HEADER_LENGTH);
      const reclaimFlag = error.code === ErrorCode.SHUTTING_DOWN && (bytes[1]! & FLAG_RECLAIM) !== 0;
      log?.(`${c.id} conn ${conn.id} ERROR ${errorCodeName(error.code)}${reclaimFlag ? " with RECLAIM" : ""}`);
      if (reclaimFlag && (claim.phase !== "holding" || !claim.reclaimable)) {
        throw new Violation(`client ${c.id} conn ${conn.id} (${claim.phase}${claim.phase === "holding" ? ", its grant not RECLAIMABLE" : ""}) got SHUTTING_DOWN with RECLAIM`);
      }
      closeUp(conn);
      claim.conn = null;
      if (reclaimFlag && c.reclaims && claim.side !== null) {
        // protocol.md 14.3: the reclaim on silence under way goes on as the first attempt of the reclaim after a clean stop.
        const side = claim.side;
        claim.side = null;
        claim.phase = "reclaiming";
        claim.conn = side;
        claim.outstanding = [claim.sideSentAt];
        log?.(`${c.id} SHUTTING_DOWN with RECLAIM on conn ${conn.id} while reclaiming on silence: conn ${side.id} is the reclaim`);
      } else if (reclaimFlag && c.reclaims) {
        startReclaim(c, claim, "SHUTTING_DOWN with RECLAIM");
      } else if (claim.phase === "holding" || claim.phase === "reclaiming") {
        drop(c, claim);
      } else if (error.code === ErrorCode.LOCK_BUSY || error.code === ErrorCode.LOCK_DELAYED) {
        think(c);
      } else {
        requeue(c, claim);
      }
      return;
    }
    const reply = (bytes[1]! & FLAG_REPLY) !== 0;
    if (reply) answered(c, claim, conn);
    if (type === FrameType.WAITING) {
      if (claim.phase === "holding" || claim.phase === "reclaiming") throw new Violation(`client ${c.id} conn ${conn.id}: WAITING ${claim.phase === "holding" ? "after its grant" : "to a reclaim"}`);
      claim.phase = "waiting";
      return;
    }
    if (type !== FrameType.ACQUIRED) throw new Violation(`client ${c.id} got frame type ${type}`);
    const token = Number(decodeAcquired(bytes, HEADER_LENGTH));
    const slot = decodeSlot(bytes, HEADER_LENGTH, bytes.length - HEADER_LENGTH);
    if (claim.limit > 1 ? !(slot >= 0 && slot < claim.limit) : slot !== -1) throw new Violation(`client ${c.id} conn ${conn.id}: ACQUIRED with slot ${slot} for limit ${claim.limit}`);
    const reclaimable = (bytes[1]! & FLAG_RECLAIMABLE) !== 0;
    const cap = conn.term!.reclaimCap;
    if (reclaimable !== (cap >= 0 && claim.leaseMs <= cap)) {
      throw new Violation(`client ${c.id} conn ${conn.id}: ACQUIRED ${reclaimable ? "with" : "without"} RECLAIMABLE for lease ${claim.leaseMs} ms (the term's reclaim cap ${cap} ms)`);
    }
    if (claim.phase === "reclaiming") {
      const belief = claim.belief!;
      if (!reply || token !== claim.token || slot !== claim.slot) {
        // protocol.md 14.3: another token (or slot) is a loss (and checkGrant has already judged the server).
        log?.(`${c.id} reclaim of ${claim.name} answered with token ${token} slot ${slot}, not ${claim.token} slot ${claim.slot}: lost`);
        closeUp(conn);
        claim.conn = null;
        drop(c, claim);
        return;
      }
      // Read before the deadline (expire ran first): the reclaim's send is now the last answered one.
      claim.phase = "holding";
      claim.reclaimable = reclaimable;
      belief.deadline = claim.base + GIVE_UP * claim.leaseMs;
      belief.from = conn.term!;
      stats.reclaims++;
      log?.(`${c.id} reclaimed ${claim.name} (token ${token}) from ${conn.node.id}: believes for ${((belief.deadline - local(c)) / c.rate).toFixed(3)} ms`);
      return;
    }
    claim.reclaimable = reclaimable;
    if (claim.phase === "holding") {
      if (claim.side !== null) {
        log?.(`${c.id} heartbeat answered on conn ${conn.id}: the silence is over, conn ${claim.side.id} closed`);
        closeSide(claim);
      }
      if (claim.belief !== null) {
        claim.belief.deadline = claim.base + GIVE_UP * claim.leaseMs;
        log?.(`${c.id} confirmed: believes it holds ${claim.name} for ${((claim.belief.deadline - local(c)) / c.rate).toFixed(3)} ms`);
      }
      return;
    }
    claim.phase = "holding";
    claim.token = token;
    claim.slot = slot;
    begin(c, claim, token, conn);
  };

  /** A reply: the oldest frame in flight is answered; the deadline counts from its send. */
  const answered = (c: Client, claim: Claim, conn: Conn): void => {
    const sent = claim.outstanding.shift();
    if (sent === undefined) throw new Violation(`client ${c.id} conn ${conn.id}: a reply with no frame in flight`);
    const t = local(c);
    if (sent > claim.base) claim.base = sent;
    const sample = t - sent;
    claim.srtt = claim.srtt === 0 ? sample : claim.srtt + 0.2 * (sample - claim.srtt);
    armDeadline(c, claim);
    const base = claim.leaseMs / 4;
    const interval = Math.max(1, Math.min(base - 2 * claim.srtt, base));
    const hb = ++claim.hbSeq;
    clientTimer(c, t + interval, () => {
      if (c.claim !== claim || claim.conn !== conn || claim.hbSeq !== hb || claim.outstanding.length > 0) return;
      claim.outstanding.push(local(c));
      sendUp(conn, { kind: "frame", bytes: HEARTBEAT_FRAME });
      // protocol.md 14.3, on silence: the next heartbeat is due and this one is still unanswered.
      if (coordReclaim && c.reclaims && claim.reclaimable && claim.phase === "holding") {
        clientTimer(c, local(c) + interval, () => {
          if (c.claim !== claim || claim.conn !== conn || claim.hbSeq !== hb || claim.phase !== "holding" || claim.side !== null || claim.outstanding.length === 0) return;
          stats.silenceReclaims++;
          log?.(`${c.id} silence on conn ${conn.id} (a heartbeat unanswered for ${interval.toFixed(3)} ms): reclaims ${claim.name} (token ${claim.token}) beside it`);
          sideAttempt(c, claim);
        });
      }
    });
  };

  /**
   * One attempt of a reclaim on silence: a second connection to the next
   * address after the last one tried (never the old connection's own),
   * ACQUIRE with RECLAIM on it. An attempt that brings no answer within
   * lease/4 (a connect to a host that died, a frozen instance) is given up,
   * as a client's connect timeout would, and the next address tried.
   */
  const sideAttempt = (c: Client, claim: Claim): void => {
    if (c.claim !== claim || claim.phase !== "holding" || claim.conn === null || claim.side !== null) return;
    const x = reclaimTarget(claim.lastAt);
    claim.lastAt = x;
    if (x === claim.conn.node) {
      sideRetry(c, claim);
      return;
    }
    log?.(`${c.id} reclaims ${claim.name} (token ${claim.token}) on silence at ${x.id}, conn ${connSerial + 1}`);
    const conn = openConn(c, x);
    claim.side = conn;
    claim.sideSentAt = local(c);
    stats.reclaimsSent++;
    const reclaim = claim.limit > 1 ? { token: claim.token, slot: claim.slot } : { token: claim.token };
    sendUp(conn, { kind: "frame", bytes: encodeAcquire({ name: claim.name, leaseMs: claim.leaseMs, owner: c.id, try: claim.try, limit: claim.limit, shared: claim.shared, reclaim }) });
    if (rng.chance(0.1)) staleReclaim(claim, x);
    clientTimer(c, local(c) + claim.leaseMs / 4, () => {
      if (claim.side !== conn) return;
      log?.(`${c.id} reclaim on silence at ${x.id} (conn ${conn.id}) unanswered: the next address`);
      closeSide(claim);
      sideRetry(c, claim);
    });
  };

  const sideRetry = (c: Client, claim: Claim): void => {
    clientTimer(c, local(c) + rng.float() * Math.min(100, leaseMs / 4), () => sideAttempt(c, claim));
  };

  /** The reclaim's connection is given up (a grant read on it later confirms nothing). */
  const closeSide = (claim: Claim): void => {
    const side = claim.side;
    if (side === null) return;
    claim.side = null;
    side.gaveUp = "reclaiming";
    closeUp(side);
  };

  /** What reaches the reclaim on silence's connection. */
  const sideGets = (c: Client, claim: Claim, conn: Conn, message: Message): void => {
    if (message.kind === "frame" && message.bytes[0] === FrameType.ACQUIRED && (message.bytes[1]! & FLAG_REPLY) !== 0) {
      const bytes = message.bytes;
      const token = Number(decodeAcquired(bytes, HEADER_LENGTH));
      const slot = decodeSlot(bytes, HEADER_LENGTH, bytes.length - HEADER_LENGTH);
      if (token === claim.token && slot === claim.slot && claim.phase === "holding" && claim.belief !== null) {
        const reclaimable = (bytes[1]! & FLAG_RECLAIMABLE) !== 0;
        const cap = conn.term!.reclaimCap;
        if (reclaimable !== (cap >= 0 && claim.leaseMs <= cap)) {
          throw new Violation(`client ${c.id} conn ${conn.id}: ACQUIRED ${reclaimable ? "with" : "without"} RECLAIMABLE for lease ${claim.leaseMs} ms (the term's reclaim cap ${cap} ms)`);
        }
        // Reclaimed, confirmed up to the reclaim's send: the old connection is closed, the claim goes on on this one.
        const old = claim.conn;
        if (old !== null) closeUp(old);
        claim.side = null;
        claim.conn = conn;
        claim.reclaimable = reclaimable;
        claim.outstanding = [claim.sideSentAt];
        claim.hbSeq++;
        answered(c, claim, conn);
        const belief = claim.belief;
        belief.deadline = claim.base + GIVE_UP * claim.leaseMs;
        belief.from = conn.term!;
        stats.reclaims++;
        stats.silenceReclaimed++;
        log?.(`${c.id} reclaimed ${claim.name} (token ${token}) on silence from ${conn.node.id}: believes for ${((belief.deadline - local(c)) / c.rate).toFixed(3)} ms`);
        return;
      }
    }
    // Anything else (refused, an ERROR, a close, WAITING, another token): that attempt failed; the next, paced.
    log?.(`${c.id} reclaim on silence at ${conn.node.id} (conn ${conn.id}) failed: ${message.kind === "frame" ? `frame ${message.bytes[0]}` : message.kind}`);
    closeSide(claim);
    sideRetry(c, claim);
  };

  /** A grant reached client c before its deadline: it believes now. The check. */
  const begin = (c: Client, claim: Claim, token: number, conn: Conn): void => {
    const term = conn.term!;
    const belief: Belief = {
      client: c,
      name: claim.name,
      shared: claim.shared,
      slot: claim.slot,
      leaseMs: claim.leaseMs,
      token,
      from: term,
      since: now,
      deadline: claim.base + GIVE_UP * claim.leaseMs,
      dropped: null,
    };
    claim.belief = belief;
    stats.beliefs++;
    if (claim.leaseMs > stats.longestLease) stats.longestLease = claim.leaseMs;
    const what = (b: { readonly shared: boolean; readonly slot: number }): string => (b.shared ? " (shared)" : b.slot >= 0 ? ` (slot ${b.slot} of ${claim.limit})` : "");
    log?.(`${c.id} believes it holds ${claim.name}${what(belief)} (token ${token}, lease ${claim.leaseMs} ms, from ${term.node.id} epoch ${term.epoch}) for ${((belief.deadline - local(c)) / c.rate).toFixed(3)} ms`);
    const set = beliefs.get(claim.name)!;
    let inForce = 0;
    for (const other of set) {
      const d = other.client;
      if (other.dropped === null && local(d) < other.deadline) {
        // Beside it: shared with shared; a semaphore's other slots while fewer than its limit believe.
        inForce++;
        const fits = claim.limit > 1 ? other.slot !== belief.slot && inForce < claim.limit : belief.shared && other.shared;
        if (fits) continue;
        const left = realAt(d, other.deadline) - now;
        throw new Violation(
          `client ${c.id} came to believe it holds "${claim.name}"${what(belief)} (token ${token}, lease ${claim.leaseMs} ms, granted in ${term.info}) ` +
            `while client ${d.id} still believes it holds it${what(other)} for ${left.toFixed(3)} ms more (token ${other.token}, lease ${other.leaseMs} ms, ` +
            `granted in ${other.from.info} ${(now - other.since).toFixed(1)} ms ago)${claim.limit > 1 ? `, ${inForce} believing beside it` : ""}; clock rates: ${c.id} ${c.rate.toFixed(4)}, ${d.id} ${d.rate.toFixed(4)}, ` +
            `${term.node.id} ${term.node.rate.toFixed(4)}, ${other.from.node.id} ${other.from.node.rate.toFixed(4)}`,
        );
      }
      // Over: it lapsed unseen (at its deadline) or was dropped.
      set.delete(other);
      if (other.dropped === null && other.from !== term) {
        const gap = now - realAt(d, other.deadline);
        if (gap < 0.1 * other.leaseMs) stats.handoffs++;
        const share = gap / other.leaseMs;
        if (tightest === null || share < tightest.share) tightest = { ms: gap, share };
      }
    }
    set.add(belief);
    if (belief.shared) stats.sharedBeliefs++;
    if (belief.slot >= 0) stats.semaphoreBeliefs++;
    if (inForce + 1 > stats.mostBelievers) stats.mostBelievers = inForce + 1;
    clientTimer(c, local(c) + claim.holdMs, () => {
      // Done with the work: release (or, reclaiming, give the reclaim up).
      if (c.claim !== claim || (claim.phase !== "holding" && claim.phase !== "reclaiming") || (claim.phase === "holding" && claim.conn === null)) return;
      log?.(`${c.id} releases ${claim.name}`);
      endBelief(claim, now);
      if (claim.conn !== null) closeUp(claim.conn);
      claim.conn = null;
      think(c);
    });
  };

  /** The belief ends: dropped at `droppedAt` (real), or null: it lapsed at its deadline. */
  const endBelief = (claim: Claim, droppedAt: number | null): void => {
    const belief = claim.belief;
    if (belief === null) return;
    claim.belief = null;
    if (droppedAt !== null && local(belief.client) < belief.deadline) {
      belief.dropped = droppedAt;
      beliefs.get(belief.name)!.delete(belief);
    }
  };

  const spawnClient = (): void => {
    const c: Client = {
      id: `c${clients.length + 1}`,
      offset: rng.int(2 ** 40),
      rate: rate(),
      pausedUntil: -1,
      backlog: [],
      cutUntil: -1,
      claim: null,
      conns: new Set(),
      serial: 0,
      leaseMs: 0,
      // Reclaim is on by default in the clients; now and then one has it off.
      reclaims: reclaimOn ? rng.chance(0.85) : true,
    };
    clients.push(c);
    think(c);
  };

  /** Where stale reclaims come from: a peer that believes nothing and reads nothing. */
  const rogue: Client = { id: "stale", offset: 0, rate: 1, pausedUntil: -1, backlog: [], cutUntil: -1, claim: null, conns: new Set(), serial: 0, leaseMs: 0, reclaims: false };

  const wakeClient = (c: Client): void => {
    if (now < c.pausedUntil) return;
    const backlog = c.backlog;
    c.backlog = [];
    log?.(`${c.id} resumes (${backlog.length} events waiting)`);
    for (let i = 0; i < backlog.length; i++) {
      if (now < c.pausedUntil) {
        c.backlog = [...backlog.slice(i), ...c.backlog];
        return;
      }
      backlog[i]!();
    }
  };

  // --- the schedule ------------------------------------------------------------------------

  const kill = (x: Node, silent: boolean): void => {
    x.alive = false;
    x.silent = silent;
    stats.kills++;
    log?.(`${x.id} killed (${silent ? "its host died: nothing answers" : "its connections are reset"})`);
    const term = x.term;
    x.term = null;
    x.backlog = [];
    if (term !== null) ended(term);
    if (term !== null && !silent) for (const conn of term.conns) reset(conn);
    if (single) restartLater();
  };

  /**
   * roles.ts's stop(): publish the names held, end the sessions, release the
   * row. A single server (daemon.ts): the names held, the sessions ended,
   * then the lease record closed with them.
   */
  const stopCleanly = (x: Node): void => {
    log?.(`${x.id} stops cleanly`);
    const term = x.term;
    const held = term === null ? [] : (term.engine.held(MAX_PUBLISHED_NAMES) ?? "*");
    if (x.leases !== null) {
      // Before anything is sent: the names held, and with reclaim on the reclaimable grants, made durable.
      x.term = null;
      pendingPublished = reclaimOn && term !== null ? term.engine.reclaimableGrants() : null;
      x.leases.close(held);
      term?.engine.shutdown(local(x), pendingPublished !== null);
      x.alive = false;
      restartLater(true);
      return;
    }
    if (term !== null && x.machine.role === "active" && x.reclaimMs !== null && term.engine.reclaimOn) {
      stopPublishing(x, term);
      return;
    }
    const actions = x.machine.stop(local(x), held);
    x.term = null;
    if (term !== null) ended(term);
    term?.engine.shutdown(local(x));
    for (const a of actions) act(x, a);
    x.alive = false;
    if (coordReclaim && rng.chance(0.7)) upgradeStep();
  };

  /**
   * shell.ts's stopPublishing (protocol.md 14.2, rule 2): from the snapshot
   * on nothing is granted and no heartbeat answered (frozen), the release
   * publishes the held names and the reclaimable grants, and only once its
   * answer says it landed do those holders get SHUTTING_DOWN with RECLAIM;
   * a release without an answer (bounded by twice the statement timeout; it
   * may still land) sends plain SHUTTING_DOWN. The listener stays open
   * meanwhile (claims get SHUTTING_DOWN, heartbeats no answer). With
   * tell-early, holders are told before the release is even sent.
   */
  const stopPublishing = (x: Node, term: Term): void => {
    x.frozen = true;
    const held = term.engine.held(MAX_PUBLISHED_NAMES);
    let grants: Map<string, ReclaimEntry[]> | null = term.engine.reclaimableGrants();
    let count = 0;
    for (const entries of grants.values()) count += entries.length;
    if (count > MAX_PUBLISHED_NAMES) grants = null;
    stats.publishingStops++;
    log?.(`${x.id} stops cleanly, publishing ${count} reclaimable grants: frozen until its release is answered`);
    const actions = x.machine.stop(local(x), held ?? "*", grants);
    const release = actions.find((a): a is Extract<RoleAction, { type: "release" }> => a.type === "release");
    const tell = (reclaim: boolean): void => {
      if (!x.alive || x.term !== term) return;
      x.term = null;
      ended(term);
      log?.(`${x.id} ends its sessions: ${reclaim ? "SHUTTING_DOWN with RECLAIM to its reclaimable holders" : "plain SHUTTING_DOWN (the release had no answer)"}`);
      term.engine.shutdown(local(x), reclaim);
      x.alive = false;
      if (rng.chance(0.7)) upgradeStep();
    };
    if (selfTest === "tell-early") tell(grants !== null);
    if (release === undefined) return tell(false);
    statement(
      x,
      "release",
      () => store.release(x.id, carried(release)),
      (ok) => {
        tell(ok === true && grants !== null);
        return [];
      },
      2 * statementTimeout,
    );
  };

  /** A rolling upgrade's step: the stopped instance's next version starts soon (each stop counts as one). */
  const upgradeStep = (): void => {
    at(now + logUniform(0.5, leaseMs / 4), () => {
      if (nodes.filter((n) => n.alive).length < 3) spawn();
    });
  };

  /**
   * The adversary after a coordinated term granted a reclaim: now and then
   * the term fails in turn, while its grace runs or soon after it ended
   * (frozen, cut off, or its host dead), so that the holders it took back
   * rely on what its row covers (rule 1: a largest lease of at least M).
   */
  const afterReclaim = (term: Term, conn: Conn): void => {
    if (!rng.chance(0.5)) return;
    const x = term.node;
    // Inside the grace; or once it is over, if the reclaimed holder still holds here (its name no longer held back).
    const inside = rng.chance(0.3);
    const end = inside ? local(x) : Math.max(local(x), term.delay.endsAt);
    // (Once over: after the next renewal, which no longer carries the earlier epochs' lease.)
    at(realAt(x, end) + (inside ? rng.float() : 0.3 + 0.7 * rng.float()) * leaseMs, () => {
      if (x.term !== term || !x.alive) return;
      if (!inside && (conn.serverDone || conn.session?.state !== SessionState.OWNER)) return;
      const kind = rng.weighted([2, 2, 1]);
      log?.(`strike at ${x.id} after its reclaims: ${["freezes", "is cut off", "dies with its host"][kind]}`);
      if (kind === 0 && now >= x.pausedUntil) pauseNode(x, leaseMs * (1 + 4 * rng.float()));
      else if (kind === 1) isolate(x, leaseMs * (1 + 4 * rng.float()));
      else if (kind === 2 && nodes.filter((n) => n.alive).length > 1) kill(x, true);
    });
  };

  /** A term ends (step-down, stop, kill): counted when its grace still ran (a failover inside a grace). */
  const ended = (term: Term): void => {
    const x = term.node;
    if (term.reclaimCap >= 0 && !term.delay.over(local(x))) stats.graceFailovers++;
  };

  // --- a single server on a data directory -------------------------------------------------

  const dataDir = single ? mkdtempSync(join(process.platform === "linux" ? "/dev/shm" : tmpdir(), "lockd-believers-")) : "";
  /** The single server's host: one clock rate for every run (each run's monotonic clock starts anew). */
  const hostRate = single ? rate() : 1;
  let runs = 0;

  const singleTokens: TokenSource = {
    next: (): number => {
      const token = lastToken + 1;
      lastToken = token;
      freshTokens.add(token);
      stats.grants++;
      log?.(`grants token ${token}`);
      return token;
    },
    get last(): number {
      return lastToken;
    },
  };

  /** serve.ts and daemon.ts without a coordinator: open the lease record, mark it not clean, serve. */
  const startServer = (): void => {
    if (selfTest === "no-restart-delay") rmSync(join(dataDir, "leases"), { force: true });
    const x: Node = {
      id: `s${++serial}`,
      machine: drivenMachine({ leaseMs, block }),
      offset: rng.int(2 ** 40),
      rate: hostRate,
      alive: true,
      silent: false,
      pausedUntil: -1,
      backlog: [],
      waking: false,
      timerSeq: 0,
      pumpQueued: false,
      dbCutUntil: -1,
      isolatedUntil: -1,
      term: null,
      leases: null,
      reclaimMs: null,
      frozen: false,
    };
    nodes.push(x);
    const t = local(x);
    const leases = LeasesFile.open(dataDir, t, (error) => {
      throw error;
    });
    x.leases = leases;
    const owed = startDelay(leases.previous);
    leases.start();
    stats.takeovers++;
    if (!leases.delay.over(t)) stats.delayedTerms++;
    const previous = leases.previous;
    // What the last clean stop published (the data directory's copy), read once: after this run, a crash leaves nothing to reclaim.
    const published = pendingPublished;
    pendingPublished = null;
    // The check's own account of each published name's grace, from the lease record: no fresh grant before it.
    const graceEnd = new Map<string, number>();
    if (previous !== null && previous.clean && previous.held !== null && previous.held !== "*") {
      const every = delayFor(previous.carryLeaseMs);
      for (const [name, lease] of previous.held) graceEnd.set(name, t + Math.max(every, delayFor(lease)));
    }
    let delay = leases.delay;
    if (selfTest === "short-grace" && owed.names.length > 0) {
      // The published names held back 1 ms less; the rest as the lease record says, its raises written as LeasesFile writes them.
      const file = leases as unknown as { raise(leaseMs: number): boolean };
      delay = new LockDelay({
        why: "clean-restart",
        until: t + owed.everyNameMs,
        names: new Map(owed.names.map(([name, ms]) => [name, t + ms - 1])),
        durableMaxMs: 0,
        raise: (lease) => file.raise(lease),
      });
    }
    const reclaim: ReclaimOptions | null = !reclaimOn
      ? null
      : { maxLeaseMs: reclaimCap, ...(selfTest === "reclaim-any-token" ? { published: anyGrant } : published === null ? {} : { published }) };
    const info =
      `${x.id}, run ${runs + 1} on the data directory (${previous === null ? "first start" : previous.clean ? "after a clean stop" : "after a crash"}; ` +
      `lock-delay: every name ${owed.everyNameMs} ms, ${owed.names.length === 0 ? "no published names" : owed.names.map(([n, ms]) => `${n} ${ms} ms`).join(", ")}; ` +
      `record ${JSON.stringify(previous)}${reclaimOn ? `; reclaim cap ${reclaimCap} ms, ${published === null ? "nothing published" : `published ${JSON.stringify([...published])}`}` : ""})`;
    openTerm(x, ++runs, delay, null, singleTokens, info, () => leases.delayOver(), { graceEnd, published, reclaim });
    log?.(`serving: ${info}`);
    // Now and then a run that published reclaims crashes before they all come in: the next run accepts none.
    if (reclaimOn && published !== null && rng.chance(0.3)) {
      at(now + logUniform(0.05, leaseMs), () => {
        if (x.alive && nodes[nodes.length - 1] === x) kill(x, false);
      });
    }
  };

  /** A restart after a crash or a stop; with reclaim on, a clean stop is mostly an upgrade step: the new version starts at once. */
  const restartLater = (clean = false): void => {
    at(now + (clean && reclaimOn && rng.chance(0.7) ? logUniform(0.5, leaseMs / 4) : logUniform(1, 2 * leaseMs)), startServer);
  };

  /** A network partition of the instance's host: the coordinator and every client lose it, silently. */
  const isolate = (x: Node, length: number): void => {
    x.isolatedUntil = Math.max(x.isolatedUntil, now + length);
    x.dbCutUntil = Math.max(x.dbCutUntil, x.isolatedUntil);
    stats.partitions++;
    log?.(`${x.id} cut off from the network for ${length.toFixed(1)} ms`);
    if (x.term !== null) for (const conn of x.term.conns) conn.cut = true;
  };

  const cutClient = (c: Client, length: number): void => {
    c.cutUntil = Math.max(c.cutUntil, now + length);
    stats.partitions++;
    log?.(`${c.id} cut off from the network for ${length.toFixed(1)} ms`);
    for (const conn of c.conns) conn.cut = true;
    c.conns.clear();
  };

  /**
   * The adversary: an active has just confirmed a holder whose lease needs a
   * lock-delay. Now and then the worst follows at once: the active freezes,
   * dies with its host, or is cut off; or stops cleanly as the holder is cut
   * off; or only the holder is cut off. And an active cut off from the
   * coordinator, near its deadline, is cut off from everyone.
   */
  const confirmed = (x: Node, conn: Conn): (() => void) | null => {
    const session = conn.session;
    if (session === null || session.state !== SessionState.OWNER) return null;
    if (log !== null && x.machine.role === "active" && local(x) >= x.machine.deadline) {
      const sent = conn.client.claim?.conn === conn ? conn.client.claim.outstanding[0] : undefined;
      const by = sent === undefined ? "?" : (realAt(conn.client, sent) - realAt(x, x.machine.deadline)).toFixed(3);
      log(`${x.id} confirmed ${conn.client.id} (lease ${session.leaseMs} ms) past its deadline, a heartbeat sent ${by} ms after it`);
    }
    if (now < x.dbCutUntil && x.machine.role === "active" && x.machine.deadline - local(x) < 0.15 * leaseMs && rng.chance(0.3)) {
      return () => x.alive && isolate(x, leaseMs * (0.5 + 3 * rng.float()));
    }
    // Failures come in bursts: a machine that just woke from a stall is the likeliest to fail again.
    const waking = x.waking;
    if (session.leaseMs <= leaseMs / 4 || !rng.chance(waking ? Math.max(0.7, strikeRate) : strikeRate)) return null;
    const holdMs = session.leaseMs;
    if (waking) {
      // Just after waking, whatever keeps the step-down's SHUTTING_DOWN from the holder: the machine stalls
      // again at once (before its timers), or the holder is cut off as the confirmation reaches it.
      if (rng.chance(0.3)) {
        log?.(`strike at ${x.id} after confirming ${conn.client.id}: stalls again`);
        pauseNode(x, holdMs * (0.2 + 0.6 * rng.float()));
        return null;
      }
      return () => {
        log?.(`strike at ${x.id} after confirming ${conn.client.id}: the holder is cut off`);
        cutClient(conn.client, holdMs * (0.5 + rng.float()));
      };
    }
    return () => {
      if (!x.alive || x.term === null) return;
      // Reclaim on a coordinated service: also a clean stop with the holder listening (a rolling upgrade's step), and the
      // active cut off from the coordinator alone (it steps down at its deadline, telling reclaimable holders to reclaim).
      const kind = rng.weighted(coordReclaim ? [5, 1, 2, 2, 1, 3, 2] : [5, 1, 2, 2, 1]);
      log?.(`strike ${kind} at ${x.id} after confirming ${conn.client.id}`);
      const live = nodes.filter((n) => n.alive).length;
      // A pause that ends while the holder still believes, or one past it.
      if (kind === 0 && now >= x.pausedUntil) pauseNode(x, rng.chance(0.7) ? holdMs * (0.1 + 0.7 * rng.float() ** 0.5) : leaseMs * (0.5 + (rng.chance(0.7) ? 2 : 20) * rng.float()));
      else if (kind === 1 && (live > 1 || single)) kill(x, true);
      else if (kind === 2) isolate(x, leaseMs * (0.5 + 3 * rng.float()));
      else if (kind === 3 && now >= x.pausedUntil) {
        cutClient(conn.client, holdMs * (0.5 + rng.float()));
        stopCleanly(x);
      } else if (kind === 4) cutClient(conn.client, holdMs * (0.5 + rng.float()));
      else if (kind === 5 && now >= x.pausedUntil) stopCleanly(x);
      else if (kind === 6) {
        const length = leaseMs * (0.5 + 3 * rng.float());
        x.dbCutUntil = Math.max(x.dbCutUntil, now + length);
        log?.(`${x.id} cut off from the coordinator for ${length.toFixed(1)} ms`);
      }
    };
  };

  /**
   * A proxy between client and server closes a live holder's connection: the
   * client reads an EOF, and the server sees the close after that (and may
   * promote the next waiter at once). The order matters: were the server told
   * first, its next grant could reach a client before the holder read its
   * EOF, and no rule of the client's could help. No reclaim may follow an EOF.
   */
  const proxyClose = (conn: Conn): void => {
    if (conn.cut || conn.serverDone) return;
    stats.proxyCloses++;
    log?.(`a proxy closes conn ${conn.id} of ${conn.client.id}: the client reads an EOF, then the server sees the close`);
    sendDown(conn, { kind: "close", proxy: true });
  };

  /** Reclaim seeds, besides the rest: clean stops (reclaimable holders get SHUTTING_DOWN with RECLAIM), and proxies closing holders' connections. */
  const reclaimChaos = (): void => {
    // A single server's current run, or the coordinated service's active (a rolling upgrade's step), else any instance.
    const actives = nodes.filter((n) => n.alive && n.term !== null);
    const x = single ? nodes[nodes.length - 1]! : actives.length > 0 ? rng.pick(actives) : rng.pick(nodes);
    if (rng.chance(0.5)) {
      if (x.alive && now >= x.pausedUntil) stopCleanly(x);
      return;
    }
    const holders = clients.filter((c) => c.claim !== null && c.claim.phase === "holding" && c.claim.conn !== null);
    if (holders.length > 0) proxyClose(rng.pick(holders).claim!.conn!);
  };

  const chaos = (): void => {
    if (reclaimOn && rng.chance(0.4)) {
      reclaimChaos();
      at(now + rng.float() * 2 * chaosMs, chaos);
      return;
    }
    const live = nodes.filter((x) => x.alive);
    // Failures hit the active more often than not: that is where clients hold.
    const active = live.filter((x) => x.term !== null);
    const x = live.length === 0 ? null : active.length > 0 && rng.chance(0.6) ? rng.pick(active) : rng.pick(live);
    const c = rng.pick(clients);
    const kind = rng.weighted([4, 1, 1, 1, 4, 2, 2, 2, 2, 1]);
    if (kind === 0 && x !== null && now >= x.pausedUntil) {
      pauseNode(x, pauseLength());
    } else if (kind === 1) {
      const length = rng.float() * 2 * leaseMs;
      outageUntil = Math.max(outageUntil, now + length);
      log?.(`coordinator unreachable for ${length.toFixed(1)} ms`);
    } else if (kind === 2 && x !== null && (live.length > 1 || single)) {
      kill(x, rng.chance(0.5));
    } else if (kind === 3 && x !== null && now >= x.pausedUntil) {
      stopCleanly(x);
    } else if (kind === 4 && live.length < 3 && !single) {
      spawn();
    } else if (kind === 5 && x !== null) {
      const length = rng.float() * 3 * leaseMs;
      x.dbCutUntil = Math.max(x.dbCutUntil, now + length);
      log?.(`${x.id} cut off from the coordinator for ${length.toFixed(1)} ms`);
    } else if (kind === 6 && x !== null) {
      isolate(x, rng.float() * 3 * leaseMs);
    } else if (kind === 7 && now >= c.pausedUntil) {
      const length = rng.chance(0.5) ? rng.float() * 0.2 * leaseMs : leaseMs * (0.5 + 4 * rng.float());
      c.pausedUntil = now + length;
      stats.pauses++;
      log?.(`${c.id} paused for ${length.toFixed(1)} ms`);
      at(c.pausedUntil, () => wakeClient(c));
    } else if (kind === 8) {
      cutClient(c, rng.float() * 3 * leaseMs);
    } else if (kind === 9 && x !== null && !single) {
      inNode(x, false, () => perform(x, x.machine.tick(local(x))));
    }
    at(now + rng.float() * 2 * chaosMs, chaos);
  };

  let failure: { step: number; message: string } | null = null;
  try {
    if (single) {
      startServer();
    } else {
      spawn();
      spawn();
      if (rng.chance(0.5)) spawn();
    }
    for (let i = 0; i < clientCount; i++) spawnClient();
    at(0, chaos);
    while (step < steps && queue.size > 0) {
      const event = queue.pop()!;
      now = event.at;
      step++;
      event.run();
    }
  } catch (error) {
    if (!(error instanceof Violation)) throw error;
    failure = { step, message: error.message };
    log?.(`FAIL: ${error.message}`);
  } finally {
    if (single) rmSync(dataDir, { recursive: true, force: true });
  }
  return { seed: options.seed, failure, tightest, reclaimCap, coordinated: !single, ...stats, simMs: now };
}

/** Run `count` seeds from `from`; one line per failure and a summary. Returns the number that failed. */
export function runBelieverSeeds(
  from: number,
  count: number,
  print: (line: string) => void,
  options: { readonly selfTest?: BelieverSelfTest; readonly rateSpread?: number; readonly steps?: number } = {},
): number {
  const started = performance.now();
  let lastProgress = started;
  let failed = 0;
  const sum = {
    grants: 0,
    beliefs: 0,
    handoffs: 0,
    lapsed: 0,
    late: 0,
    takeovers: 0,
    delayedTerms: 0,
    stepDowns: 0,
    pauses: 0,
    kills: 0,
    partitions: 0,
    reclaimsSent: 0,
    reclaims: 0,
    reclaimsLost: 0,
    lateReclaims: 0,
    graceClaims: 0,
    proxyCloses: 0,
    sharedBeliefs: 0,
    semaphoreBeliefs: 0,
    publishingStops: 0,
    toldByStop: 0,
    toldByStepDown: 0,
    openReclaims: 0,
    silenceReclaims: 0,
    silenceReclaimed: 0,
    staleReclaims: 0,
    graceFailovers: 0,
  };
  /** Reclaims re-confirmed and lost in coordinated seeds with reclaim on, and how many such seeds ran. */
  const coordinated = { seeds: 0, reclaims: 0, reclaimsLost: 0 };
  let tightest: { seed: number; ms: number; share: number } | null = null;
  const flags = `${options.selfTest === undefined ? "" : ` --break ${options.selfTest}`}${options.rateSpread === undefined ? "" : ` --rates ${options.rateSpread * 100}`}${options.steps === undefined ? "" : ` --steps ${options.steps}`}`;
  for (let seed = from; seed < from + count; seed++) {
    const result = simulateBelievers({ seed, ...options });
    for (const key of Object.keys(sum) as (keyof typeof sum)[]) sum[key] += result[key];
    if (result.coordinated && result.reclaimCap >= 0) {
      coordinated.seeds++;
      coordinated.reclaims += result.reclaims;
      coordinated.reclaimsLost += result.reclaimsLost;
    }
    if (result.tightest !== null && (tightest === null || result.tightest.share < tightest.share)) tightest = { seed, ...result.tightest };
    if (result.failure !== null) {
      failed++;
      print(`FAIL believers seed ${seed} at step ${result.failure.step}: ${result.failure.message}`);
      print(`  replay: npm run sim -- --believers --seed ${seed} --trace${flags}`);
      if (failed >= 20) break;
    }
    const t = performance.now();
    if (t - lastProgress >= 10_000) {
      lastProgress = t;
      print(`progress: ${seed - from + 1}/${count} believer seeds, ${failed} failed, ${((t - started) / 1000).toFixed(0)} s`);
    }
  }
  const seconds = (performance.now() - started) / 1000;
  print(
    `believers sim: seeds ${from}..${from + count - 1}, ${failed} failed in ${seconds.toFixed(1)} s; ` +
      `${sum.beliefs} beliefs of ${sum.grants} grants, ${sum.lapsed} lapsed unseen, ${sum.handoffs} close handoffs across terms, ` +
      `${sum.takeovers} terms begun (${sum.delayedTerms} with a lock-delay), ${sum.stepDowns} step-downs, ${sum.pauses} pauses, ` +
      `${sum.kills} kills, ${sum.partitions} partitions; reclaims: ${sum.reclaims} of ${sum.reclaimsSent} sent re-confirmed a belief, ${sum.reclaimsLost} lost, ` +
      `${sum.lateReclaims} answered past the deadline, ${sum.graceClaims} fresh claims in a grace, ${sum.proxyCloses} proxy closes; ` +
      `${sum.sharedBeliefs} shared beliefs, ${sum.semaphoreBeliefs} in semaphore slots; ` +
      `coordinated with reclaim: ${coordinated.seeds} seeds, ${sum.publishingStops} clean stops of an active that published, holders told to reclaim ${sum.toldByStop} by a clean stop and ${sum.toldByStepDown} by a step-down, ` +
      `${coordinated.reclaims} reclaims re-confirmed a belief (${sum.openReclaims} open, ${sum.silenceReclaimed} on silence of ${sum.silenceReclaims} silences), ${coordinated.reclaimsLost} lost, ` +
      `${sum.staleReclaims} stale reclaims raced them, ${sum.graceFailovers} terms ended inside their grace` +
      (tightest === null ? "" : `; closest handoff ${tightest.ms.toFixed(3)} ms (${(tightest.share * 100).toFixed(3)} % of the old lease) after a belief lapsed, seed ${tightest.seed}`),
  );
  return failed;
}
