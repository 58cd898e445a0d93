/**
 * Tokens across changes of the shard map (docs/protocol.md section 12.3):
 * every token is `generation * 2^48 + counter`, where the counter is the
 * server's own TokenSource (memory, the data directory's floor, or a
 * coordinator's blocks: this wraps whichever is in use). A map change
 * raises the generation, so every token issued after it is above every
 * token issued before it, on every shard, wherever a name moved. With
 * generation 0 the tokens are the counter's, exactly as without shards.
 *
 * Tokens stay below 2^53 (generation <= 31, counter < 2^48), so they are
 * exact as JavaScript numbers. A counter that reaches 2^48 (281 trillion
 * grants) would run into the next generation: `exhausted` says so before
 * the engine asks (it then refuses every claim with TOKENS_EXHAUSTED), and
 * `next` throws rather than issue a token that may not be above the one
 * before.
 */
import type { TokenSource } from "../core/tokens.ts";
import { MAX_GENERATION } from "./map.ts";

/** 2^48: one generation's share of the token space. */
export const GENERATION_UNIT = 2 ** 48;

export class GenerationTokens implements TokenSource {
  private readonly base: number;
  private told = false;

  constructor(
    readonly counter: TokenSource,
    readonly generation: number,
    /** Called once, the first time the counter is found at its end (the server logs it and turns unready). */
    private readonly onExhausted: () => void = () => {},
  ) {
    if (!Number.isInteger(generation) || generation < 0 || generation > MAX_GENERATION) {
      throw new RangeError(`generation ${generation} is not in 0..${MAX_GENERATION}`);
    }
    this.base = generation * GENERATION_UNIT;
  }

  next(): number {
    const n = this.counter.next();
    if (n >= GENERATION_UNIT) throw new RangeError(`the token counter reached 2^48 (${n}): tokens would run into the next generation`);
    return this.base + n;
  }

  get last(): number {
    return this.base + this.counter.last;
  }

  /** The counter is at 2^48 - 1: the next token would be in the next generation's range. */
  get exhausted(): boolean {
    if (this.counter.last < GENERATION_UNIT - 1) return false;
    if (!this.told) {
      this.told = true;
      this.onExhausted();
    }
    return true;
  }
}

/** `counter` itself for generation 0 (today's tokens, untouched), else wrapped. */
export function tokensInGeneration(counter: TokenSource, generation: number, onExhausted?: () => void): TokenSource {
  return generation === 0 ? counter : new GenerationTokens(counter, generation, onExhausted);
}
