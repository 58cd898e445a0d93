/**
 * A child process whose stdout is JSON lines (one event each), collected as
 * they arrive: tests await a line, never sleep. Disposing kills it (SIGKILL
 * also ends a stopped process) and waits for the exit.
 */
import type { Subprocess } from "bun";

export type Event = Record<string, any> & { readonly at: number };

export class JsonChild implements AsyncDisposable {
  /** Each line with `at`: performance.now() in this process when it arrived. */
  readonly events: Event[] = [];
  readonly exited: Promise<number>;
  exitCode: number | null = null;
  private waiters: (() => void)[] = [];
  private stderr = "";

  private constructor(readonly proc: Subprocess<"ignore", "pipe", "pipe">) {
    void this.read(proc.stdout);
    void new Response(proc.stderr).text().then((text) => (this.stderr = text));
    this.exited = proc.exited.then((code) => {
      this.exitCode = code;
      this.wake();
      return code;
    });
  }

  static spawn(cmd: readonly string[]): JsonChild {
    return new JsonChild(Bun.spawn([...cmd], { stdin: "ignore", stdout: "pipe", stderr: "pipe" }));
  }

  get pid(): number {
    return this.proc.pid;
  }

  private async read(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of stream) {
      pending += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        try {
          this.events.push({ ...JSON.parse(line), at: performance.now() });
        } catch {
          this.events.push({ ev: "raw", line, at: performance.now() });
        }
      }
      this.wake();
    }
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** The first event named `ev`, waiting for it; rejects after `ms` or if the process exits first. */
  async event(ev: string, ms = 10_000): Promise<Event> {
    const deadline = performance.now() + ms;
    for (;;) {
      const found = this.events.find((e) => e.ev === ev);
      if (found !== undefined) return found;
      const left = deadline - performance.now();
      if (left <= 0 || this.exitCode !== null) {
        throw new Error(`no ${JSON.stringify(ev)} event within ${ms} ms (exit ${this.exitCode}); events ${JSON.stringify(this.events)}; stderr ${this.stderr}`);
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    if (this.exitCode === null) this.proc.kill("SIGKILL");
    await this.exited;
  }
}

export const OWNER = `${import.meta.dir}/fixtures/owner.ts`;

/** The owner fixture: acquires `name` at `server` and reports its events. */
export function spawnOwner(server: string, name: string, leaseMs: number, fenceUrl?: string, prefix: readonly string[] = []): JsonChild {
  return JsonChild.spawn([...prefix, process.execPath, OWNER, server, name, String(leaseMs), ...(fenceUrl === undefined ? [] : [fenceUrl])]);
}

/** For state that has no event of its own (engine internals): re-check on a short timer, bounded. */
export async function waitFor(check: () => boolean, ms = 10_000, what = "condition"): Promise<void> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`${what} not met within ${ms} ms`);
    await Bun.sleep(5);
  }
}
