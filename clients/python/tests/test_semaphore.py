"""Semaphores and shared claims (``limit``, ``shared``, ``lock.slot``) against scripted servers
on 127.0.0.1:0: what the client sends, the strict checks of every ACQUIRED's slot, the local
refusals, LIMIT_MISMATCH (never retried), in the blocking and the asyncio API."""
import asyncio
import queue
import socket
import threading
import unittest

from lockd import Client, LimitMismatchError, LockError, LockRequestError
from lockd.aio import AsyncClient

TEST_LEASE = 1.0  # heartbeats every ~0.25 s, given up at 0.8 s unanswered


def acquired(token: int, slot: int | None = None, reply: bool = True) -> bytes:
    flags = (0x01 if reply else 0) | (0x02 if slot is not None else 0)
    body = token.to_bytes(8, "big") + (slot.to_bytes(2, "big") if slot is not None else b"")
    return bytes([0x81, flags, 0, len(body)]) + body


WAITING = bytes.fromhex("82 01 00 00")


def error_frame(code: int, message: str) -> bytes:
    body = bytes([code]) + message.encode()
    return bytes([0xFF, 0]) + len(body).to_bytes(2, "big") + body


class Scripted:
    """A server answering each connection's frames from ``script(index, frame)``: the bytes to
    send back (b'' for nothing; None closes). Every frame received goes to ``frames``
    as (connection number, index, bytes); each accept to ``accepted``."""

    def __init__(self, script) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frames: queue.Queue = queue.Queue()
        self.accepted: queue.Queue = queue.Queue()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        n = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.put(n)
            threading.Thread(target=self._serve, args=(conn, n), daemon=True).start()
            n += 1

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn:
            buf, index = b"", 0
            while True:
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[2:4], "big"):
                    size = 4 + int.from_bytes(buf[2:4], "big")
                    frame, buf = buf[:size], buf[size:]
                    self.frames.put((number, index, frame))
                    answer = self.script(index, frame)
                    index += 1
                    try:
                        if answer is None:
                            return
                        if answer:
                            conn.sendall(answer)
                    except OSError:
                        return

    def frame(self, index: int) -> bytes:
        """The frame number ``index`` of the first connection (waits, bounded)."""
        while True:
            _, i, frame = self.frames.get(timeout=5)
            if i == index:
                return frame

    def close(self) -> None:
        self.listener.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


def grants(first: bytes, heartbeat=lambda i: b"") -> "callable":
    """Answer the ACQUIRE with ``first`` and HEARTBEAT number i (1, 2, ...) with ``heartbeat(i)``."""
    return lambda index, frame: first if index == 0 else heartbeat(index)


class Sends(unittest.TestCase):
    def server(self, script) -> Scripted:
        s = Scripted(script)
        self.addCleanup(s.close)
        return s

    def test_a_semaphore_claim_sends_limit_and_holds_its_slot_through_heartbeats(self):
        s = self.server(grants(acquired(41, 2), lambda i: acquired(41, 2)))
        with Client(s.address, owner="w1").lock("jobs/render", lease=TEST_LEASE, limit=3) as lock:
            acquire = s.frame(0)
            # options LIMIT (0x04), lease 1000 ms, limit 3 at body offset 6, name_length at 8
            self.assertEqual(acquire, bytes.fromhex("01 00 00 17 01 04 00 00 03 e8 00 03 00 0b") + b"jobs/renderw1")
            self.assertEqual((lock.token, lock.slot, lock.limit, lock.shared), (41, 2, 3, False))
            self.assertEqual(s.frame(2), bytes.fromhex("02 00 00 00"))  # two heartbeats answered with the same slot
            self.assertTrue(lock.held)
            self.assertIsNone(lock.error)

    def test_limit_1_sends_the_bytes_of_an_exclusive_claim_and_has_no_slot(self):
        s = self.server(grants(acquired(5)))
        with Client(s.address, owner="o").lock("jobs/nightly", lease=5, limit=1) as lock:
            self.assertEqual(s.frame(0), bytes.fromhex("01 00 00 15 01 00 00 00 13 88 00 0c") + b"jobs/nightlyo")
            self.assertEqual((lock.slot, lock.limit, lock.shared), (None, 1, False))

    def test_a_shared_claim_sends_shared_without_limit(self):
        s = self.server(grants(acquired(6)))
        with Client(s.address, owner="r").lock("config", lease=5, shared=True, try_=True) as lock:
            self.assertEqual(s.frame(0), bytes.fromhex("01 00 00 0f 01 03 00 00 13 88 00 06") + b"configr")
            self.assertEqual((lock.token, lock.slot, lock.limit, lock.shared), (6, None, 1, True))

    def test_a_promotion_push_carries_the_slot(self):
        s = self.server(lambda index, frame: WAITING + acquired(12, 0, reply=False) if index == 0 else acquired(12, 0))
        with Client(s.address).lock("jobs/render", lease=5, limit=2) as lock:
            self.assertEqual((lock.token, lock.slot), (12, 0))


class StrictSlots(unittest.TestCase):
    """Every ACQUIRED of a claim with limit above 1 carries a slot below the limit, the same
    on every heartbeat's answer; limit 1 never has one. Anything else is a broken server."""

    def server(self, script) -> Scripted:
        s = Scripted(script)
        self.addCleanup(s.close)
        return s

    def assert_violation(self, grant: bytes, limit: int, shared: bool = False, wants: str = "") -> None:
        s = self.server(grants(grant))
        with self.assertRaises(LockRequestError) as caught:
            Client(s.address).acquire("jobs/render", lease=5, limit=limit, shared=shared).release()
        e = caught.exception
        self.assertEqual((e.code, e.error_class, e.server_code), ("PROTOCOL_VIOLATION", "client", None))
        self.assertIn(wants, str(e))

    def test_a_semaphore_grant_without_a_slot(self):
        self.assert_violation(acquired(3), 3, wants="without a slot")

    def test_a_slot_not_below_the_limit(self):
        self.assert_violation(acquired(3, 3), 3, wants="slot 3, not below the claim's limit 3")

    def test_a_slot_for_limit_1(self):
        self.assert_violation(acquired(3, 0), 1, wants="slot 0 for a claim with limit 1")
        self.assert_violation(acquired(3, 0), 1, shared=True, wants="slot 0 for a claim with limit 1")

    def test_the_flag_and_the_length_disagree(self):
        self.assert_violation(bytes([0x81, 0x03, 0, 8]) + (3).to_bytes(8, "big"), 3, wants="FLAG_SLOT goes with 10 bytes")
        self.assert_violation(bytes([0x81, 0x01, 0, 10]) + (3).to_bytes(8, "big") + b"\0\1", 3, wants="FLAG_SLOT goes with 10 bytes")

    def assert_lost(self, heartbeat_answer: bytes, wants: str) -> None:
        s = self.server(grants(acquired(8, 1), lambda i: heartbeat_answer))
        lock = Client(s.address).acquire("jobs/render", lease=TEST_LEASE, limit=2)
        self.addCleanup(lock.release)
        self.assertTrue(lock.lost.wait(5), "the lock was not lost")
        self.assertEqual(lock.error.why, "protocol")
        self.assertIn(wants, str(lock.error))
        self.assertFalse(lock.held)

    def test_a_heartbeat_answer_with_another_slot_loses_the_lock(self):
        self.assert_lost(acquired(8, 0), "ACQUIRED with token 8 slot 0 (held token 8 slot 1)")

    def test_a_heartbeat_answer_with_another_token_loses_the_lock(self):
        self.assert_lost(acquired(9, 1), "ACQUIRED with token 9 slot 1 (held token 8 slot 1)")

    def test_a_heartbeat_answer_without_the_slot_loses_the_lock(self):
        self.assert_lost(acquired(8), "without a slot")


class Refusals(unittest.TestCase):
    def test_bad_limits_and_shared_semaphores_are_refused_without_connecting(self):
        listener = socket.create_server(("127.0.0.1", 0))  # never accepted, never answers
        self.addCleanup(listener.close)
        client = Client(f"127.0.0.1:{listener.getsockname()[1]}")
        cases = [
            ({"limit": 0}, "limit must be a whole number 1 .. 65535, got 0"),
            ({"limit": 65536}, "got 65536"),
            ({"limit": 2.0}, "got 2.0"),
            ({"limit": True}, "got True"),
            ({"limit": "3"}, "got '3'"),
            ({"shared": 1}, "shared must be True or False"),
            ({"shared": True, "limit": 3}, "a shared claim has limit 1, got limit 3"),
        ]
        for options, wants in cases:
            with self.assertRaises(LockRequestError, msg=options) as caught:
                client.acquire("jobs/render", lease=5, **options)
            e = caught.exception
            self.assertEqual((e.code, e.error_class, e.server_code), ("BAD_REQUEST", "client", None), options)
            self.assertIn(wants, str(e))
        listener.settimeout(0)
        with self.assertRaises(BlockingIOError):
            listener.accept()  # nothing connected

    def test_limit_mismatch_is_not_retried_on_the_next_address(self):
        message = "this name's live sessions claim it with limit 3 (a semaphore); this claim asked for limit 2 (a semaphore): every session of a name must use the same limit"
        refusing = Scripted(grants(error_frame(0x25, message)))
        self.addCleanup(refusing.close)
        granting = Scripted(grants(acquired(9, 0)))
        self.addCleanup(granting.close)
        client = Client(f"{refusing.address},{granting.address}", retry_first_connect=True)
        with self.assertRaises(LimitMismatchError) as caught:
            client.acquire("jobs/render", lease=5, limit=2).release()
        e = caught.exception
        self.assertIsInstance(e, LockRequestError)
        self.assertIsInstance(e, LockError)
        self.assertEqual((e.code, e.error_class, e.server_code, e.server_message, e.lock, e.limit, e.shared), ("LIMIT_MISMATCH", "client", 0x25, message, "jobs/render", 2, False))
        self.assertIn("limit 3 (a semaphore)", str(e))
        self.assertIn("this claim with limit 2", str(e))
        self.assertEqual(refusing.accepted.get(timeout=5), 0)
        self.assertTrue(granting.accepted.empty(), "LIMIT_MISMATCH was retried on the next address")


class Async(unittest.IsolatedAsyncioTestCase):
    async def test_limit_slot_and_refusals_through_asyncio(self):
        s = Scripted(grants(acquired(21, 1), lambda i: acquired(21, 1)))
        self.addCleanup(s.close)
        client = AsyncClient(s.address)
        async with client.lock("jobs/render", lease=5, limit=4) as lock:
            self.assertEqual((lock.token, lock.slot, lock.limit), (21, 1, 4))
        self.assertEqual(s.frame(0)[5], 0x04)
        with self.assertRaises(LockRequestError) as caught:
            await client.acquire("jobs/render", shared=True, limit=4)
        self.assertEqual(caught.exception.code, "BAD_REQUEST")
        self.assertTrue(s.accepted.get(timeout=5) == 0 and s.accepted.empty(), "the refused claim connected")

    async def test_limit_mismatch_through_asyncio(self):
        s = Scripted(grants(error_frame(0x25, "limit 1 (an exclusive or shared lock)")))
        self.addCleanup(s.close)
        with self.assertRaises(LimitMismatchError) as caught:
            await AsyncClient(s.address).acquire("config", shared=True)
        self.assertEqual((caught.exception.limit, caught.exception.shared), (1, True))
        self.assertIn("this shared claim with limit 1", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
