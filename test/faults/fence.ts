/**
 * A guarded resource that checks fencing tokens, as protocol.md section 6
 * asks of one: it remembers the highest token any write carried and refuses
 * (409) a write carrying a lower one. Writes with an equal token are the
 * same holder's and pass.
 */
export class FencedResource implements Disposable {
  highest = 0n;
  readonly writes: { token: bigint; accepted: boolean }[] = [];
  private readonly server: ReturnType<typeof Bun.serve>;

  constructor() {
    this.server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: async (request) => {
        const token = BigInt((await request.text()).trim());
        const accepted = token >= this.highest;
        if (accepted) this.highest = token;
        this.writes.push({ token, accepted });
        return Response.json({ accepted, highest: String(this.highest) }, { status: accepted ? 200 : 409 });
      },
    });
  }

  get url(): string {
    return `http://127.0.0.1:${this.server.port}/write`;
  }

  /** A write from this process (the new owner). */
  async write(token: bigint): Promise<number> {
    return (await fetch(this.url, { method: "POST", body: String(token) })).status;
  }

  [Symbol.dispose](): void {
    this.server.stop(true);
  }
}
