/**
 * A throwaway Patroni cluster for tests: one etcd member, two Patroni nodes
 * started from deploy/patroni/patroni.yml (only its per-node lines changed:
 * names, addresses on 127.0.0.1, ports, directories, pg_hba's network), and
 * optionally HAProxy from deploy/patroni/haproxy.cfg (only its addresses
 * changed). Debian's `patroni` (with python3-etcd), `etcd-server` and
 * `haproxy`; `.ci/run` installs them where missing, and `missing()` says
 * which are not here (the test is then skipped, saying so).
 *
 * PostgreSQL refuses to run as root: as root, Patroni runs as the
 * `postgres` user through setpriv (which execs, so the pid is Patroni's).
 * Disposing stops everything it started (Patroni, the postmasters it
 * left behind after a SIGKILL, etcd, HAProxy) and removes the directory.
 */
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePorts } from "../helpers/ports.ts";

export const DEPLOY = resolve(import.meta.dir, "../../deploy/patroni");
/** The recipe's superuser (deploy/patroni/patroni.yml). */
const RECIPE = () => Bun.YAML.parse(readFileSync(join(DEPLOY, "patroni.yml"), "utf8")) as PatroniConfig;

type PatroniConfig = Record<string, any>;

/** The lines of patroni.yml that differ per node (or per machine): the test changes these and nothing else. */
export const PER_NODE = [
  "name",
  "restapi.listen",
  "restapi.connect_address",
  "etcd3.hosts",
  "postgresql.listen",
  "postgresql.connect_address",
  "postgresql.data_dir",
  "postgresql.bin_dir",
  "postgresql.pgpass",
  "postgresql.pg_hba",
  "postgresql.parameters.unix_socket_directories",
] as const;

function set(config: PatroniConfig, path: string, value: unknown): void {
  const keys = path.split(".");
  let at = config;
  for (const key of keys.slice(0, -1)) at = at[key];
  at[keys.at(-1)!] = value;
}

/** What is missing for a real Patroni here, or null. */
export function missing(): string | null {
  const need = [
    ["patroni", Bun.which("patroni")],
    ["etcd (etcd-server)", Bun.which("etcd")],
    ["haproxy", Bun.which("haproxy") ?? (existsSync("/usr/sbin/haproxy") ? "/usr/sbin/haproxy" : null)],
    ["setpriv", Bun.which("setpriv")],
  ].filter(([, path]) => path === null).map(([name]) => name);
  if (need.length > 0) return `not installed: ${need.join(", ")} (apt-get install patroni python3-etcd etcd-server haproxy; .ci/run does)`;
  const python = Bun.spawnSync(["/usr/bin/python3", "-c", "import etcd"], { stdout: "ignore", stderr: "ignore" });
  if (python.exitCode !== 0) return "Patroni's etcd client is not installed (apt-get install python3-etcd)";
  if (pgBin() === null) return "no PostgreSQL server programs under /usr/lib/postgresql/*/bin";
  return null;
}

function pgBin(): string | null {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return null;
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, "bin", "postgres"))).sort((a, b) => Number(b) - Number(a));
  return versions.length === 0 ? null : join(root, versions[0]!, "bin");
}

interface Proc {
  readonly proc: ReturnType<typeof Bun.spawn>;
  readonly log: string;
}

function spawnLogged(cmd: string[], log: string, env: Record<string, string> = {}): Proc {
  const proc = Bun.spawn(cmd, { stdin: "ignore", stdout: Bun.file(log), stderr: Bun.file(`${log}.err`), env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env } });
  return { proc, log };
}

export class PatroniNode {
  patroni: Proc | null = null;
  constructor(
    readonly name: string,
    readonly dir: string,
    readonly pgPort: number,
    readonly restPort: number,
    readonly configPath: string,
    private readonly asRoot: boolean,
  ) {}

  get dataDir(): string {
    return join(this.dir, "data");
  }

  start(): void {
    const patroni = Bun.which("patroni")!;
    const cmd = this.asRoot ? ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", patroni, this.configPath] : [patroni, this.configPath];
    this.patroni = spawnLogged(cmd, join(this.dir, `patroni-${Date.now()}.log`), { HOME: this.dir, LC_ALL: "C.UTF-8", LANG: "C.UTF-8" });
  }

  /** The postmaster's pid (from postmaster.pid), or null. */
  postmasterPid(): number | null {
    try {
      const pid = Number(readFileSync(join(this.dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
      return pid > 0 ? pid : null;
    } catch {
      return null;
    }
  }

  /** SIGKILL Patroni only: PostgreSQL goes on running, as when the agent dies alone. */
  async killPatroni(): Promise<void> {
    const p = this.patroni;
    this.patroni = null;
    if (p === null) return;
    p.proc.kill("SIGKILL");
    await p.proc.exited;
  }

  /** SIGKILL Patroni and the postmaster (and with it, at once, every backend): the node crashed. */
  async crash(): Promise<void> {
    const pid = this.postmasterPid();
    await this.killPatroni();
    if (pid !== null) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone already
      }
      await waitGone(pid, 10_000);
    }
  }

  /** Stop what runs of this node: Patroni (SIGTERM, then SIGKILL), then a postmaster left behind. */
  async stop(): Promise<void> {
    const p = this.patroni;
    this.patroni = null;
    if (p !== null) {
      p.proc.kill("SIGTERM");
      const done = await Promise.race([p.proc.exited.then(() => true), Bun.sleep(8000).then(() => false)]);
      if (!done) {
        p.proc.kill("SIGKILL");
        await p.proc.exited;
      }
    }
    const pid = this.postmasterPid();
    if (pid !== null) {
      try {
        process.kill(pid, "SIGQUIT");
      } catch {
        return;
      }
      if (!(await waitGone(pid, 5000))) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
        await waitGone(pid, 5000);
      }
    }
  }

  async rest(path: string, init?: RequestInit): Promise<Response> {
    return fetch(`http://127.0.0.1:${this.restPort}${path}`, { ...init, signal: AbortSignal.timeout(3000) });
  }
}

async function waitGone(pid: number, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      process.kill(pid, 0);
    } catch {
      return true;
    }
    await Bun.sleep(50);
  }
  return false;
}

export interface Member {
  readonly name: string;
  readonly role: string;
  readonly state: string;
  readonly port?: number;
}

export class PatroniCluster implements AsyncDisposable {
  readonly nodes: PatroniNode[] = [];
  private etcd: Proc | null = null;
  private haproxy: Proc | null = null;
  haproxyPort = 0;
  readonly superuser: { readonly username: string; readonly password: string };

  private constructor(readonly dir: string, private readonly asRoot: boolean, config: PatroniConfig) {
    this.superuser = config.postgresql.authentication.superuser;
  }

  /** etcd and `count` Patroni nodes from deploy/patroni/patroni.yml; resolves once a leader and a sync standby stream. */
  static async start(count = 2, timeoutMs = 60_000): Promise<PatroniCluster> {
    const asRoot = process.getuid?.() === 0;
    const dir = mkdtempSync(join(tmpdir(), "lockd-patroni-"));
    chmodSync(dir, 0o755); // the postgres user reads its nodes' directories in it
    const cluster = new PatroniCluster(dir, asRoot, RECIPE());
    process.once("exit", cluster.onExit);
    try {
      const [etcdClient, etcdPeer, ...ports] = await freePorts(2 + 2 * count);
      mkdirSync(join(dir, "etcd"));
      cluster.etcd = spawnLogged([
        Bun.which("etcd")!,
        "--name", "e1",
        "--data-dir", join(dir, "etcd", "data"),
        "--listen-client-urls", `http://127.0.0.1:${etcdClient}`,
        "--advertise-client-urls", `http://127.0.0.1:${etcdClient}`,
        "--listen-peer-urls", `http://127.0.0.1:${etcdPeer}`,
        "--initial-advertise-peer-urls", `http://127.0.0.1:${etcdPeer}`,
        "--initial-cluster", `e1=http://127.0.0.1:${etcdPeer}`,
        "--initial-cluster-state", "new",
        "--enable-v2=true",
      ], join(dir, "etcd", "log"), { ETCD_UNSUPPORTED_ARCH: "" });
      await until(async () => {
        try {
          return (await fetch(`http://127.0.0.1:${etcdClient}/health`, { signal: AbortSignal.timeout(1000) })).ok;
        } catch {
          return false;
        }
      }, 20_000, "etcd answers");
      const bin = pgBin()!;
      for (let i = 0; i < count; i++) {
        const name = `pg${i + 1}`;
        const nodeDir = join(dir, name);
        mkdirSync(nodeDir);
        const pgPort = ports[2 * i]!;
        const restPort = ports[2 * i + 1]!;
        const config = RECIPE();
        const perNode: Record<(typeof PER_NODE)[number], unknown> = {
          name,
          "restapi.listen": `127.0.0.1:${restPort}`,
          "restapi.connect_address": `127.0.0.1:${restPort}`,
          "etcd3.hosts": `127.0.0.1:${etcdClient}`,
          "postgresql.listen": `127.0.0.1:${pgPort}`,
          "postgresql.connect_address": `127.0.0.1:${pgPort}`,
          "postgresql.data_dir": join(nodeDir, "data"),
          "postgresql.bin_dir": bin,
          "postgresql.pgpass": join(nodeDir, "pgpass"),
          "postgresql.pg_hba": (config.postgresql.pg_hba as string[]).map((line) => line.replace("10.0.0.0/24", "127.0.0.1/32")),
          // Not /var/run/postgresql, which may not exist here.
          "postgresql.parameters.unix_socket_directories": nodeDir,
        };
        for (const [path, value] of Object.entries(perNode)) set(config, path, value);
        const configPath = join(nodeDir, "patroni.yml");
        writeFileSync(configPath, JSON.stringify(config, null, 2));
        if (asRoot) {
          const uid = Number(Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString().trim());
          const gid = Number(Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString().trim());
          chownSync(nodeDir, uid, gid);
          chownSync(configPath, uid, gid);
        }
        const node = new PatroniNode(name, nodeDir, pgPort, restPort, configPath, asRoot);
        cluster.nodes.push(node);
      }
      // The first node bootstraps; the others join once it leads.
      cluster.nodes[0]!.start();
      await until(async () => (await cluster.leader()) !== null, timeoutMs, "a Patroni leader");
      for (const node of cluster.nodes.slice(1)) node.start();
      await cluster.healthy(timeoutMs);
    } catch (error) {
      await cluster[Symbol.asyncDispose]();
      throw error;
    }
    return cluster;
  }

  /** The members as Patroni's REST API lists them (asked of any node that answers). */
  async members(): Promise<Member[]> {
    for (const node of this.nodes) {
      if (node.patroni === null) continue;
      try {
        const response = await node.rest("/cluster");
        if (!response.ok) continue;
        const body = (await response.json()) as { members?: Member[] };
        return body.members ?? [];
      } catch {
        // try the next
      }
    }
    return [];
  }

  /** The node that leads and runs, or null. */
  async leader(): Promise<PatroniNode | null> {
    const lead = (await this.members()).find((m) => m.role === "leader" && m.state === "running");
    return lead === undefined ? null : (this.nodes.find((n) => n.name === lead.name) ?? null);
  }

  /** Wait until there is a running leader and every other node streams as a (sync, when synchronous_mode is on) standby. */
  async healthy(timeoutMs = 60_000, sync = true): Promise<PatroniNode> {
    let leader: PatroniNode | null = null;
    await until(async () => {
      const members = await this.members();
      const lead = members.find((m) => m.role === "leader" && m.state === "running");
      const others = members.filter((m) => m !== lead);
      leader = lead === undefined ? null : (this.nodes.find((n) => n.name === lead.name) ?? null);
      return leader !== null && members.length === this.nodes.length &&
        others.every((m) => (sync ? m.role === "sync_standby" : m.role === "replica" || m.role === "sync_standby") && (m.state === "streaming" || m.state === "running"));
    }, timeoutMs, `a leader and ${this.nodes.length - 1} streaming ${sync ? "sync " : ""}standby(s): ${JSON.stringify(await this.members().catch(() => []))}`);
    return leader!;
  }

  /** A planned switchover to `candidate` (POST /switchover on the leader). */
  async switchover(leader: PatroniNode, candidate: PatroniNode): Promise<void> {
    const response = await leader.rest("/switchover", { method: "POST", body: JSON.stringify({ leader: leader.name, candidate: candidate.name }), headers: { "content-type": "application/json" } });
    if (!response.ok) throw new Error(`switchover: HTTP ${response.status} ${await response.text()}`);
  }

  /** Change the cluster's dynamic configuration (PATCH /config). */
  async patchConfig(change: Record<string, unknown>): Promise<void> {
    const node = (await this.leader()) ?? this.nodes[0]!;
    const response = await node.rest("/config", { method: "PATCH", body: JSON.stringify(change), headers: { "content-type": "application/json" } });
    if (!response.ok) throw new Error(`PATCH /config: HTTP ${response.status} ${await response.text()}`);
  }

  /** A superuser client of `node`'s PostgreSQL. */
  client(node: PatroniNode, database = "postgres"): InstanceType<typeof Bun.SQL> {
    return new Bun.SQL({ url: `postgres://${this.superuser.username}:${encodeURIComponent(this.superuser.password)}@127.0.0.1:${node.pgPort}/${database}`, adapter: "postgres", max: 1, connectionTimeout: 5 });
  }

  /**
   * HAProxy from deploy/patroni/haproxy.cfg, its bind and servers moved to
   * 127.0.0.1 (each node's PostgreSQL port, checked on its Patroni's REST
   * port); resolves once it listens. Its config file: `haproxyConfig`.
   */
  async startHaproxy(): Promise<number> {
    const [port] = await freePorts(1);
    this.haproxyPort = port!;
    const text = readFileSync(join(DEPLOY, "haproxy.cfg"), "utf8");
    const lines = text.split("\n").filter((line) => !/^\s*server pg[0-9]/.test(line) || this.nodes.some((n) => line.includes(` ${n.name} `)));
    const config = lines
      .map((line) => line.replace(/bind 10\.0\.0\.30:5000/, `bind 127.0.0.1:${port}`))
      .map((line) => {
        const m = /^(\s*server (pg[0-9]+)) 10\.0\.0\.[0-9]+:5432(.*) check port 8008$/.exec(line);
        if (m === null) return line;
        const node = this.nodes.find((n) => n.name === m[2])!;
        return `${m[1]} 127.0.0.1:${node.pgPort}${m[3]} check port ${node.restPort}`;
      })
      .join("\n");
    this.haproxyConfig = join(this.dir, "haproxy.cfg");
    writeFileSync(this.haproxyConfig, config);
    const haproxy = Bun.which("haproxy") ?? "/usr/sbin/haproxy";
    this.haproxy = spawnLogged([haproxy, "-db", "-f", this.haproxyConfig], join(this.dir, "haproxy.log"));
    await until(async () => {
      try {
        const socket = await Bun.connect({ hostname: "127.0.0.1", port: port!, socket: { data() {} } });
        socket.end();
        return true;
      } catch {
        return false;
      }
    }, 10_000, "HAProxy listens");
    // Until its first checks, HAProxy may send a connection to a replica: wait until five in a row reach the primary.
    let inARow = 0;
    await until(async () => {
      const sql = new Bun.SQL({ url: `postgres://${this.superuser.username}:${encodeURIComponent(this.superuser.password)}@127.0.0.1:${port}/postgres`, adapter: "postgres", max: 1, connectionTimeout: 2 });
      try {
        const rows = (await sql.unsafe("SELECT pg_is_in_recovery() AS r")) as { r: boolean }[];
        inARow = rows[0]?.r === false ? inARow + 1 : 0;
      } catch {
        inARow = 0;
      } finally {
        await sql.close().catch(() => {});
      }
      return inARow >= 5;
    }, 15_000, "HAProxy sends connections to the primary only");
    return port!;
  }

  haproxyConfig = "";

  private readonly onExit = (): void => {
    for (const node of this.nodes) {
      node.patroni?.proc.kill("SIGKILL");
      const pid = node.postmasterPid();
      if (pid !== null) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
      }
    }
    this.etcd?.proc.kill("SIGKILL");
    this.haproxy?.proc.kill("SIGKILL");
  };

  /** Everything this cluster's processes logged, for a failure's message. */
  logs(): string {
    const out: string[] = [];
    for (const node of this.nodes) {
      for (const file of readdirSync(node.dir).filter((f) => f.startsWith("patroni-"))) out.push(`--- ${node.name} ${file}\n${readFileSync(join(node.dir, file), "utf8").slice(-3000)}`);
    }
    return out.join("\n");
  }

  async [Symbol.asyncDispose](): Promise<void> {
    process.off("exit", this.onExit);
    this.haproxy?.proc.kill("SIGKILL");
    await this.haproxy?.proc.exited;
    await Promise.all(this.nodes.map((n) => n.stop()));
    this.etcd?.proc.kill("SIGTERM");
    await this.etcd?.proc.exited;
    if (process.env.LOCKD_KEEP_PATRONI === undefined) rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Poll `check` every 100 ms until it holds, at most `ms`. */
export async function until(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await Bun.sleep(100);
  }
  throw new Error(`not within ${ms} ms: ${what}`);
}
