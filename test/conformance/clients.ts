/**
 * The clients under test and their drivers (README.md: the line protocol),
 * shared by the conformance test files. A client whose toolchain is missing
 * has `skip` set to the reason.
 */
import type { Subprocess } from "bun";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Wakeup } from "../helpers/events.ts";
import { forEachLine } from "../helpers/lines.ts";

const ROOT = join(import.meta.dir, "../..");
export const WAIT_MS = 10_000;

export interface ClientKind {
  readonly name: string;
  /** null when runnable, else why not. */
  skip: string | null;
  command(): string[];
  cwd: string;
  /** Build what the driver needs (once per process). */
  setup(): Promise<void>;
}

const goBin = Bun.which("go");
const python = Bun.which("python3");
let goBuildDir: string | null = null;
let goBuild: Promise<void> | null = null;

/** Build the Go driver into a temp directory, once per process (removed at exit). */
function buildGoDriver(): Promise<void> {
  goBuild ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), "lockd-conformance-go-"));
    goBuildDir = dir;
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    const race = process.env.LOCKD_GO_RACE ? ["-race"] : [];
    const build = Bun.spawn([goBin!, "build", ...race, "-o", join(dir, "lockd-conformance"), "./cmd/lockd-conformance"], {
      cwd: join(ROOT, "clients/go"),
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, GOFLAGS: "-mod=mod", GOPROXY: "off" },
    });
    const [err, code] = await Promise.all([new Response(build.stderr).text(), build.exited]);
    if (code !== 0) throw new Error(`go build of the conformance driver failed:\n${err}`);
  })();
  return goBuild;
}

export const CLIENTS: ClientKind[] = [
  { name: "ts", skip: null, command: () => [process.execPath, join(import.meta.dir, "ts-driver.ts")], cwd: ROOT, setup: async () => {} },
  {
    name: "go",
    skip: goBin ? null : "`go` is not on PATH (install Debian's golang-go; .ci/run does)",
    command: () => [join(goBuildDir!, "lockd-conformance")],
    cwd: join(ROOT, "clients/go"),
    setup: buildGoDriver,
  },
  {
    name: "python",
    skip: python ? null : "`python3` is not on PATH",
    command: () => [python ?? "python3", "-m", "lockd.conformance_driver"],
    cwd: join(ROOT, "clients/python"),
    setup: async () => {},
  },
];

let warned = false;
export function warnSkips(): void {
  if (warned) return;
  warned = true;
  for (const c of CLIENTS) if (c.skip) console.warn(`conformance: SKIPPING the ${c.name} client: ${c.skip}`);
}

export interface DriverEvent {
  readonly id?: string;
  readonly event: string;
  readonly [key: string]: unknown;
  seq: number;
  /** performance.now() when the runner read it: only compared with other arrivals, never with a duration. */
  arrived: number;
}

export class Driver {
  readonly events: DriverEvent[] = [];
  readonly stderr: string[] = [];
  private readonly wakeup = new Wakeup();
  private readonly stderrRead: Promise<void>;
  private seq = 0;
  private constructor(readonly proc: Subprocess<"pipe", "pipe", "pipe">) {
    void forEachLine(proc.stdout, (line) => {
      if (line.trim() === "") return;
      this.events.push({ ...JSON.parse(line), seq: this.seq++, arrived: performance.now() });
      this.wakeup.wake();
    });
    this.stderrRead = forEachLine(proc.stderr, (line) => this.stderr.push(line));
    void proc.exited.then(() => this.wakeup.wake());
  }

  static async start(kind: ClientKind): Promise<Driver> {
    const proc = Bun.spawn(kind.command(), { cwd: kind.cwd, stdin: "pipe", stdout: "pipe", stderr: "pipe", env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" } });
    const driver = new Driver(proc);
    await driver.until((e) => e.event === "ready", "the ready line");
    return driver;
  }

  send(cmd: Record<string, unknown>): void {
    this.proc.stdin.write(JSON.stringify(cmd) + "\n");
    this.proc.stdin.flush();
  }

  find(match: (e: DriverEvent) => boolean): DriverEvent | undefined {
    return this.events.find(match);
  }

  until(match: (e: DriverEvent) => boolean, what: string, ms = WAIT_MS): Promise<DriverEvent> {
    return this.wakeup.until(() => this.find(match), ms, () => `driver event: ${what}; events so far ${JSON.stringify(this.events)}; stderr ${this.stderr.join("\n")}`);
  }

  async stop(): Promise<void> {
    try {
      this.proc.stdin.end();
    } catch {}
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 5000);
    await this.proc.exited;
    await this.stderrRead;
    clearTimeout(timer);
  }
}

