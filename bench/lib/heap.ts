/**
 * A binary min-heap of deadlines with O(log n) removal by index: the usual
 * alternative to a timer wheel, kept here only as the baseline the wheel's
 * micro benchmarks are divided by.
 */
export interface HeapEntry {
  at: number;
  heapIndex: number;
}

export class DeadlineHeap<E extends HeapEntry> {
  private readonly items: E[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): E | undefined {
    return this.items[0];
  }

  push(entry: E): void {
    entry.heapIndex = this.items.length;
    this.items.push(entry);
    this.up(entry.heapIndex);
  }

  pop(): E | undefined {
    const top = this.items[0];
    if (top !== undefined) this.remove(top);
    return top;
  }

  remove(entry: E): void {
    const i = entry.heapIndex;
    const last = this.items.pop()!;
    entry.heapIndex = -1;
    if (last === entry) return;
    this.items[i] = last;
    last.heapIndex = i;
    this.down(i);
    this.up(last.heapIndex);
  }

  private up(i: number): void {
    const items = this.items;
    const entry = items[i]!;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent]!;
      if (p.at <= entry.at) break;
      items[i] = p;
      p.heapIndex = i;
      i = parent;
    }
    items[i] = entry;
    entry.heapIndex = i;
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const entry = items[i]!;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && items[child + 1]!.at < items[child]!.at) child++;
      const c = items[child]!;
      if (c.at >= entry.at) break;
      items[i] = c;
      c.heapIndex = i;
      i = child;
    }
    items[i] = entry;
    entry.heapIndex = i;
  }
}
