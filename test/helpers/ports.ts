/**
 * Ports a test chooses itself, for a listener it starts later (two failover
 * instances share one lock port; PostgreSQL restarts on its own) or for an
 * address where nothing listens. Everything else uses port 0.
 */
import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/**
 * A port nothing listens on now, for a listener started later (a child
 * server, PostgreSQL) or for "nothing listens there" tests.
 */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/**
 * The kernel's ephemeral range (ip_local_port_range): it hands these ports
 * out to every port-0 listener and every outgoing connection on the machine.
 */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (low! > 0 && high! >= low!) return [low!, high!];
  } catch {
    // not Linux: assume the IANA dynamic range
  }
  return [49152, 65535];
}

/** Bind 127.0.0.1:`port` and close it again: whether nothing listens there now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/**
 * `count` distinct free ports, for listeners the test starts later on a
 * port it chooses (two failover instances share one; PostgreSQL restarts on
 * its own). Taken outside the kernel's ephemeral range: a port from there
 * (bound to 0, then closed) is free for the kernel to hand to any other
 * port-0 listener or outgoing connection on the machine before the test's
 * listener binds it, or between a stop and a restart (EADDRINUSE, or a
 * stranger answering). Outside that range, only a program that picks ports
 * by number can take it; each candidate is checked by binding it.
 */
export async function freePorts(count: number): Promise<number[]> {
  const [ephemeralLow, ephemeralHigh] = ephemeralRange();
  // 10000..(the range's start), or above its end when the range starts too low to leave room.
  const [low, high] = ephemeralLow - 10_000 >= 2000 ? [10_000, ephemeralLow - 1] : [ephemeralHigh + 1, 65535];
  if (high - low < 1000) throw new Error(`no room outside the ephemeral port range ${ephemeralLow}-${ephemeralHigh} for test ports`);
  const ports: number[] = [];
  for (let attempts = 0; ports.length < count; attempts++) {
    if (attempts >= 200) throw new Error(`no free port in ${low}-${high} after 200 attempts`);
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if (!ports.includes(port) && (await bindable(port))) ports.push(port);
  }
  return ports;
}

/** A connection to `port` is refused (nothing listens). */
export async function refusedConnection(port: number): Promise<boolean> {
  try {
    const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
    socket.end();
    return false;
  } catch {
    return true;
  }
}
