"""Run by test/shards/clients.test.ts against real shard servers (alpha and beta of the map
alpha,beta,gamma at generation 1; gamma not started): LOCKD_TEST_SHARD_MAP is the servers'
map, LOCKD_TEST_STALE_MAP an older one (alpha,beta at generation 0). Skipped otherwise."""
import os
import unittest

from lockd import Client, WrongShardError

CURRENT = os.environ.get("LOCKD_TEST_SHARD_MAP")
STALE = os.environ.get("LOCKD_TEST_STALE_MAP")


def name_on(client: Client, shard: str, also=lambda n: True, taken=()) -> str:
    for i in range(100000):
        name = f"py/{i}"
        if client.shard_of(name) == shard and also(name) and name not in taken:
            return name
    raise AssertionError(f"no name on {shard}")


@unittest.skipUnless(CURRENT and STALE, "needs real shard servers: run by test/shards/clients.test.ts")
class ShardsAgainstRealServers(unittest.TestCase):
    def test_locks_on_both_shards_and_wrong_shard_for_a_stale_map(self):
        client = Client(CURRENT)
        locks = []
        for shard in ["alpha", "beta", "alpha", "beta"]:
            locks.append(client.acquire(name_on(client, shard, taken=[l.name for l in locks]), lease=5))
        for lock in locks:
            self.assertTrue(lock.held)
            lock.release()
        old = Client(STALE)
        moved = name_on(old, "alpha", also=lambda n: client.shard_of(n) == "gamma")
        with self.assertRaises(WrongShardError) as caught:
            old.acquire(moved, lease=5)
        e = caught.exception
        self.assertEqual((e.code, e.error_class, e.client_shard, e.client_map), ("WRONG_SHARD", "client", "alpha", "alpha,beta (generation 0)"))
        sent_to = STALE.split(";")[0].split("=")[1]
        self.assertEqual(
            str(e),
            f"lock {moved!r}: the client's map alpha,beta (generation 0) places it on shard alpha and sent it to {sent_to}, "
            "but the server there is shard alpha of alpha,beta,gamma (generation 1), where it belongs to shard gamma: "
            "what differs is the shards (2 in the client's map, 3 in the server's; gamma only in the server's), and the generation (0 in the client's map, 1 in the server's); "
            "fix the map (LOCKD_SERVER) and claim again",
        )
