/**
 * A child process whose stdout is JSON lines (one event each), collected as
 * they arrive: tests await a line, never sleep. Disposing kills it (SIGKILL
 * also ends a stopped process) and waits for the exit.
 */
import type { Subprocess } from "bun";
import { Wakeup } from "../helpers/events.ts";
import { forEachLine } from "../helpers/lines.ts";

export type Event = Record<string, any> & { readonly at: number };

export class JsonChild implements AsyncDisposable {
  /** Each line with `at`: performance.now() in this process when it arrived. */
  readonly events: Event[] = [];
  readonly exited: Promise<number>;
  exitCode: number | null = null;
  private readonly wakeup = new Wakeup();
  /** stdout read to its end: an event not seen by now never comes. */
  private drained = false;
  private stderr = "";

  private constructor(readonly proc: Subprocess<"ignore", "pipe", "pipe">) {
    void forEachLine(
      proc.stdout,
      (line) => {
        try {
          this.events.push({ ...JSON.parse(line), at: performance.now() });
        } catch {
          this.events.push({ ev: "raw", line, at: performance.now() });
        }
      },
      () => this.wakeup.wake(),
    ).then(() => {
      this.drained = true;
      this.wakeup.wake();
    });
    void new Response(proc.stderr).text().then((text) => (this.stderr = text));
    this.exited = proc.exited.then((code) => {
      this.exitCode = code;
      this.wakeup.wake();
      return code;
    });
  }

  static spawn(cmd: readonly string[]): JsonChild {
    return new JsonChild(Bun.spawn([...cmd], { stdin: "ignore", stdout: "pipe", stderr: "pipe" }));
  }

  get pid(): number {
    return this.proc.pid;
  }

  /** The first event named `ev`, waiting for it; rejects after `ms` or once the process has exited without it. */
  event(ev: string, ms = 10_000): Promise<Event> {
    const describe = () => `${JSON.stringify(ev)} event (exit ${this.exitCode}); events ${JSON.stringify(this.events)}; stderr ${this.stderr}`;
    return this.wakeup.until(
      () => {
        const found = this.events.find((e) => e.ev === ev);
        if (found === undefined && this.exitCode !== null && this.drained) throw new Error(`exited without the ${describe()}`);
        return found;
      },
      ms,
      describe,
    );
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
