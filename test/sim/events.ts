/**
 * The simulations' event queue: a binary min-heap of events by (time, seq),
 * so that events due at the same moment run in the order they were queued
 * and a seed replays exactly.
 */
export interface SimEventEntry {
  readonly at: number;
  readonly seq: number;
  readonly run: () => void;
}

export class EventQueue {
  private readonly heap: SimEventEntry[] = [];
  get size(): number {
    return this.heap.length;
  }
  push(e: SimEventEntry): void {
    const h = this.heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(h[i]!, h[p]!)) break;
      [h[i], h[p]] = [h[p]!, h[i]!];
      i = p;
    }
  }
  pop(): SimEventEntry | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last !== undefined) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && less(h[l]!, h[m]!)) m = l;
        if (r < h.length && less(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}

function less(a: SimEventEntry, b: SimEventEntry): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}
