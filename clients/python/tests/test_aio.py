"""The asyncio API against a scripted server on 127.0.0.1:0: a loss cancels the work task at once."""
import asyncio
import socket
import threading
import unittest

from lockd import LockLostError
from lockd.aio import AsyncClient

GRANT = bytes.fromhex("81 01 00 08 00 00 00 00 00 00 00 05")
SHUTTING_DOWN = bytes([0xFF, 0, 0, 5, 0x01]) + b"bye!"


def frames(conn: socket.socket):
    """Each whole frame the client sends on ``conn``, until it closes."""
    buf = b""
    while True:
        try:
            chunk = conn.recv(4096)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[2:4], "big"):
            n = 4 + int.from_bytes(buf[2:4], "big")
            frame, buf = buf[:n], buf[n:]
            yield frame


class ScriptedServer:
    """Grants the first ACQUIRE with token 5, answers heartbeats, and sends SHUTTING_DOWN on shutdown()."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conn: socket.socket | None = None
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        self.conn = conn
        self.connected.set()
        for _ in frames(conn):
            try:
                conn.sendall(GRANT)
            except OSError:
                return

    def shutdown(self) -> None:
        assert self.conn is not None
        self.conn.sendall(SHUTTING_DOWN)
        self.conn.close()

    def close(self) -> None:
        self.listener.close()


class AsyncLoss(unittest.IsolatedAsyncioTestCase):
    async def test_work_task_cancelled_on_loss(self):
        server = ScriptedServer()
        self.addCleanup(server.close)
        client = AsyncClient(f"127.0.0.1:{server.port}")
        cancelled = asyncio.Event()
        held = []

        async def body():
            async with client.lock("jobs/x", lease=5) as lock:
                held.append(lock)
                self.assertEqual(lock.token, 5)
                server.shutdown()
                try:
                    await asyncio.Event().wait()  # work that never ends by itself
                except asyncio.CancelledError:
                    cancelled.set()
                    raise

        task = asyncio.create_task(body())
        timed_out = []
        guard = asyncio.get_running_loop().call_later(10, lambda: (timed_out.append(True), task.cancel()))
        with self.assertRaises(LockLostError) as caught:
            await task
        guard.cancel()
        self.assertEqual(timed_out, [], "the work task was not cancelled by the loss")
        lock = held[0]
        self.assertTrue(cancelled.is_set())
        self.assertEqual((caught.exception.why, caught.exception.server_code), ("server-error", 0x01))
        self.assertTrue(lock.lost.is_set())
        self.assertFalse(lock.held)

    async def test_with_lock_returns_and_releases(self):
        server = ScriptedServer()
        self.addCleanup(server.close)
        client = AsyncClient(f"127.0.0.1:{server.port}")

        async def work(lock):
            return lock.token * 2

        async with asyncio.timeout(10):
            self.assertEqual(await client.with_lock("jobs/y", work, lease=5), 10)


WAITING = bytes([0x82, 0x01, 0x00, 0x00])


class WaitingServer:
    """Every connection's frames are answered WAITING, except a claim of a name with "free"
    in it, answered with a grant (token 5); calls ``on_waiting`` (from its threads) each time
    a connection is first told WAITING."""

    def __init__(self, on_waiting) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        self.on_waiting = on_waiting
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        free, told = None, False
        for frame in frames(conn):
            if free is None:
                free = b"free" in frame
            try:
                conn.sendall(GRANT if free else WAITING)
            except OSError:
                return
            if not free and not told:
                told = True
                self.on_waiting()

    def close(self) -> None:
        self.listener.close()
        for conn in self.conns:
            conn.close()


class ManyWaiting(unittest.IsolatedAsyncioTestCase):
    async def test_waiting_claims_do_not_hold_up_other_claims_or_their_cancellation(self):
        # 40 claims waiting: more than the loop's default executor has threads (min(32, CPUs + 4)),
        # where claims used to wait, so that a claim of a free lock queued behind them and hung.
        loop = asyncio.get_running_loop()
        all_waiting = asyncio.Event()
        told = []

        def on_waiting() -> None:
            def count() -> None:
                told.append(1)
                if len(told) == 40:
                    all_waiting.set()
            loop.call_soon_threadsafe(count)

        server = WaitingServer(on_waiting)
        self.addCleanup(server.close)
        client = AsyncClient(f"127.0.0.1:{server.port}")
        waiters = [asyncio.create_task(client.acquire("busy", lease=60)) for _ in range(40)]
        async with asyncio.timeout(10):
            await all_waiting.wait()
        free = asyncio.create_task(client.acquire("free", lease=60))
        done, _ = await asyncio.wait({free}, timeout=10)
        self.assertEqual(done, {free}, "the claim of a free lock waited behind the waiting claims")
        lock = free.result()
        self.assertEqual(lock.token, 5)
        lock.release()
        for waiter in waiters:
            waiter.cancel()
        done, _ = await asyncio.wait(waiters, timeout=10)
        self.assertEqual(len(done), 40, "cancelled claims did not end")
        self.assertTrue(all(w.cancelled() for w in waiters))


class Orphans(unittest.IsolatedAsyncioTestCase):
    async def test_a_result_nobody_takes_goes_to_orphan(self):
        # A claim granted after its future was cancelled (a second cancellation while the
        # cancelled claim winds down) must be released, not left held by its session thread.
        from lockd.aio import _in_thread

        go, orphaned = threading.Event(), threading.Event()
        got = []

        def claim():
            go.wait(10)
            return "granted lock"

        def orphan(value):
            got.append(value)
            orphaned.set()

        future = _in_thread(claim, orphan=orphan)
        future.cancel()
        go.set()
        for _ in range(200):  # the worker hands its result to the loop, which hands it to orphan's thread
            if orphaned.is_set():
                break
            await asyncio.sleep(0.01)
        self.assertEqual(got, ["granted lock"])


if __name__ == "__main__":
    unittest.main()
