/**
 * A throwaway PostgreSQL cluster for tests: initdb into a temporary
 * directory, a free port on 127.0.0.1, password authentication (user
 * `lockd`, password `secret`), fsync off (nothing here survives the machine;
 * commits stay synchronous, so an immediate stop loses no committed row, as
 * a coordinator must not). Started once per test file;
 * `stop()` / `start()` take it down and bring it back (the coordinator
 * becomes unreachable); disposing stops it and removes the directory.
 *
 * initdb refuses to run as root: as root, every PostgreSQL program runs as
 * the `postgres` user through runuser, in a directory that user owns.
 * PostgreSQL's programs are looked up on PATH, then in /usr/lib/postgresql/<version>/bin.
 */
import { afterAll, beforeAll } from "bun:test";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const PG_USER = "lockd";
export const PG_PASSWORD = "secret";

function binDir(): string | null {
  const onPath = Bun.which("initdb");
  if (onPath !== null) return null;
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) throw new Error("PostgreSQL is not installed: no initdb on PATH and no /usr/lib/postgresql (apt-get install -y postgresql)");
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, "bin", "initdb"))).sort((a, b) => Number(b) - Number(a));
  if (versions.length === 0) throw new Error("no initdb under /usr/lib/postgresql/*/bin");
  return join(root, versions[0]!, "bin");
}

/** A port nothing listens on now (for a listener started later: bound by the kernel's choice, then closed). */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/**
 * `count` distinct free ports: all held open at once, so none is handed out
 * twice. They are picked below the kernel's ephemeral range when it is
 * known (Linux): a port from that range (what port 0 gives) can be taken by
 * any process's outgoing connection between the pick and the listen, and a
 * coordinated instance that cannot listen gives its term up for a lease.
 */
export async function freePorts(count: number): Promise<number[]> {
  const low = ephemeralLow();
  const servers: ReturnType<typeof createServer>[] = [];
  try {
    for (let attempt = 0; servers.length < count; attempt++) {
      if (attempt >= 200) throw new Error(`no ${count} free ports below ${low} after 200 attempts`);
      // Below the ephemeral range: [max(1024, low - 16384), low). Without a known range: port 0.
      const port = low === null ? 0 : Math.max(1024, low - 16384) + Math.floor(Math.random() * Math.min(16384, low - 1024));
      const server = await new Promise<ReturnType<typeof createServer> | null>((resolve) => {
        const s = createServer();
        s.once("error", () => resolve(null));
        s.listen(port, "127.0.0.1", () => resolve(s));
      });
      if (server !== null) servers.push(server);
    }
    return servers.map((server) => (server.address() as { port: number }).port);
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }
}

/** The first port of the kernel's ephemeral range (Linux), or null when unknown or too low to pick below. */
function ephemeralLow(): number | null {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 2048 ? low : null;
  } catch {
    return null;
  }
}

export class Postgres implements AsyncDisposable {
  private running = false;

  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly bin: string | null,
    private readonly asRoot: boolean,
  ) {}

  /** The connection URL (with `password` instead of the right one, for the wrong-password test). */
  url(password = PG_PASSWORD, database = "postgres"): string {
    return `postgres://${PG_USER}:${password}@127.0.0.1:${this.port}/${database}`;
  }

  /** If this process exits without disposing (a crashed test run), still stop the server and remove the directory. */
  private readonly onExit = (): void => {
    try {
      const pid = Number(readFileSync(join(this.dir, "data", "postmaster.pid"), "utf8").split("\n")[0]);
      if (pid > 0) {
        process.kill(pid, "SIGQUIT");
        // Wait (bounded, synchronously: this is an exit handler) for it to go before removing its files.
        for (let i = 0; i < 200; i++) {
          process.kill(pid, 0);
          Bun.sleepSync(10);
        }
      }
    } catch {
      // not running
    }
    rmSync(this.dir, { recursive: true, force: true });
  };

  static async start(timeoutMs = 60_000): Promise<Postgres> {
    const bin = binDir();
    const asRoot = process.getuid?.() === 0;
    const dir = mkdtempSync(join(tmpdir(), "lockd-pg-"));
    const pg = new Postgres(dir, await freePort(), bin, asRoot);
    try {
      if (asRoot) {
        const uid = Number((await run(["id", "-u", "postgres"], timeoutMs)).trim());
        const gid = Number((await run(["id", "-g", "postgres"], timeoutMs)).trim());
        chownSync(dir, uid, gid);
      }
      const pwfile = join(dir, "pw");
      writeFileSync(pwfile, `${PG_PASSWORD}\n`);
      if (asRoot) chownSync(pwfile, Number((await run(["id", "-u", "postgres"], timeoutMs)).trim()), 0);
      await run(pg.cmd("initdb", ["-D", join(dir, "data"), "-U", PG_USER, `--pwfile=${pwfile}`, "-A", "scram-sha-256", "--no-sync", "-E", "UTF8"]), timeoutMs);
      await pg.start(timeoutMs);
      process.once("exit", pg.onExit);
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
    return pg;
  }

  private cmd(program: string, args: readonly string[]): string[] {
    const path = this.bin === null ? program : join(this.bin, program);
    return this.asRoot ? ["runuser", "-u", "postgres", "--", path, ...args] : [path, ...args];
  }

  /** Start (again) on the same port; resolves when it accepts connections. */
  async start(timeoutMs = 60_000): Promise<void> {
    const options = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`;
    await run(this.cmd("pg_ctl", ["-D", join(this.dir, "data"), "-o", options, "-l", join(this.dir, "log"), "-w", "-t", String(Math.ceil(timeoutMs / 1000)), "start"]), timeoutMs);
    this.running = true;
  }

  /** Stop now (connections are cut): the coordinator is unreachable until `start()`. */
  async stop(timeoutMs = 30_000): Promise<void> {
    if (!this.running) return;
    this.running = false;
    await run(this.cmd("pg_ctl", ["-D", join(this.dir, "data"), "-m", "immediate", "-w", "-t", String(Math.ceil(timeoutMs / 1000)), "stop"]), timeoutMs);
  }

  /**
   * Create database `db` holding a lockd_schema table that says the
   * coordinator's tables are at `version`; its URL.
   */
  async databaseAtSchema(db: string, version: number): Promise<string> {
    const admin = this.client();
    try {
      await admin.unsafe(`CREATE DATABASE ${db}`);
    } finally {
      await admin.close();
    }
    const url = this.url(undefined, db);
    const other = new Bun.SQL({ url, adapter: "postgres", max: 1 });
    try {
      await other.unsafe("CREATE TABLE lockd_schema (component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)");
      await other.unsafe(`INSERT INTO lockd_schema VALUES ('coordinator', ${version})`);
    } finally {
      await other.close();
    }
    return url;
  }

  /** Run SQL as the superuser through psql-free means: the caller's own Bun.sql client. */
  client(): InstanceType<typeof Bun.SQL> {
    return new Bun.SQL({ url: this.url(), adapter: "postgres", max: 1, connectionTimeout: 5 });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    process.off("exit", this.onExit);
    try {
      await this.stop();
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }
}

/** Run a command to completion, bounded in time; throws with its output on failure. */
async function run(cmd: readonly string[], timeoutMs: number): Promise<string> {
  const proc = Bun.spawn([...cmd], { stdin: "ignore", stdout: "pipe", stderr: "pipe", timeout: timeoutMs, killSignal: "SIGKILL" });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}: ${err || out}`);
  return out;
}

/**
 * One throwaway cluster for a test file: started before its first test,
 * removed after its last; `use` receives it (assign it to the file's `pg`).
 */
export function suitePostgres(use: (pg: Postgres) => void): void {
  let pg: Postgres | undefined;
  beforeAll(async () => {
    pg = await Postgres.start();
    use(pg);
  }, 90_000);
  afterAll(async () => {
    await pg?.[Symbol.asyncDispose]();
  });
}
