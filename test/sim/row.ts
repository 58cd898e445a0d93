/**
 * The coordinator row as the failover simulations model it: what each
 * statement of src/failover/store.ts does to the row of one
 * service, executed atomically. Shared by coordinator.ts (abstract grants)
 * and believers.ts (engines and clients), so both judge the role machine
 * against the same store.
 */
import type { CoordinatorRow, RoleAction, Watched } from "../../src/failover/machine.ts";

type Release = Extract<RoleAction, { type: "release" }>;

export class RowModel {
  row: CoordinatorRow | null = null;
  /** Each release that executed, by the epoch it ended: the reclaimable grants it published (null: none). */
  readonly released = new Map<number, Release["reclaim"] | null>();

  constructor(
    /** Tokens per reservation. */
    readonly block: number,
  ) {}

  /** Whether `id` holds the row in `epoch` (the condition of renew, reserve, raise and release). */
  mine(id: string, epoch: number): boolean {
    return this.row !== null && this.row.holder === id && this.row.epoch === epoch;
  }

  /**
   * INSERT: epoch 1, holder `id`; null when the row exists. A term starts with
   * lease/4 as its largest lease, or the reclaim cap `reclaimMs` (the
   * creating instance's, 0: off) if larger.
   */
  create(id: string, floor: number, leaseMs: number, reclaimMs = 0): CoordinatorRow | null {
    if (this.row !== null) return null;
    this.row = {
      epoch: 1,
      holder: id,
      renewals: 0,
      tokenFloor: floor + this.block,
      leaseMs,
      maxLeaseMs: Math.max(Math.floor(leaseMs / 4), reclaimMs),
      carryLeaseMs: 0,
      held: null,
      reclaimMaxLeaseMs: reclaimMs,
      reclaim: null,
    };
    return this.row;
  }

  /**
   * The compare-and-set: epoch + 1, holder `id`, the old largest lease folded
   * into the carried one. `compare` false: a plain write (a self-test's broken store).
   * Reclaim (schema 3): the row's cap M raised to the taking instance's
   * `reclaimMs` (GREATEST: never lowered), the term's largest lease made to
   * cover it (a reclaimed holder is the new term's; `foldCap` false: a
   * self-test's broken statement), the published set cleared.
   */
  takeover(id: string, watched: Watched, leaseMs: number, compare = true, reclaimMs = 0, foldCap = true): CoordinatorRow | null {
    const row = this.row;
    if (row === null) return null;
    if (compare && (row.epoch !== watched.epoch || row.renewals !== watched.renewals || row.holder !== watched.holder)) return null;
    this.row = {
      epoch: row.epoch + 1,
      holder: id,
      renewals: 0,
      tokenFloor: row.tokenFloor + this.block,
      leaseMs,
      maxLeaseMs: Math.max(Math.floor(leaseMs / 4), foldCap ? Math.max(row.reclaimMaxLeaseMs ?? 0, reclaimMs) : 0),
      carryLeaseMs: Math.max(row.carryLeaseMs, row.maxLeaseMs ?? 0),
      held: null,
      reclaimMaxLeaseMs: Math.max(row.reclaimMaxLeaseMs ?? 0, reclaimMs),
      reclaim: null,
    };
    return this.row;
  }

  renew(id: string, epoch: number, carryLeaseMs: number): boolean {
    if (!this.mine(id, epoch)) return false;
    this.row = { ...this.row!, renewals: this.row!.renewals + 1, carryLeaseMs };
    return true;
  }

  /** The new token floor; null when the row is not ours. */
  reserve(id: string, epoch: number): number | null {
    if (!this.mine(id, epoch)) return null;
    this.row = { ...this.row!, tokenFloor: this.row!.tokenFloor + this.block };
    return this.row.tokenFloor;
  }

  /** The row's largest lease after GREATEST; null when the row is not ours. */
  raise(id: string, epoch: number, leaseMs: number): number | null {
    if (!this.mine(id, epoch)) return null;
    this.row = { ...this.row!, maxLeaseMs: Math.max(this.row!.maxLeaseMs ?? 0, leaseMs) };
    return this.row.maxLeaseMs;
  }

  release(id: string, action: Release): boolean {
    if (!this.mine(id, action.epoch)) return false;
    this.released.set(action.epoch, action.reclaim ?? null);
    this.row = { ...this.row!, holder: "", renewals: this.row!.renewals + 1, maxLeaseMs: action.maxLeaseMs, carryLeaseMs: action.carryLeaseMs, held: action.held, reclaim: action.reclaim ?? null };
    return true;
  }
}
