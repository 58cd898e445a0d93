/**
 * A network namespace with a veth pair into this host, made by a test and
 * always removed by it: traffic flows only between the namespace and the
 * host's end of the veth, in a private /30 picked from the pid (so parallel
 * runs do not collide). Needs root and `ip`; `create()` returns null where
 * either is missing, and the caller skips what needs it.
 */
import { existsSync } from "node:fs";

const IP = "/usr/sbin/ip";

function ip(args: readonly string[]): { ok: boolean; err: string } {
  const result = Bun.spawnSync([IP, ...args], { stdout: "ignore", stderr: "pipe" });
  return { ok: result.exitCode === 0, err: result.stderr.toString().trim() };
}

export class Netns implements Disposable {
  private constructor(
    readonly name: string,
    readonly hostIf: string,
    readonly nsIf: string,
    /** This host's address on the veth: where the server listens. */
    readonly hostIp: string,
    /** The namespace's address. */
    readonly nsIp: string,
  ) {}

  /** Why namespaces cannot be used here, or null if they can. */
  static unavailable(): string | null {
    if (process.getuid?.() !== 0) return "not root";
    if (!(Bun.file(IP).size > 0)) return `${IP} missing`;
    return null;
  }

  /**
   * Delete namespaces this test left behind in runs that were killed before
   * their `finally` (named after a pid that no longer exists).
   */
  static sweep(): void {
    const list = Bun.spawnSync([IP, "netns", "list"], { stdout: "pipe", stderr: "ignore" }).stdout.toString();
    for (const match of list.matchAll(/^lockd-fault-(\d+)\b/gm)) {
      const pid = Number(match[1]);
      if (pid !== process.pid && !existsSync(`/proc/${pid}`)) {
        ip(["netns", "del", match[0]]);
        ip(["link", "del", `lkh${pid}`]);
      }
    }
  }

  /** Build it; null (and the reason in `Netns.lastError`) when the kernel refuses. */
  static create(): Netns | null {
    if (Netns.unavailable() !== null) return null;
    Netns.sweep();
    const pid = process.pid;
    const n = pid % 16384;
    const base = `10.213.${n >> 6}.`;
    const low = (n & 63) << 2;
    const ns = new Netns(`lockd-fault-${pid}`, `lkh${pid}`, `lkn${pid}`, `${base}${low + 1}`, `${base}${low + 2}`);
    const steps: string[][] = [
      ["netns", "add", ns.name],
      ["link", "add", ns.hostIf, "type", "veth", "peer", "name", ns.nsIf, "netns", ns.name],
      ["addr", "add", `${ns.hostIp}/30`, "dev", ns.hostIf],
      ["link", "set", ns.hostIf, "up"],
      ["netns", "exec", ns.name, IP, "addr", "add", `${ns.nsIp}/30`, "dev", ns.nsIf],
      ["netns", "exec", ns.name, IP, "link", "set", ns.nsIf, "up"],
      ["netns", "exec", ns.name, IP, "link", "set", "lo", "up"],
    ];
    for (const step of steps) {
      const result = ip(step);
      if (!result.ok) {
        Netns.lastError = `ip ${step.join(" ")}: ${result.err}`;
        ns[Symbol.dispose]();
        return null;
      }
    }
    return ns;
  }

  static lastError = "";

  /** Prefix that runs a command inside the namespace. */
  get exec(): string[] {
    return [IP, "netns", "exec", this.name];
  }

  /** Pull the cable on the namespace's side: no FIN, no RST, just silence. */
  cut(): void {
    const result = ip(["netns", "exec", this.name, IP, "link", "set", this.nsIf, "down"]);
    if (!result.ok) throw new Error(`cannot cut the link: ${result.err}`);
  }

  /** Deleting the namespace deletes its veth end, and with it the host's end. Idempotent. */
  [Symbol.dispose](): void {
    ip(["netns", "del", this.name]);
    ip(["link", "del", this.hostIf]); // normally gone already
  }
}
