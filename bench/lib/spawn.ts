/**
 * The parent side: start a bench process (bun <script>) with IPC, wait for
 * its `ready`, send requests and await their answers. Every child is killed
 * by `stop()`; `stopAll()` in a finally block kills whatever is left.
 */
import type { Subprocess } from "bun";
import type { ProcStats } from "./child.ts";

const BUN = process.execPath;
const live = new Set<Child>();

export class Child {
  private nextId = 1;
  private readonly waiting = new Map<number, (message: Record<string, unknown>) => void>();
  private readyInfo: Promise<Record<string, unknown>>;
  private proc: Subprocess;
  readonly name: string;

  constructor(script: string, args: readonly string[], name = script) {
    this.name = name;
    let onReady: (info: Record<string, unknown>) => void = () => {};
    let onFail: (error: Error) => void = () => {};
    this.readyInfo = new Promise((resolve, reject) => {
      onReady = resolve;
      onFail = reject;
    });
    this.proc = Bun.spawn([BUN, script, ...args], {
      stdio: ["ignore", "inherit", "inherit"],
      ipc: (raw) => {
        const message = raw as Record<string, unknown> & { type: string; id: number };
        if (message.type === "ready") return onReady(message);
        const resolve = this.waiting.get(message.id);
        if (resolve !== undefined) {
          this.waiting.delete(message.id);
          resolve(message);
        }
      },
      onExit: (_proc, code, signal) => {
        live.delete(this);
        onFail(new Error(`${name} exited (${code ?? signal}) before it was ready`));
        for (const resolve of this.waiting.values()) resolve({ type: "error", message: `${name} exited` });
        this.waiting.clear();
      },
    });
    live.add(this);
  }

  get pid(): number {
    return this.proc.pid;
  }

  /** Resolves with the child's ready message (the port it listens on, ...). */
  ready(): Promise<Record<string, unknown>> {
    return this.readyInfo;
  }

  request<T = Record<string, unknown>>(type: string, fields: Record<string, unknown> = {}): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve) => {
      this.waiting.set(id, resolve as (message: Record<string, unknown>) => void);
      this.proc.send({ ...fields, type, id });
    });
  }

  stats(gc = false): Promise<ProcStats> {
    return this.request<ProcStats>("stats", { gc });
  }

  async stop(): Promise<void> {
    if (!live.has(this)) return;
    live.delete(this);
    this.proc.kill("SIGKILL");
    await this.proc.exited;
  }
}

/** Kill every child still running. */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((child) => child.stop()));
}

/** CPU share of `cpuUs` over `wallMs` as a percentage of one core. */
export function coreShare(cpuUs: number, wallMs: number): string {
  return `${((cpuUs / 1000 / wallMs) * 100).toFixed(0)}%`;
}
