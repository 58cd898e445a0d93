/**
 * bench/clients.ts (`npm run bench:clients`): the Go and Python clients' claim
 * and handover latency against the TypeScript client's, in one run, against
 * one real `lockd serve` child on 127.0.0.1.
 *
 * Each client is driven through its conformance driver (test/conformance:
 * JSON lines on stdin/stdout), which stamps its events with its own monotonic
 * clock (`startedAt`, `at`): performance.now() in Bun, time.Now() (monotonic)
 * in Go, time.monotonic() in Python. The pipes are therefore outside every
 * measured interval.
 *
 * - claim: `startedAt` just before the library's acquire call, `at` just after
 *   it returned the lock: connect + ACQUIRE + ACQUIRED reply, uncontended, plus
 *   the library's own work around it (a Python thread wakeup, a goroutine
 *   switch, a promise resolution). The lock is then released.
 * - handover: two claims of the same client on one name; the holder is
 *   released (`startedAt` of its release, taken just before the call) and the
 *   waiter's acquire returns (`at`): close -> server promotes -> push -> the
 *   waiter's reader -> the caller sees the grant. Both stamps come from the
 *   same driver process, so the same clock.
 *
 * Rounds are interleaved (ts, go, python, ts, go, ...) so that drift and other
 * load hit every client alike; ratios are against the TS client of the same
 * run. Nothing here is asserted: it is a measurement.
 *
 * Usage: bun bench/clients.ts [--rounds N] [--warmup N]
 */
import { loadavg } from "node:os";
import { ChildServer } from "../test/fixtures/ops-child.ts";
import { CLIENTS, Driver, type DriverEvent } from "../test/conformance/clients.ts";

export interface BenchArgs {
  rounds: number;
  warmup: number;
}

export function parseArgs(argv: readonly string[]): BenchArgs {
  const args: BenchArgs = { rounds: 200, warmup: 20 };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    if (flag !== "--rounds" && flag !== "--warmup") throw new Error(`unknown option ${flag} (use --rounds N, --warmup N)`);
    const n = Number(argv[++i]);
    if (!Number.isInteger(n) || n < 0 || (flag === "--rounds" && n < 1)) throw new Error(`${flag} needs a whole number${flag === "--rounds" ? " >= 1" : ""}, got ${argv[i]}`);
    if (flag === "--rounds") args.rounds = n;
    else args.warmup = n;
  }
  return args;
}

function pct(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

let seq = 0;
async function event(driver: Driver, id: string, kind: string): Promise<DriverEvent> {
  const e = await driver.until((x) => x.id === id && (x.event === kind || x.event === "error"), `${kind} of ${id}`);
  if (e.event === "error") throw new Error(`${id}: ${JSON.stringify(e)}`);
  return e;
}

async function claimOnce(driver: Driver, servers: string, name: string): Promise<number> {
  const id = `c${seq++}`;
  driver.send({ cmd: "acquire", id, servers, name, lease: 5000 });
  const got = await event(driver, id, "acquired");
  driver.send({ cmd: "release", id });
  await event(driver, id, "released");
  return (got.at as number) - (got.startedAt as number);
}

async function handoverOnce(driver: Driver, servers: string, name: string, waitingSeen: () => Promise<void>): Promise<number> {
  const h = `h${seq++}`;
  const w = `w${seq++}`;
  driver.send({ cmd: "acquire", id: h, servers, name, lease: 5000 });
  await event(driver, h, "acquired");
  driver.send({ cmd: "acquire", id: w, servers, name, lease: 5000 });
  await waitingSeen();
  driver.send({ cmd: "release", id: h });
  const released = await event(driver, h, "released");
  const got = await event(driver, w, "acquired");
  driver.send({ cmd: "release", id: w });
  await event(driver, w, "released");
  return (got.at as number) - (released.startedAt as number);
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const kinds = CLIENTS.filter((k) => {
    if (k.skip) console.warn(`bench:clients: SKIPPING the ${k.name} client: ${k.skip}`);
    return !k.skip;
  });
  const server = ChildServer.spawn(["serve", "--listen", "127.0.0.1:0", "--ops", "127.0.0.1:0", "--shutdown-grace", "0s"], {});
  const drivers: Driver[] = [];
  try {
    const { listenPort, opsPort } = await server.addresses();
    const servers = `127.0.0.1:${listenPort}`;
    for (const k of kinds) {
      await k.setup();
      drivers.push(await Driver.start(k));
    }
    // The waiter is queued once the server lists it: poll the ops API (bounded), so the release
    // never races the waiter's ACQUIRE.
    const queued = (name: string) => async () => {
      for (let i = 0; i < 2000; i++) {
        const view = (await (await fetch(`http://127.0.0.1:${opsPort}/v1/locks?name=${encodeURIComponent(name)}`)).json()) as any;
        const entry = (view.locks ?? [view]).find((l: any) => l.name === name);
        if ((entry?.waiters?.length ?? 0) > 0) return;
        await Bun.sleep(1);
      }
      throw new Error(`the waiter on ${name} never queued`);
    };
    const claim = kinds.map(() => [] as number[]);
    const handover = kinds.map(() => [] as number[]);
    const load0 = loadavg();
    const t0 = performance.now();
    for (let r = 0; r < args.warmup + args.rounds; r++) {
      for (let i = 0; i < kinds.length; i++) {
        const name = `bench/${kinds[i]!.name}/${r}`;
        const c = await claimOnce(drivers[i]!, servers, name);
        const h = await handoverOnce(drivers[i]!, servers, name, queued(name));
        if (r >= args.warmup) {
          claim[i]!.push(c);
          handover[i]!.push(h);
        }
      }
    }
    const wallS = (performance.now() - t0) / 1000;
    const load1 = loadavg();
    const fmt = (n: number) => n.toFixed(2);
    const stats = (xs: number[]) => {
      const s = [...xs].sort((a, b) => a - b);
      return { p50: pct(s, 50), p99: pct(s, 99) };
    };
    const base = { claim: stats(claim[0]!), handover: stats(handover[0]!) };
    console.log(`clients bench: ${args.rounds} rounds (+${args.warmup} warm-up) per client, interleaved, ${wallS.toFixed(1)} s`);
    console.log(`load average (1, 5, 15 min) before: ${load0.map(fmt).join(", ")}; after: ${load1.map(fmt).join(", ")}; ${navigator.hardwareConcurrency} cores`);
    console.log("");
    console.log("| client | claim p50 ms | claim p99 ms | claim p50 / TS | claim p99 / TS | handover p50 ms | handover p99 ms | handover p50 / TS | handover p99 / TS |");
    console.log("|---|---|---|---|---|---|---|---|---|");
    for (let i = 0; i < kinds.length; i++) {
      const c = stats(claim[i]!);
      const h = stats(handover[i]!);
      console.log(
        `| ${kinds[i]!.name} | ${fmt(c.p50)} | ${fmt(c.p99)} | ${fmt(c.p50 / base.claim.p50)} | ${fmt(c.p99 / base.claim.p99)} | ${fmt(h.p50)} | ${fmt(h.p99)} | ${fmt(h.p50 / base.handover.p50)} | ${fmt(h.p99 / base.handover.p99)} |`,
      );
    }
  } finally {
    for (const d of drivers) await d.stop();
    await server[Symbol.asyncDispose]();
  }
}

if (import.meta.main) await main();
