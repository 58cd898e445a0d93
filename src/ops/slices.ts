/**
 * The ops server's walks over the lock table, a slice per turn of the event
 * loop. Every walk whose length grows with the number of locks (choosing a
 * page of /v1/locks, filling a /ui snapshot, picking a view of a snapshot)
 * goes through one SliceQueue: each turn, one walk takes at most `slice`
 * steps, walks in turn. So a turn does one slice of work however many walks
 * or callers there are, and lock traffic runs between slices.
 */

interface Walk {
  readonly items: Iterator<unknown>;
  readonly each: (item: unknown) => void;
  readonly done: () => void;
  readonly failed: (error: unknown) => void;
}

export class SliceQueue {
  /** Walks waiting for their next slice, in turn order. */
  private readonly walks: Walk[] = [];
  private turn: ReturnType<typeof setImmediate> | null = null;

  constructor(readonly slice: number) {}

  /**
   * Call `each` on every item of `items`, `slice` items per turn, starting
   * on a later turn (never in the caller's). Resolves in the turn of the
   * last slice, so the caller's continuation runs before other I/O; rejects
   * if `each` throws. A live iterator (a Map's) skips entries removed
   * before it reaches them and reaches entries added later: an entry that
   * stays from start to end is seen once.
   */
  walk<T>(items: Iterator<T>, each: (item: T) => void): Promise<void> {
    return new Promise<void>((done, failed) => {
      this.walks.push({ items, each: each as (item: unknown) => void, done, failed });
      this.turn ??= setImmediate(this.step);
    });
  }

  /** Drop every walk (their promises never settle: for shutdown). */
  stop(): void {
    if (this.turn !== null) clearImmediate(this.turn);
    this.turn = null;
    this.walks.length = 0;
  }

  private readonly step = (): void => {
    this.turn = null;
    const walk = this.walks.shift();
    if (walk === undefined) return;
    try {
      let n = this.slice;
      for (; n > 0; n--) {
        const step = walk.items.next();
        if (step.done === true) break;
        walk.each(step.value);
      }
      if (n > 0) walk.done();
      else this.walks.push(walk);
    } catch (error) {
      walk.failed(error);
    }
    if (this.walks.length > 0) this.turn = setImmediate(this.step);
  };
}
