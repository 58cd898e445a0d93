"""The codec on the test vectors of docs/protocol.md sections 9 and 10, and the schedule's worked numbers."""
import unittest

from lockd.errors import LimitMismatchError, LockBusyError, LockDelayedError, LockError, LockRequestError, server_error
from lockd.frames import ACQUIRED, ERROR, HEARTBEAT_FRAME, WAITING, Frame, ProtocolViolation, Reader, SpeaksHTTP, SpeaksTLS, class_of_code, code_name, encode_acquire
from lockd.schedule import client_timeout, heartbeat_interval, smooth_rtt


def h(s: str) -> bytes:
    return bytes.fromhex(s)


class Vectors(unittest.TestCase):
    def test_encode(self):
        self.assertEqual(encode_acquire("jobs/nightly", "", 5000), h("01 00 00 14 01 00 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"))
        self.assertEqual(
            encode_acquire("jobs/nightly", "host-12/pid-4411", 5000),
            h("01 00 00 24 01 00 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79 68 6f 73 74 2d 31 32 2f 70 69 64 2d 34 34 31 31"),
        )
        self.assertEqual(encode_acquire("jobs/nightly", "", 5000, try_=True)[5], 0x01)
        # RECLAIM (section 14.1): the token after lease_ms (and the limit), then with LIMIT the slot
        # (the same bytes as the TypeScript client's encodeAcquire).
        self.assertEqual(
            encode_acquire("jobs/nightly", "o", 5000, reclaim_token=9),
            h("01 00 00 1d 01 08 00 00 13 88 00 00 00 00 00 00 00 09 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79 6f"),
        )
        self.assertEqual(
            encode_acquire("jobs/nightly", "o", 5000, limit=3, reclaim_token=2**40 + 5, reclaim_slot=2),
            h("01 00 00 21 01 0c 00 00 13 88 00 03 00 00 01 00 00 00 00 05 00 02 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79 6f"),
        )
        self.assertEqual(encode_acquire("x", "", 5000, shared=True, reclaim_token=7), h("01 00 00 11 01 0a 00 00 13 88 00 00 00 00 00 00 00 07 00 01 78"))
        for bad in [dict(reclaim_token=0), dict(reclaim_token=2**64), dict(reclaim_token=1, reclaim_slot=0), dict(reclaim_slot=0),
                    dict(limit=3, reclaim_token=1), dict(limit=3, reclaim_token=1, reclaim_slot=3)]:
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                encode_acquire("x", "", 5000, **bad)
        self.assertEqual(HEARTBEAT_FRAME, h("02 00 00 00"))
        with self.assertRaises(ValueError):
            encode_acquire("x", "", 0)

    def test_decode(self):
        cases = [
            ("81 01 00 08 00 00 00 00 00 00 00 01", Frame(ACQUIRED, 1, token=1)),
            ("81 00 00 08 00 00 00 00 00 00 00 07", Frame(ACQUIRED, 0, token=7)),
            ("82 01 00 00", Frame(WAITING, 1)),
            ("ff 00 00 0d 13 6c 6f 63 6b 20 69 73 20 68 65 6c 64", Frame(ERROR, 0, code=0x13, message="lock is held")),
            ("ff 00 00 0c 24 73 68 61 72 64 20 67 61 6d 6d 61", Frame(ERROR, 0, code=0x24, message="shard gamma")),
            ("ff 00 00 0b 14 6c 6f 63 6b 2d 64 65 6c 61 79", Frame(ERROR, 0, code=0x14, message="lock-delay")),
            ("81 00 00 08 00 00 01 00 00 00 00 05", Frame(ACQUIRED, 0, token=2**40 + 5)),
            ("81 05 00 08 00 00 00 00 00 00 00 09", Frame(ACQUIRED, 0x05, token=9)),  # REPLY and RECLAIMABLE
            ("ff 04 00 01 01", Frame(ERROR, 0x04, code=0x01)),  # SHUTTING_DOWN with RECLAIM
        ]
        for hexa, want in cases:
            self.assertEqual(Reader().push(h(hexa)), [want], hexa)

    def test_split_and_coalesced(self):
        stream = h("82 01 00 00 81 00 00 08 00 00 00 00 00 00 00 02 81 01 00 08 00 00 00 00 00 00 00 02")
        want = [Frame(WAITING, 1), Frame(ACQUIRED, 0, token=2), Frame(ACQUIRED, 1, token=2)]
        r = Reader()
        got = []
        for i in range(len(stream)):
            got += r.push(stream[i : i + 1])
        self.assertEqual(got, want)
        self.assertEqual(Reader().push(stream), want)

    def test_rejects(self):
        for hexa in ["81 01 00 07", "82 01 00 01", "ff 00 00 00", "07 00 00 00"]:
            with self.assertRaises(ProtocolViolation, msg=hexa):
                Reader().push(h(hexa))
        with self.assertRaises(SpeaksTLS):
            Reader().push(h("15 03 03 00 02"))
        with self.assertRaises(SpeaksHTTP):
            Reader().push(b"HTTP/1.1 400 Bad Request\r\n")


class SemaphoreVectors(unittest.TestCase):
    """ACQUIRE with LIMIT (0x04: a u16 limit at body offset 6, name_length at 8) and SHARED
    (0x02), ACQUIRED with FLAG_SLOT (0x02: token, then a u16 slot): the vectors of
    docs/protocol.md section 9, and more whose bytes were checked against the server's own
    encoder (src/protocol encodeAcquire, encodeAcquiredSlot)."""

    def test_protocol_md_vectors(self):
        self.assertEqual(encode_acquire("jobs/nightly", "", 5000, limit=3), h("01 00 00 16 01 04 00 00 13 88 00 03 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"))
        self.assertEqual(encode_acquire("jobs/nightly", "", 5000, try_=True, shared=True), h("01 00 00 14 01 03 00 00 13 88 00 0c 6a 6f 62 73 2f 6e 69 67 68 74 6c 79"))
        self.assertEqual(Reader().push(h("81 03 00 0a 00 00 00 00 00 00 00 01 00 00")), [Frame(ACQUIRED, 3, token=1, slot=0)])
        self.assertEqual(Reader().push(h("81 02 00 0a 00 00 00 00 00 00 00 09 00 02")), [Frame(ACQUIRED, 2, token=9, slot=2)])
        self.assertEqual(Reader().push(h("ff 00 00 0f 25 6c 69 6d 69 74 20 33 2c 20 6e 6f 74 20 35")), [Frame(ERROR, 0, code=0x25, message="limit 3, not 5")])

    def test_encode(self):
        self.assertEqual(
            encode_acquire("jobs/render", "host-12/pid-4411", 5000, limit=3),
            h("01 00 00 25 01 04 00 00 13 88 00 03 00 0b 6a 6f 62 73 2f 72 65 6e 64 65 72 68 6f 73 74 2d 31 32 2f 70 69 64 2d 34 34 31 31"),
        )
        self.assertEqual(encode_acquire("jobs/render", "", 5000, try_=True, limit=65535), h("01 00 00 15 01 05 00 00 13 88 ff ff 00 0b 6a 6f 62 73 2f 72 65 6e 64 65 72"))
        self.assertEqual(encode_acquire("config", "", 5000, shared=True), h("01 00 00 0e 01 02 00 00 13 88 00 06 63 6f 6e 66 69 67"))
        self.assertEqual(encode_acquire("config", "r", 5000, try_=True, limit=1, shared=True), h("01 00 00 0f 01 03 00 00 13 88 00 06 63 6f 6e 66 69 67 72"))
        # limit 1 is sent without the LIMIT option: the bytes of an exclusive claim
        self.assertEqual(encode_acquire("jobs/nightly", "", 5000, limit=1), encode_acquire("jobs/nightly", "", 5000))

    def test_encode_refuses(self):
        for limit, shared in [(0, False), (65536, False), (-1, False), (2.0, False), (True, False), (None, False), (2, True), (65535, True), (1, "yes")]:
            with self.assertRaises(ValueError, msg=(limit, shared)):
                encode_acquire("x", "", 5000, limit=limit, shared=shared)  # type: ignore[arg-type]

    def test_decode(self):
        cases = [
            ("81 03 00 0a 00 00 00 00 00 00 00 07 00 02", Frame(ACQUIRED, 3, token=7, slot=2)),
            ("81 02 00 0a 00 00 01 00 00 00 00 05 ff fe", Frame(ACQUIRED, 2, token=2**40 + 5, slot=65534)),
            ("81 02 00 0a 00 00 00 00 00 00 00 01 00 00", Frame(ACQUIRED, 2, token=1, slot=0)),
        ]
        for hexa, want in cases:
            self.assertEqual(Reader().push(h(hexa)), [want], hexa)
        self.assertIsNone(Reader().push(h("81 01 00 08 00 00 00 00 00 00 00 01"))[0].slot)
        stream = h("82 01 00 00 81 02 00 0a 00 00 00 00 00 00 00 04 00 01 81 03 00 0a 00 00 00 00 00 00 00 04 00 01")
        r, got = Reader(), []
        for i in range(len(stream)):
            got += r.push(stream[i : i + 1])
        self.assertEqual(got, [Frame(WAITING, 1), Frame(ACQUIRED, 2, token=4, slot=1), Frame(ACQUIRED, 3, token=4, slot=1)])

    def test_rejects(self):
        for hexa in [
            "81 03 00 08 00 00 00 00 00 00 00 07",  # FLAG_SLOT without the slot
            "81 01 00 0a 00 00 00 00 00 00 00 07 00 02",  # a slot without FLAG_SLOT
            "81 03 00 09 00 00 00 00 00 00 00 07 00",
            "81 03 00 0b",
        ]:
            with self.assertRaises(ProtocolViolation, msg=hexa):
                Reader().push(h(hexa))

    def test_limit_mismatch(self):
        self.assertEqual((code_name(0x25), class_of_code(0x25)), ("LIMIT_MISMATCH", "client"))
        self.assertEqual((code_name(0x15), class_of_code(0x15)), ("RECLAIM_REFUSED", "lock"))
        e = server_error("jobs/render", 0x25, "limits 3 and 2", limit=2)
        self.assertIsInstance(e, LimitMismatchError)
        self.assertIsInstance(e, LockRequestError)
        self.assertEqual((e.code, e.error_class, e.server_code, e.server_message, e.limit, e.shared), ("LIMIT_MISMATCH", "client", 0x25, "limits 3 and 2", 2, False))
        self.assertEqual(str(e), "lock 'jobs/render': this claim with limit 2 was refused (LIMIT_MISMATCH): limits 3 and 2")


class Schedule(unittest.TestCase):
    def test_table(self):
        for lease, rtt, interval, timeout in [(5.0, 0, 1.25, 4.0), (5.0, 0.01, 1.23, 4.0), (1.0, 0.05, 0.15, 0.8), (1.0, 0.2, 0.001, 0.8), (0.002, 0, 0.0005, 0.0016)]:
            self.assertAlmostEqual(heartbeat_interval(lease, rtt), interval)
            self.assertAlmostEqual(client_timeout(lease), timeout)
        self.assertAlmostEqual(smooth_rtt(0.010, 0.020), 0.012)
        self.assertEqual(smooth_rtt(None, 0.007), 0.007)

    def test_classes(self):
        self.assertEqual([class_of_code(c) for c in (0x01, 0x12, 0x21, 0x35)], ["server", "lock", "client", "client"])
        self.assertIsInstance(server_error("x", 0x13, "lock is held"), LockBusyError)
        delayed = server_error("x", 0x14, "lock-delay: no grant for another 1800 ms")
        self.assertIsInstance(delayed, LockDelayedError)
        self.assertIsInstance(delayed, LockError)
        self.assertNotIsInstance(delayed, LockBusyError)
        self.assertEqual((delayed.code, delayed.error_class, delayed.server_code, delayed.server_message), ("LOCK_DELAYED", "lock", 0x14, "lock-delay: no grant for another 1800 ms"))
        self.assertEqual(str(delayed), "lock 'x' is held back by a lock-delay: lock-delay: no grant for another 1800 ms")
        self.assertEqual(str(server_error("x", 0x14, "")), "lock 'x' is held back by a lock-delay")
        kicked = server_error("x", 0x12, "removed")
        self.assertIsInstance(kicked, LockRequestError)
        self.assertEqual((kicked.code, kicked.error_class), ("KICKED", "lock"))


if __name__ == "__main__":
    unittest.main()
