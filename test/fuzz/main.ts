/**
 * The fuzzer's command line (`npm run fuzz -- ...`).
 *
 *   npm run fuzz -- --cases 1000000           reader and engine cases in process (the long mode)
 *   npm run fuzz -- --cases 100000 --live 20000 --seed 9
 *   --seed N    first seed (default 1); a failure prints the seed that replays it
 *   --live N    then N connections against an in-process server over loopback
 *
 * Each case draws from its own seed (seed + case number), so a failing case
 * replays alone with --seed <its seed> --cases 1. Exits 1 on the first failure.
 */
import { Rng } from "../sim/prng.ts";
import { startServer } from "../helpers/wire.ts";
import { EngineFuzz } from "./engine-fuzz.ts";
import { liveFuzz, watchThrows } from "./live-fuzz.ts";
import { readerCase } from "./reader-fuzz.ts";

function arg(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`--${name} must be a non-negative integer`);
  return value;
}

async function main(): Promise<number> {
  const cases = arg("cases", 100_000);
  const seed = arg("seed", 1);
  const live = arg("live", 0);
  const started = performance.now();
  let last = started;
  const engine = new EngineFuzz();
  for (let i = 0; i < cases; i++) {
    const caseSeed = seed + i;
    try {
      readerCase(new Rng(caseSeed));
      engine.randomCase(new Rng(caseSeed ^ 0x5bd1e995));
    } catch (error) {
      console.log(`FAIL case seed ${caseSeed}: ${error instanceof Error ? error.message : String(error)}`);
      console.log(`  replay: npm run fuzz -- --seed ${caseSeed} --cases 1`);
      return 1;
    }
    const now = performance.now();
    if (now - last >= 5000) {
      last = now;
      console.log(`progress: ${i + 1}/${cases} cases, ${((now - started) / 1000).toFixed(0)} s`);
    }
  }
  const ends = engine.engine.stats.ends;
  const endList = [0, 0x13, 0x20, 0x21, 0x22].map((c) => `${c === 0 ? "peer" : `0x${c.toString(16)}`}:${ends[c]}`);
  console.log(`fuzz: ${cases} reader cases and ${engine.cases} engine connections ok in ${((performance.now() - started) / 1000).toFixed(1)} s; engine session ends ${endList.join(" ")}`);
  if (live > 0) {
    const liveStarted = performance.now();
    await using server = startServer({ ioTimeoutMs: 30_000 });
    const thrown = watchThrows(server);
    try {
      const result = await liveFuzz(server, new Rng(seed), live, thrown);
      console.log(`fuzz live: ${result.cases} connections ok in ${((performance.now() - liveStarted) / 1000).toFixed(1)} s (${result.ended} ended by the server, ${result.expired} by their lease; ${result.crowds} crowd rounds)`);
    } catch (error) {
      console.log(`FAIL live phase (seed ${seed}): ${error instanceof Error ? error.message : String(error)}`);
      return 1;
    }
  }
  return 0;
}

process.exit(await main());
