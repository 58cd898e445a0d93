import type { Placement } from "../../src/shard/placement.ts";

/** The first `count` names `lock/0`, `lock/1`, ... that `placement` puts on `shard`. */
export function namesOn(placement: Placement, shard: string, count: number, where: (name: string) => boolean = () => true): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count && i < 100_000; i++) {
    const name = `lock/${i}`;
    if (placement.shardOf(name) === shard && where(name)) out.push(name);
  }
  if (out.length < count) throw new Error(`not ${count} names on ${shard}`);
  return out;
}
