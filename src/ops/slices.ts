/**
 * The ops server's walks over the lock table, a slice per turn of the event
 * loop. Every walk whose length grows with the number of locks (choosing a
 * page of /v1/locks, filling a /ui snapshot, picking a view of a snapshot)
 * goes through one SliceQueue: each turn, one walk takes at most `slice`
 * steps, walks in turn. So a turn does one slice of work however many walks
 * or callers there are, and lock traffic runs between slices. A walk whose
 * caller has gone (`gone`) is dropped without a step when its turn comes.
 */

interface Walk {
  readonly items: Iterator<unknown>;
  readonly each: (item: unknown) => void;
  readonly done: () => void;
  readonly failed: (error: unknown) => void;
  /** True once nobody waits for the walk's result (its client has gone): it is skipped, resolved at once. */
  readonly gone: (() => boolean) | undefined;
}

export class SliceQueue {
  /** Walks waiting for their next slice, in turn order. */
  private readonly walks: Walk[] = [];
  private turn: ReturnType<typeof setImmediate> | null = null;

  /** Walks skipped because their caller had gone, and walks run to their end (tests, metrics). */
  skipped = 0;
  finished = 0;

  constructor(readonly slice: number) {}

  /** Walks waiting for their next slice. */
  get queued(): number {
    return this.walks.length;
  }

  /**
   * Call `each` on every item of `items`, `slice` items per turn, starting
   * on a later turn (never in the caller's). Resolves in the turn of the
   * last slice, so the caller's continuation runs before other I/O; rejects
   * if `each` throws. A live iterator (a Map's) skips entries removed
   * before it reaches them and reaches entries added later: an entry that
   * stays from start to end is seen once. `gone`, asked before each
   * slice: true once the walk's caller has gone; the walk then ends
   * (resolves) without another step, and the caller checks again.
   */
  walk<T>(items: Iterator<T>, each: (item: T) => void, gone?: () => boolean): Promise<void> {
    return new Promise<void>((done, failed) => {
      this.walks.push({ items, each: each as (item: unknown) => void, done, failed, gone });
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
    let walk = this.walks.shift();
    // Walks whose caller has gone are dropped without a step: they cost no slice.
    while (walk !== undefined && walk.gone !== undefined && walk.gone()) {
      this.skipped++;
      walk.done();
      walk = this.walks.shift();
    }
    if (walk === undefined) return;
    try {
      let n = this.slice;
      for (; n > 0; n--) {
        const step = walk.items.next();
        if (step.done === true) break;
        walk.each(step.value);
      }
      if (n > 0) {
        this.finished++;
        walk.done();
      } else this.walks.push(walk);
    } catch (error) {
      walk.failed(error);
    }
    if (this.walks.length > 0) this.turn = setImmediate(this.step);
  };
}
