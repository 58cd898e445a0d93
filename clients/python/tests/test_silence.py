"""Reclaim on silence (docs/protocol.md section 14.3) against scripted servers on 127.0.0.1:0:
a held lock whose grant had RECLAIMABLE and whose HEARTBEAT goes unanswered for lease/4 keeps
its connection and reclaims on a second one (the next address of its list, wrapping). The
same token there reclaims it (the old connection is closed, heartbeats go on on the new
one); an answer on the old connection ends the silence (the reclaim's connection is
closed); any other outcome fails only that attempt (tried again, paced); the deadline does
not move; an EOF on the old connection is a loss, never a reason to reclaim."""
import asyncio
import queue
import socket
import threading
import time
import unittest

from lockd import Client, LockLostError
from lockd.aio import AsyncClient
from lockd.frames import OPTION_LIMIT, OPTION_RECLAIM, encode_acquire

from .test_blocking import error_frame, refused_addr
from .test_reclaim import TOKEN, acquired, shutting_down

WAIT = 5.0  # every wait on an event is bounded
LEASE = 2.0  # silence at lease/4 after the unanswered HEARTBEAT's send, about 0.6 s before the deadline
SHORT_LEASE = 1.0  # for tests that only wait for the deadline


class SilenceServer:
    """A server with reclaim on. Connection ids count accepts from 1. A fresh ACQUIRE gets
    ACQUIRED with REPLY (and RECLAIMABLE unless ``flagged`` is False), token 9 (in ``slot`` if
    given); each HEARTBEAT is answered likewise, unless its connection was made silent
    (``silence(cid)``): then it is only recorded (kept open, unanswered) until ``answer(cid)``
    answers the pending one and ends the silence. A reclaim (ACQUIRE with RECLAIM) is answered
    as ``reclaims`` says: "grant" (its token: the connection is then a holder's, answered as
    any), "refuse" (RECLAIM_REFUSED and the close), "other" (another token), "hold" (kept
    unanswered, until ``grant_held(cid)`` or ``refuse_held(cid)``). ``events`` gets
    ("acquire" | "reclaim", cid, frame), ("heartbeat", cid, answered) and ("eof", cid)."""

    def __init__(self, reclaims: str = "grant", flagged: bool = True, slot: int | None = None) -> None:
        self.reclaims, self.flagged, self.slot = reclaims, flagged, slot
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.events: queue.Queue = queue.Queue()
        self.seen: list = []  # every event taken by next(), in order
        self.lock = threading.Lock()
        self.conns: dict[int, socket.socket] = {}
        self.silent: set[int] = set()
        self.pending: set[int] = set()  # silent connections with a HEARTBEAT unanswered
        self.held: dict[int, int] = {}  # cid -> token of a reclaim kept unanswered
        self.count = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.count += 1
                cid = self.count
                self.conns[cid] = conn
            threading.Thread(target=self._serve, args=(cid, conn), daemon=True).start()

    def _send(self, conn: socket.socket, data: bytes) -> None:
        try:
            conn.sendall(data)
        except OSError:
            pass

    def _serve(self, cid: int, conn: socket.socket) -> None:
        buf = b""
        while True:
            try:
                chunk = conn.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                self.events.put(("eof", cid))
                return
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[2:4], "big"):
                n = 4 + int.from_bytes(buf[2:4], "big")
                frame, buf = buf[:n], buf[n:]
                if frame[0] == 0x02:
                    with self.lock:
                        silent = cid in self.silent
                        if silent:
                            self.pending.add(cid)
                    if not silent:
                        self._send(conn, acquired(TOKEN, self.slot, self.flagged))
                    self.events.put(("heartbeat", cid, not silent))
                    continue
                if not frame[5] & OPTION_RECLAIM:
                    self._send(conn, acquired(TOKEN, self.slot, self.flagged))
                    self.events.put(("acquire", cid, frame))
                    continue
                at = 12 if frame[5] & OPTION_LIMIT else 10  # the header, version, options, lease_ms (and the limit)
                token = int.from_bytes(frame[at : at + 8], "big")
                answer = self.reclaims
                if answer == "hold":
                    with self.lock:
                        self.held[cid] = token
                self.events.put(("reclaim", cid, frame))
                if answer == "grant":
                    self._send(conn, acquired(token, self.slot, True))
                elif answer == "other":
                    self._send(conn, acquired(token + 1, self.slot, True))
                elif answer == "refuse":
                    self._send(conn, error_frame(0x15, "the name is served: not in a grace"))
                    conn.close()
                    self.events.put(("eof", cid))
                    return

    def silence(self, cid: int) -> None:
        with self.lock:
            self.silent.add(cid)

    def answer(self, cid: int) -> None:
        """End connection ``cid``'s silence: answer its pending HEARTBEAT, and every later one."""
        with self.lock:
            self.silent.discard(cid)
            pending = cid in self.pending
            self.pending.discard(cid)
            conn = self.conns[cid]
        if pending:
            self._send(conn, acquired(TOKEN, self.slot, self.flagged))

    def grant_held(self, cid: int) -> None:
        with self.lock:
            token, conn = self.held.pop(cid), self.conns[cid]
        self._send(conn, acquired(token, self.slot, True))

    def refuse_held(self, cid: int) -> None:
        with self.lock:
            self.held.pop(cid)
            conn = self.conns[cid]
        self._send(conn, error_frame(0x15, "no such grant was published"))

    def send(self, cid: int, data: bytes) -> None:
        with self.lock:
            conn = self.conns[cid]
        self._send(conn, data)

    def eof(self, cid: int) -> None:
        """Close connection ``cid`` without a word (a crash, a proxy's close)."""
        with self.lock:
            conn = self.conns[cid]
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def next(self, *kinds: str, cid: int | None = None):
        """The next event of one of ``kinds`` (and connection ``cid`` if given), waiting (bounded); others are kept in ``seen``."""
        end = time.monotonic() + WAIT
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kinds} event (cid {cid}) within {WAIT} s; seen {self.seen}")
            event = self.events.get(timeout=left)
            self.seen.append(event)
            if event[0] in kinds and (cid is None or event[1] == cid):
                return event

    def next_all_closed(self) -> None:
        """Wait (bounded) until every connection accepted so far has ended."""
        while True:
            ended = {e[1] for e in self.seen + self.drain() if e[0] == "eof"}
            if ended >= set(range(1, self.count + 1)):
                return
            self.next("eof")

    def drain(self) -> list:
        """Every event so far, without waiting."""
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                self.seen.extend(out)
                return out

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            conns = list(self.conns.values())
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


class Silence(unittest.TestCase):
    def server(self, **kw) -> SilenceServer:
        server = SilenceServer(**kw)
        self.addCleanup(server.close)
        return server

    def held(self, servers: str, lease: float = LEASE, **options):
        """A lock on ``servers``, its loss (error, monotonic time) and reclaims reported to queues."""
        losses: queue.Queue = queue.Queue()
        reclaims: queue.Queue = queue.Queue()
        lock = Client(servers, owner="holder-1").acquire("jobs/s", lease=lease, on_reclaim=reclaims.put, **options)
        self.addCleanup(lock.release)
        lock.on_lost(lambda e: losses.put((e, time.monotonic())))
        return lock, losses, reclaims

    def go_silent(self, server: SilenceServer, lock, cid: int = 1) -> float:
        """Make connection ``cid`` silent once a HEARTBEAT was answered on it (the grant's
        RECLAIMABLE seen again); wait for the first unanswered one. Returns the client's
        deadline then, which must not move."""
        server.next("heartbeat", cid=cid)
        server.silence(cid)
        while server.next("heartbeat", cid=cid)[2]:  # one answered just before the silence began
            pass
        return lock._session.confirmed_until()

    def assert_lost(self, lock, losses: queue.Queue, why: str, server_code: int | None = None) -> float:
        error, at = losses.get(timeout=WAIT)
        self.assertIsInstance(error, LockLostError)
        self.assertEqual(error.why, why, str(error))
        if server_code is not None:
            self.assertEqual(error.server_code, server_code, str(error))
        self.assertTrue(lock.lost.is_set())
        self.assertFalse(lock.held)
        self.assertFalse(lock.reclaiming)
        return at

    def test_a_healthy_connection_sends_no_reclaim(self):
        server = self.server()
        lock, losses, reclaims = self.held(server.addr, lease=SHORT_LEASE)
        for _ in range(6):  # heartbeats answered at once, over well past lease/4 and the deadline
            server.next("heartbeat", cid=1)
        self.assertNotIn("reclaim", [e[0] for e in server.drain()])
        self.assertEqual(server.count, 1, "a second connection was opened")
        self.assertFalse(lock.reclaiming)
        self.assertTrue(lock.held)
        self.assertTrue(losses.empty())

    def test_silence_is_reclaimed_on_a_second_connection_which_goes_on(self):
        # One address: the reclaim's connection goes to the same one (wrapping).
        server = self.server()
        lock, losses, reclaims = self.held(server.addr)
        server.next("acquire", cid=1)
        deadline = self.go_silent(server, lock)
        event = server.next("reclaim")
        self.assertNotEqual(event[1], 1, "the reclaim was sent on the silent connection")
        self.assertEqual(event[2], encode_acquire("jobs/s", "holder-1", round(LEASE * 1000), reclaim_token=TOKEN))
        self.assertIs(reclaims.get(timeout=WAIT), lock)
        server.next("eof", cid=1)  # the old connection closed by the client
        for _ in range(2):  # heartbeats go on on the new connection, answered
            self.assertTrue(server.next("heartbeat", cid=event[1])[2])
        self.assertEqual(lock.reclaims, 1)
        self.assertEqual(lock.token, TOKEN)
        self.assertTrue(lock.held)
        self.assertFalse(lock.reclaiming)
        self.assertGreater(lock._session.confirmed_until(), deadline, "the reclaim's grant did not confirm the lock again")
        self.assertTrue(losses.empty(), "the lock was lost")
        lock.release()
        self.assertEqual(lock.error.why, "released")
        server.next("eof", cid=event[1])
        self.assertTrue(reclaims.empty())

    def test_the_reclaim_goes_to_the_next_address_and_a_semaphore_keeps_its_slot(self):
        first, second = self.server(slot=1), self.server(slot=1)
        lock, losses, reclaims = self.held(f"{first.addr},{second.addr}", limit=2)
        self.assertEqual((lock.token, lock.slot), (TOKEN, 1))
        self.go_silent(first, lock)
        event = second.next("reclaim")
        self.assertEqual(event[2], encode_acquire("jobs/s", "holder-1", round(LEASE * 1000), limit=2, reclaim_token=TOKEN, reclaim_slot=1))
        self.assertIs(reclaims.get(timeout=WAIT), lock)
        first.next("eof", cid=1)
        self.assertTrue(second.next("heartbeat", cid=event[1])[2])
        self.assertEqual(lock.slot, 1)
        self.assertNotIn("reclaim", [e[0] for e in first.drain()])
        self.assertTrue(losses.empty())

    def test_an_answer_on_the_old_connection_ends_the_silence_after_refused_reclaims(self):
        server = self.server(reclaims="refuse")
        lock, losses, reclaims = self.held(server.addr)
        self.go_silent(server, lock)
        for _ in range(2):  # refused, and tried again (paced): a refusal fails only that attempt
            server.next("reclaim")
            self.assertTrue(lock.held)
            self.assertTrue(lock.reclaiming)
        server.answer(1)
        for _ in range(2):  # heartbeats go on on the old connection
            self.assertTrue(server.next("heartbeat", cid=1)[2])
        self.assertFalse(lock.reclaiming)
        self.assertTrue(lock.held)
        self.assertEqual(lock.reclaims, 0)
        self.assertTrue(reclaims.empty())
        self.assertTrue(losses.empty())
        # No attempt after the answer: every reclaim's connection has ended.
        reclaim_cids = {e[1] for e in server.seen + server.drain() if e[0] == "reclaim"}
        self.assertTrue(reclaim_cids)
        ended = {e[1] for e in server.seen if e[0] == "eof"}
        self.assertLessEqual(reclaim_cids, ended)

    def test_an_answer_on_the_old_connection_closes_the_reclaim_under_way(self):
        server = self.server(reclaims="hold")
        lock, losses, reclaims = self.held(server.addr)
        self.go_silent(server, lock)
        event = server.next("reclaim")
        server.answer(1)
        server.next("eof", cid=event[1])  # the client closed the reclaim's connection
        self.assertTrue(server.next("heartbeat", cid=1)[2])
        self.assertTrue(lock.held)
        self.assertFalse(lock.reclaiming)
        self.assertEqual(lock.reclaims, 0)
        self.assertTrue(losses.empty())
        self.assertTrue(reclaims.empty())

    def test_a_reclaim_not_answered_within_a_quarter_lease_is_given_up_for_the_next(self):
        # The first reclaim is never answered (a frozen server that still accepts): after lease/4
        # the client closes it and tries again; the second is granted. The attempt's lease/4
        # ends 0.05 x lease before the deadline: 300 ms here, for the pause and the next attempt.
        server = self.server(reclaims="hold")
        lock, losses, reclaims = self.held(server.addr, lease=6.0)
        self.go_silent(server, lock)
        first = server.next("reclaim")[1]
        server.reclaims = "grant"
        server.next("eof", cid=first)  # given up by the client
        self.assertTrue(lock.held, "the attempt was closed only by the loss")
        second = server.next("reclaim")[1]
        self.assertNotIn(second, (1, first))
        self.assertIs(reclaims.get(timeout=WAIT), lock)
        self.assertTrue(server.next("heartbeat", cid=second)[2])
        self.assertEqual(lock.reclaims, 1)
        self.assertTrue(losses.empty())

    def test_every_reclaim_refused_is_lost_at_the_unmoved_deadline(self):
        for answer in ("refuse", "other"):
            with self.subTest(answer=answer):
                server = self.server(reclaims=answer)
                lock, losses, reclaims = self.held(f"{server.addr},{refused_addr()}", lease=SHORT_LEASE)
                deadline = self.go_silent(server, lock)
                at = self.assert_lost(lock, losses, "unconfirmed")
                self.assertGreaterEqual(at, deadline, "lost before the deadline")
                self.assertEqual(lock._session.confirmed_until(), deadline, "the deadline moved")
                self.assertIn("not reclaimed on silence", str(lock.error))
                self.assertEqual(lock.reclaims, 0)
                self.assertTrue(reclaims.empty())
                self.assertIn("reclaim", [e[0] for e in server.seen + server.drain()])

    def test_no_reclaim_on_silence_for_an_unflagged_grant_or_with_reclaim_off(self):
        for flagged, reclaim in [(False, True), (True, False)]:
            with self.subTest(flagged=flagged, reclaim=reclaim):
                server = self.server(flagged=flagged)
                lock, losses, reclaims = self.held(server.addr, lease=SHORT_LEASE, reclaim=reclaim)
                deadline = self.go_silent(server, lock)
                self.assertFalse(lock.reclaiming)
                at = self.assert_lost(lock, losses, "unconfirmed")
                self.assertGreaterEqual(at, deadline)
                self.assertNotIn("on silence", str(lock.error))
                lock.release()
                server.next("eof", cid=1)
                self.assertNotIn("reclaim", [e[0] for e in server.seen + server.drain()])
                self.assertEqual(server.count, 1, "a second connection was opened")

    def test_an_eof_on_the_old_connection_while_reclaiming_is_lost_at_once(self):
        server = self.server(reclaims="refuse")
        lock, losses, reclaims = self.held(server.addr)
        deadline = self.go_silent(server, lock)
        server.next("reclaim")
        server.eof(1)
        at = self.assert_lost(lock, losses, "closed")
        self.assertLess(at, deadline, "not lost at once")
        # Nothing more is tried: the claim's thread, which alone sends reclaims, has ended, and
        # every connection it opened is closed (none is left to send or be granted one).
        lock._session.thread.join(WAIT)
        self.assertFalse(lock._session.thread.is_alive())
        server.next_all_closed()
        self.assertTrue(reclaims.empty())
        self.assertEqual(lock.reclaims, 0)

    def test_an_eof_on_the_old_connection_closes_the_reclaim_under_way(self):
        server = self.server(reclaims="hold")
        lock, losses, reclaims = self.held(server.addr)
        self.go_silent(server, lock)
        event = server.next("reclaim")
        server.eof(1)
        self.assert_lost(lock, losses, "closed")
        server.next("eof", cid=event[1])  # the client closed the reclaim's connection
        self.assertTrue(reclaims.empty())

    def test_shutting_down_with_reclaim_hands_the_attempt_under_way_to_the_clean_stop_reclaim(self):
        for grant in (True, False):
            with self.subTest(grant=grant):
                server = self.server(reclaims="hold")
                lock, losses, reclaims = self.held(server.addr)
                self.go_silent(server, lock)
                event = server.next("reclaim")
                server.send(1, shutting_down(True))
                server.next("eof", cid=1)  # the client closed the old connection
                self.assertTrue(lock.reclaiming)
                self.assertTrue(lock.held)
                if grant:
                    server.grant_held(event[1])
                    self.assertIs(reclaims.get(timeout=WAIT), lock)
                    self.assertTrue(server.next("heartbeat", cid=event[1])[2])
                    self.assertEqual(lock.reclaims, 1)
                    self.assertTrue(lock.held)
                    self.assertTrue(losses.empty())
                else:
                    # As the clean stop's reclaim it is judged by that rule: a refusal is a loss.
                    server.refuse_held(event[1])
                    self.assert_lost(lock, losses, "server-error", 0x15)
                    self.assertTrue(reclaims.empty())
                # The attempt went on as the reclaim: no second one.
                self.assertEqual([e[1] for e in server.seen + server.drain() if e[0] == "reclaim"], [event[1]])

    def test_silence_after_a_reclaim_on_silence_is_reclaimed_again(self):
        server = self.server()
        lock, losses, reclaims = self.held(server.addr)
        self.go_silent(server, lock)
        cid = server.next("reclaim")[1]
        self.assertIs(reclaims.get(timeout=WAIT), lock)
        self.go_silent(server, lock, cid)
        again = server.next("reclaim")[1]
        self.assertNotIn(again, (1, cid))
        self.assertIs(reclaims.get(timeout=WAIT), lock)
        server.next("eof", cid=cid)
        self.assertTrue(server.next("heartbeat", cid=again)[2])
        self.assertEqual(lock.reclaims, 2)
        self.assertTrue(losses.empty())

    def test_release_while_reclaiming_on_silence_closes_both_connections(self):
        server = self.server(reclaims="hold")
        lock, losses, reclaims = self.held(server.addr)
        self.go_silent(server, lock)
        event = server.next("reclaim")
        self.assertTrue(lock.reclaiming)
        lock.release()
        self.assertEqual(lock.error.why, "released")
        ended = {server.next("eof")[1], server.next("eof")[1]}
        self.assertEqual(ended, {1, event[1]})
        self.assertTrue(reclaims.empty())


class AsyncSilence(unittest.IsolatedAsyncioTestCase):
    async def test_the_work_task_runs_on_through_a_reclaim_on_silence(self):
        server = SilenceServer()
        self.addCleanup(server.close)
        loop = asyncio.get_running_loop()
        reclaimed = asyncio.Event()
        seen = []

        def on_reclaim(lock) -> None:
            seen.append((lock.token, asyncio.get_running_loop() is loop))
            reclaimed.set()

        async with AsyncClient(server.addr).lock("jobs/a", lease=LEASE, on_reclaim=on_reclaim) as lock:
            await loop.run_in_executor(None, server.next, "heartbeat")
            server.silence(1)
            await asyncio.wait_for(reclaimed.wait(), WAIT)  # the body is not cancelled meanwhile
            await loop.run_in_executor(None, server.next, "eof")
            self.assertTrue(lock.held)
            self.assertEqual(lock.reclaims, 1)
        self.assertEqual(seen, [(TOKEN, True)])
        self.assertEqual(lock.error.why, "released")


if __name__ == "__main__":
    unittest.main()
