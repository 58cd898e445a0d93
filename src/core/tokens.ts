/**
 * Fencing tokens: one counter for the whole server, every grant strictly
 * larger than every grant before it, for any lock. Tokens are numbers: exact
 * to 2^53, which a counter reaches after 285 years at a million grants a
 * second. A durable source (tokens that also survive restarts) implements
 * the same interface.
 */
export interface TokenSource {
  /** The next token; strictly greater than every token returned before. */
  next(): number;
  /** The last token issued, 0 if none. */
  readonly last: number;
  /**
   * True once no further token can be issued (a counter at the end of its
   * range): the engine then grants nothing, and says why. Omitted: never.
   */
  readonly exhausted?: boolean;
}

/** Tokens from memory, starting after `floor`. */
export class MemoryTokens implements TokenSource {
  last: number;

  constructor(floor = 0) {
    this.last = floor;
  }

  next(): number {
    return ++this.last;
  }
}
