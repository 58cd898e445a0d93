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
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../helpers/ports.ts";

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

export { freePort, freePorts } from "../helpers/ports.ts";

export class Postgres implements AsyncDisposable {
  private running = false;

  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly bin: string | null,
    readonly asRoot: boolean,
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
    const pg = await Postgres.empty(timeoutMs);
    const dir = pg.dir;
    try {
      const pwfile = join(dir, "pw");
      writeFileSync(pwfile, `${PG_PASSWORD}\n`);
      if (pg.asRoot) chownSync(pwfile, Number((await run(["id", "-u", "postgres"], timeoutMs)).trim()), 0);
      await run(pg.cmd("initdb", ["-D", join(dir, "data"), "-U", PG_USER, `--pwfile=${pwfile}`, "-A", "scram-sha-256", "--no-sync", "-E", "UTF8"]), timeoutMs);
      await pg.start(timeoutMs);
      process.once("exit", pg.onExit);
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
    return pg;
  }

  /** A directory (owned by postgres when root) and a free port, nothing in it yet. */
  private static async empty(timeoutMs: number): Promise<Postgres> {
    const bin = binDir();
    const asRoot = process.getuid?.() === 0;
    const dir = mkdtempSync(join(tmpdir(), "lockd-pg-"));
    const pg = new Postgres(dir, await freePort(), bin, asRoot);
    if (asRoot) {
      const uid = Number((await run(["id", "-u", "postgres"], timeoutMs)).trim());
      const gid = Number((await run(["id", "-g", "postgres"], timeoutMs)).trim());
      chownSync(dir, uid, gid);
    }
    return pg;
  }

  /**
   * A streaming replica of `primary` (pg_basebackup -R, started on its own
   * port): in recovery, read-only, until `promote()`.
   */
  static async replicaOf(primary: Postgres, timeoutMs = 60_000): Promise<Postgres> {
    const pg = await Postgres.empty(timeoutMs);
    try {
      await run(
        pg.cmd("env", [`PGPASSWORD=${PG_PASSWORD}`, pg.path("pg_basebackup"), "-h", "127.0.0.1", "-p", String(primary.port), "-U", PG_USER, "-D", join(pg.dir, "data"), "-R", "-X", "stream", "--no-sync", "-c", "fast"]),
        timeoutMs,
      );
      await pg.start(timeoutMs);
      process.once("exit", pg.onExit);
    } catch (error) {
      rmSync(pg.dir, { recursive: true, force: true });
      throw error;
    }
    return pg;
  }

  /** Promote a replica (pg_ctl promote, waiting until it accepts writes). */
  async promote(timeoutMs = 30_000): Promise<void> {
    await run(this.cmd("pg_ctl", ["-D", join(this.dir, "data"), "-w", "-t", String(Math.ceil(timeoutMs / 1000)), "promote"]), timeoutMs);
  }

  /** ALTER SYSTEM SET name = value, then reload: every session sees it at its next transaction. */
  async set(name: string, value: string): Promise<void> {
    const admin = this.client();
    try {
      await admin.unsafe(`ALTER SYSTEM SET ${name} = '${value.replace(/'/g, "''")}'`);
      await admin.unsafe("SELECT pg_reload_conf()");
    } finally {
      await admin.close();
    }
  }

  /** A program of PostgreSQL's, by its path. */
  private path(program: string): string {
    return this.bin === null ? (Bun.which(program) ?? program) : join(this.bin, program);
  }

  private cmd(program: string, args: readonly string[]): string[] {
    const path = program === "env" ? "env" : this.bin === null ? program : join(this.bin, program);
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
