/**
 * Waiting for something a test can observe, without sleeping: whoever sees
 * an event (a socket chunk, a log line, an exit) calls `wake()`, and
 * `until(check)` re-checks its condition on each wake, bounded by `ms`.
 */
export class Wakeup {
  private waiters: (() => void)[] = [];

  wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Resolve with `check()`'s first truthy value; throw `describe()` after `ms`. */
  async until<T>(check: () => T | undefined | false | null, ms: number, describe: () => string): Promise<T> {
    const deadline = performance.now() + ms;
    for (;;) {
      const value = check();
      if (value !== undefined && value !== false && value !== null) return value;
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`timed out after ${ms} ms waiting for ${describe()}`);
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
  }
}
