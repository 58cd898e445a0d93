"""WRONG_SHARD in the client's words, the same as the TypeScript client's (src/shard/mismatch.ts)."""
import unittest

from lockd import Client, WrongShardError
from lockd.shard import describe_mismatch

from .test_blocking import answers_every_acquire, error_frame


def wrong_shard_message(shard: str, shards: str, generation: int, owner: str) -> str:
    """A lockd server's WRONG_SHARD message, in the words of src/shard/mismatch.ts (wrongShardMessage)."""
    return (
        f"this server is shard {shard} of {shards} (generation {generation}), where this lock belongs to shard {owner}: "
        "the client's server map differs from the servers'; fix the map (LOCKD_SERVER) and claim again"
    )


class WrongShardMessage(unittest.TestCase):
    def test_swapped_addresses_name_the_address_and_both_shards(self):
        beta, _ = answers_every_acquire(error_frame(0x24, wrong_shard_message("beta", "alpha,beta", 1, "alpha")))
        self.addCleanup(beta.close)
        alpha, _ = answers_every_acquire(error_frame(0x24, wrong_shard_message("alpha", "alpha,beta", 1, "beta")))
        self.addCleanup(alpha.close)
        b = f"127.0.0.1:{beta.getsockname()[1]}"
        client = Client(f"gen=1;alpha={b};beta=127.0.0.1:{alpha.getsockname()[1]}")  # swapped: beta's server under alpha
        name = next(n for n in (f"jobs/{i}" for i in range(1000)) if client.shard_of(n) == "alpha")
        with self.assertRaises(WrongShardError) as caught:
            client.acquire(name, lease=2).release()
        e = caught.exception
        self.assertEqual((e.code, e.error_class, e.client_shard, e.client_map), ("WRONG_SHARD", "client", "alpha", "alpha,beta (generation 1)"))
        self.assertEqual(
            str(e),
            f"lock {name!r}: the client's map alpha,beta (generation 1) places it on shard alpha and sent it to {b}, "
            "but the server there is shard beta of the same shards and generation: "
            f"what differs is the addresses: the client's map lists {b}, a server of shard beta, under shard alpha; fix the map (LOCKD_SERVER) and claim again",
        )

    def test_the_other_cases_word_for_word(self):
        self.assertEqual(
            describe_mismatch(["alpha", "beta"], 1, "alpha", "10.0.0.2:7700", wrong_shard_message("beta", "beta,alpha", 1, "alpha")),
            "the client's map alpha,beta (generation 1) places it on shard alpha and sent it to 10.0.0.2:7700, but the server there is shard beta of the same shards and generation: "
            "what differs is the addresses: the client's map lists 10.0.0.2:7700, a server of shard beta, under shard alpha; fix the map (LOCKD_SERVER) and claim again",
        )
        self.assertEqual(
            describe_mismatch(["alpha", "beta", "gamma"], 3, "alpha", None, wrong_shard_message("alpha", "alpha,beta", 2, "beta")),
            "the client's map alpha,beta,gamma (generation 3) places it on shard alpha, but the server is shard alpha of alpha,beta (generation 2), where it belongs to shard beta: "
            "what differs is the shards (3 in the client's map, 2 in the server's; gamma only in the client's), and the generation (3 in the client's map, 2 in the server's); "
            "fix the map (LOCKD_SERVER) and claim again",
        )
        self.assertEqual(
            describe_mismatch(["alpha", "beta"], 0, "beta", "[::1]:7701", "not mine"),
            "the client's map alpha,beta (generation 0) places it on shard beta and sent it to [::1]:7701, but not mine",
        )


if __name__ == "__main__":
    unittest.main()
