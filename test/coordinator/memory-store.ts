/**
 * The coordinator row in memory, with the statements' semantics of
 * src/failover/store.ts (compare-and-set on service, holder, epoch and
 * renewals). For in-process tests of the role shell; `down` makes every
 * statement fail as an unreachable coordinator would.
 */
import type { CoordinatorRow, Watched } from "../../src/failover/machine.ts";
import type { CoordinatorStore, Published } from "../../src/failover/store.ts";

export class MemoryRow {
  row: CoordinatorRow | null = null;
  down = false;
  statements = 0;
  /** Called after every statement (tests wait on it). */
  onStatement: (name: string) => void = () => {};
}

export class MemoryStore implements CoordinatorStore {
  constructor(
    private readonly shared: MemoryRow,
    private instance: string,
    private readonly leaseMs: number,
    private readonly block: number,
    /** The holder a release writes (failover/holder.ts releasedHolder). */
    private readonly released = "",
  ) {}

  setHolder(holder: string): void {
    this.instance = holder;
  }

  private async run<T>(name: string, body: () => T): Promise<T> {
    await Promise.resolve();
    this.shared.statements++;
    try {
      if (this.shared.down) throw new Error("coordinator unreachable");
      return body();
    } finally {
      this.shared.onStatement(name);
    }
  }

  read(): Promise<CoordinatorRow | null> {
    return this.run("read", () => this.shared.row);
  }

  create(floor: number): Promise<CoordinatorRow | null> {
    return this.run("create", () => {
      if (this.shared.row !== null) return null;
      this.shared.row = {
        epoch: 1,
        holder: this.instance,
        renewals: 0,
        tokenFloor: floor + this.block,
        leaseMs: this.leaseMs,
        maxLeaseMs: Math.floor(this.leaseMs / 4),
        carryLeaseMs: 0,
        held: null,
      };
      return this.shared.row;
    });
  }

  takeover(w: Watched): Promise<CoordinatorRow | null> {
    return this.run("takeover", () => {
      const r = this.shared.row;
      if (r === null || r.epoch !== w.epoch || r.renewals !== w.renewals || r.holder !== w.holder) return null;
      // As the SQL: the old maximum folds into the carried lease, the new term starts from a quarter of its lease.
      this.shared.row = {
        epoch: r.epoch + 1,
        holder: this.instance,
        renewals: 0,
        tokenFloor: r.tokenFloor + this.block,
        leaseMs: this.leaseMs,
        maxLeaseMs: Math.floor(this.leaseMs / 4),
        carryLeaseMs: Math.max(r.carryLeaseMs, r.maxLeaseMs ?? 0),
        held: null,
      };
      return this.shared.row;
    });
  }

  private mine(epoch: number): CoordinatorRow | null {
    const r = this.shared.row;
    return r !== null && r.holder === this.instance && r.epoch === epoch ? r : null;
  }

  renew(epoch: number, carryLeaseMs: number): Promise<boolean> {
    return this.run("renew", () => {
      const r = this.mine(epoch);
      if (r === null) return false;
      this.shared.row = { ...r, renewals: r.renewals + 1, carryLeaseMs };
      return true;
    });
  }

  raise(epoch: number, leaseMs: number): Promise<number | null> {
    return this.run("raise", () => {
      const r = this.mine(epoch);
      if (r === null) return null;
      this.shared.row = { ...r, maxLeaseMs: Math.max(r.maxLeaseMs ?? 0, leaseMs) };
      return this.shared.row.maxLeaseMs;
    });
  }

  reserve(epoch: number): Promise<number | null> {
    return this.run("reserve", () => {
      const r = this.mine(epoch);
      if (r === null) return null;
      this.shared.row = { ...r, tokenFloor: r.tokenFloor + this.block };
      return this.shared.row.tokenFloor;
    });
  }

  release(epoch: number, published: Published): Promise<boolean> {
    return this.run("release", () => {
      const r = this.mine(epoch);
      if (r === null) return false;
      this.shared.row = {
        ...r,
        holder: this.released,
        renewals: r.renewals + 1,
        maxLeaseMs: published.maxLeaseMs,
        carryLeaseMs: published.carryLeaseMs,
        held: published.held,
      };
      return true;
    });
  }

  async close(): Promise<void> {}
}
