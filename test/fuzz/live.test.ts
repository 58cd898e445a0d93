/**
 * Fuzz streams over real sockets into an in-process server (see live-fuzz.ts):
 * right ERROR codes or answers, nothing thrown, the control session keeps
 * its lock, crowds on one lock hand over in FIFO order by push, and
 * connections, sessions and locks all return to zero.
 */
import { expect, test } from "bun:test";
import { startServer } from "../helpers/wire.ts";
import { Rng } from "../sim/prng.ts";
import { liveFuzz, watchThrows } from "./live-fuzz.ts";

const CASES = 1000;

test(`${CASES} fuzz connections against a live server`, async () => {
  // A long io-timeout: a slow moment on a busy machine must not end a case early.
  await using server = startServer({ ioTimeoutMs: 30_000 });
  const thrown = watchThrows(server);
  const uncaught: unknown[] = [];
  const onUncaught = (error: unknown): void => {
    uncaught.push(error);
  };
  process.on("uncaughtException", onUncaught);
  try {
    const result = await liveFuzz(server, new Rng(7), CASES, thrown);
    expect(result.cases).toBe(CASES);
    // The mix must really end sessions with errors and also keep some alive.
    expect(result.ended).toBeGreaterThan(CASES / 4);
    expect(result.ended).toBeLessThan(CASES);
    expect(result.crowds).toBe(CASES / 50);
  } finally {
    process.off("uncaughtException", onUncaught);
  }
  expect(thrown).toEqual([]);
  expect(uncaught).toEqual([]);
}, 60_000);
