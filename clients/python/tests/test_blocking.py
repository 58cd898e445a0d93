"""The blocking API against a scripted server on 127.0.0.1:0 that grants and then goes silent."""
import queue
import socket
import threading
import unittest

from lockd import Client, LockBusyError, LockDelayedError, LockError, LockLostError, ServerUnavailableError
from lockd.client import first_connect_retried


def refused_addr() -> str:
    """An address on 127.0.0.1 where nothing listens: a connect is refused."""
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


def silent_after_grant():
    """Grant the first ACQUIRE with token 3, answer nothing after; report the HEARTBEATs seen before the close."""
    listener = socket.create_server(("127.0.0.1", 0))
    heartbeats: queue.Queue = queue.Queue()

    def serve():
        conn, _ = listener.accept()
        with conn:
            buf, count = b"", -1
            while True:
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    heartbeats.put(count)
                    return
                buf += chunk
                while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[2:4], "big"):
                    buf = buf[4 + int.from_bytes(buf[2:4], "big") :]
                    if count == -1:
                        conn.sendall(bytes.fromhex("81 01 00 08 00 00 00 00 00 00 00 03"))
                    count += 1

    threading.Thread(target=serve, daemon=True).start()
    return listener, heartbeats


def answers_every_acquire(answer: bytes):
    """Answer each connection's ACQUIRE with ``answer`` and close; report each ACQUIRE's options byte (bit 0: TRY)."""
    listener = socket.create_server(("127.0.0.1", 0))
    options: queue.Queue = queue.Queue()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[2:4], "big"):
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
            options.put(buf[5])
            conn.sendall(answer)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, options


def error_frame(code: int, message: str) -> bytes:
    body = bytes([code]) + message.encode()
    return bytes([0xFF, 0]) + len(body).to_bytes(2, "big") + body


# Long enough that the first HEARTBEAT (at lease/4) goes out before the loss (at
# 0.8 x lease) however this process is scheduled: with 0.2 s, a loaded machine
# that held it up for over ~110 ms made it lose with no heartbeat sent.
TEST_LEASE = 1.0


class Blocking(unittest.TestCase):
    def test_silent_server_is_given_up_with_one_heartbeat_in_flight(self):
        listener, heartbeats = silent_after_grant()
        self.addCleanup(listener.close)
        client = Client(f"127.0.0.1:{listener.getsockname()[1]}")
        with client.lock("jobs/x", lease=TEST_LEASE) as lock:
            self.assertEqual(lock.token, 3)
            self.assertTrue(lock.lost.wait(5), "lock.lost was not set")
            self.assertEqual(lock.error.why, "unconfirmed")
            self.assertFalse(lock.held)
        self.assertEqual(heartbeats.get(timeout=5), 1)

    def test_with_lock_raises_the_loss(self):
        listener, _ = silent_after_grant()
        self.addCleanup(listener.close)
        client = Client(f"127.0.0.1:{listener.getsockname()[1]}")
        with self.assertRaises(LockLostError):
            client.with_lock("jobs/y", lambda lock: lock.lost.wait(5), lease=TEST_LEASE)

    def test_refused_addresses_are_unavailable(self):
        # Before any server answered, a claim that may not wait (a try, or one address
        # without a wait), or one that opted out, tries each address once.
        addr = refused_addr()
        for servers, setting, options in [
            (addr, None, {}),
            (f"{addr},{addr}", None, {"try_": True}),
            (addr, None, {"try_": True, "wait": 20}),
            (f"{addr},{addr}", False, {"wait": 20}),
        ]:
            backoffs = []
            with self.subTest(servers=servers, setting=setting, options=options):
                with self.assertRaises(ServerUnavailableError):
                    Client(servers, retry_first_connect=setting).acquire("x", on_retry=lambda _d, _p, b: b and backoffs.append(b), **options)
                self.assertEqual(backoffs, [])

    def test_first_connect_rule(self):
        # The rule of docs/clients.md, "Retrying the first connect": setting, try, wait, addresses.
        for setting, try_, wait, addresses, want in [
            (None, False, 20, 1, True),
            (None, False, None, 2, True),
            (None, False, 20, 2, True),
            (None, False, None, 1, False),
            (None, False, 0, 1, False),
            (None, True, None, 2, False),
            (None, True, 20, 1, False),
            (True, True, None, 1, True),
            (True, False, None, 1, True),
            (False, False, 20, 2, False),
        ]:
            self.assertEqual(first_connect_retried(setting, try_, wait, addresses), want, (setting, try_, wait, addresses))

    def test_a_wait_outlasts_a_refusing_server(self):
        # By default a claim with a wait waits out a server that refuses connections
        # (restarting, or failing over), and is granted once it listens.
        addr = refused_addr()
        backoff = threading.Event()
        result: queue.Queue = queue.Queue()

        def claim() -> None:
            try:
                result.put(Client(addr).acquire("x", lease=5, wait=20, on_retry=lambda _d, _p, b: b and backoff.set()))
            except Exception as e:  # reported to the test thread
                result.put(e)

        threading.Thread(target=claim, daemon=True).start()
        self.assertTrue(backoff.wait(10), "no retry within 10 s")  # refused at least once, and waiting
        self.assertTrue(result.empty(), "ended before the server came up")
        host, port = addr.rsplit(":", 1)
        listener = socket.create_server((host, int(port)))
        self.addCleanup(listener.close)

        def grant() -> None:
            conn, _ = listener.accept()
            with conn:
                buf = b""
                while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[2:4], "big"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buf += chunk
                conn.sendall(bytes.fromhex("81 01 00 08 00 00 00 00 00 00 00 09"))
                while conn.recv(4096):  # until the client closes (release)
                    pass

        threading.Thread(target=grant, daemon=True).start()
        lock = result.get(timeout=10)
        self.assertNotIsInstance(lock, Exception)
        self.assertEqual(lock.token, 9)
        lock.release()

    def test_lock_delayed_ends_a_try_claim_and_is_not_retried(self):
        message = "lock-delay: an earlier server's holder may still believe it holds this lock; no grant for another 1800 ms"
        delayed, options = answers_every_acquire(error_frame(0x14, message))
        self.addCleanup(delayed.close)
        granting, _ = answers_every_acquire(bytes.fromhex("81 01 00 08 00 00 00 00 00 00 00 09"))
        self.addCleanup(granting.close)
        servers = f"127.0.0.1:{delayed.getsockname()[1]},127.0.0.1:{granting.getsockname()[1]}"
        client = Client(servers, retry_first_connect=True)
        with self.assertRaises(LockDelayedError) as caught:
            client.acquire("jobs/delayed", lease=2, try_=True).release()  # a grant: it moved on to the next address
        e = caught.exception
        self.assertIsInstance(e, LockError)
        self.assertNotIsInstance(e, LockBusyError)
        self.assertEqual((e.code, e.error_class, e.server_code, e.server_message, e.lock), ("LOCK_DELAYED", "lock", 0x14, message, "jobs/delayed"))
        self.assertIn("no grant for another 1800 ms", str(e))
        self.assertEqual(options.get(timeout=5) & 0x01, 0x01, "the ACQUIRE was not a TRY")


if __name__ == "__main__":
    unittest.main()
