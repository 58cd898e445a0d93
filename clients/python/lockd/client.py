"""The blocking client: one claim is one TCP connection, served by one thread
that owns the schedule, the reads and the writes (a permanent reader: it
always selects on the socket). The one exception to "a held lock never
reconnects" is a reclaim (docs/protocol.md section 14.3): after a clean stop
of the server the same thread connects again and claims the grant back; on
silence (a heartbeat unanswered for lease/4, the connection still open) it
keeps the old connection and tries reclaims on a second one, whose connects
run on a thread of their own so the old connection stays served."""
from __future__ import annotations

import os
import random
import selectors
import socket
import ssl
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from .errors import (
    LockAbortedError,
    LockError,
    LockLostError,
    LockRequestError,
    ServerUnavailableError,
    WaitTimeoutError,
    WrongShardError,
    server_error,
)
from .frames import (
    ACQUIRED,
    ERROR,
    FLAG_RECLAIM,
    FLAG_RECLAIMABLE,
    HEARTBEAT_FRAME,
    WAITING,
    ProtocolViolation,
    Reader,
    SpeaksTLS,
    class_of_code,
    code_name,
    encode_acquire,
)
from .schedule import MIN_HEARTBEAT_INTERVAL, client_timeout, heartbeat_interval, reconnect_pause, smooth_rtt

DEFAULT_SERVER = "127.0.0.1:7700"
DEFAULT_LEASE = 5.0
DEFAULT_RECONNECT = 30.0
T = TypeVar("T")


def parse_addresses(servers: str) -> list[tuple[str, int]]:
    """'HOST:PORT', '[IPv6]:PORT', ':PORT' (127.0.0.1), comma-separated."""
    out = []
    for i, part in enumerate(servers.split(","), 1):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise LockRequestError("BAD_REQUEST", f"element {i} of {servers!r} ({part!r}) is not HOST:PORT")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        out.append((host or "127.0.0.1", int(port)))
    return out


class _Retry(Exception):
    """A claim not held yet met trouble it reconnects on."""

    def __init__(self, detail: str, answered: bool) -> None:
        super().__init__(detail)
        self.answered = answered


class _Reclaim(Exception):
    """A held lock got SHUTTING_DOWN with RECLAIM for a grant flagged RECLAIMABLE, with reclaim on.
    ``attempt``: a reclaim on silence under way then, which goes on as the reclaim's first attempt."""

    def __init__(self, detail: str, attempt: "_Attempt | None" = None) -> None:
        super().__init__(detail)
        self.attempt = attempt


class _Attempt:
    """One reclaim on silence (docs/protocol.md section 14.3): a second connection to the
    address at ``index`` of the claim's list. The connect (and a TLS handshake) runs on a
    thread of its own, so the session's thread keeps serving the old connection; once it is
    over (``finished``: ``sock`` or ``error``) a byte on ``wake`` tells the session's thread,
    which then owns the socket, sends the reclaim (``sent_at``) and reads its answer. An
    attempt not answered by ``due_at`` (lease/4 after its start) has failed."""

    def __init__(self, session: "_Session", index: int, due_at: float, timeout: float, wake: socket.socket) -> None:
        self.session = session
        self.index = index
        self.due_at = due_at  # given up then, unless granted (or failed) before
        self.addr = session.addrs[index]
        self.sock: socket.socket | None = None
        self.error = ""
        self.finished = False
        self.cancelled = False
        self.sent_at: float | None = None
        self.reader = Reader()
        self._wake = wake
        threading.Thread(target=self._run, args=(timeout,), name=f"lockd {session.name} reclaim", daemon=True).start()

    def _run(self, timeout: float) -> None:
        sock: socket.socket | None = None
        error = ""
        try:
            sock = self.session._connect(timeout=timeout, addr=self.addr)
        except (OSError, ssl.SSLError) as e:
            error = f"cannot connect to {self.addr[0]}:{self.addr[1]}: {e}"
        with self.session.cv:
            if not self.cancelled:
                self.sock, self.error, self.finished = sock, error, True
                self.session.cv.notify_all()
                sock = None
        if sock is not None:  # cancelled meanwhile: nobody takes it
            try:
                sock.close()
            except OSError:
                pass
            return
        try:
            self._wake.send(b"\0")
        except OSError:  # the session's conversation is over (closed), or the byte of another is pending
            pass

    def cancel(self) -> None:
        """Give the attempt up: its connection (if any) is closed, a connect still under way is closed when it ends."""
        with self.session.cv:
            self.cancelled = True
            sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


class _Silence:
    """The reclaims on silence of one held connection: the attempt under way (or None), the
    failed ones counted for the pacing, when the next may start, the index of the last
    address tried and what the last failure was."""

    def __init__(self, index: int, now: float) -> None:
        self.attempt: _Attempt | None = None
        self.failures = 0
        self.next_at: float | None = now
        self.index = index
        self.detail = ""


class Lock:
    """A granted claim. ``lost`` is a threading.Event set the moment ownership is no
    longer confirmed; ``error`` then says why (a LockLostError). ``slot``: the permit
    0 .. limit - 1 of a semaphore's grant (fence each slot like a lock of its own), None
    for limit 1; ``limit`` and ``shared`` are the claim's. ``reclaims``: how many times
    the lock was reclaimed after a clean stop of the server (the same token, kept across
    the server's restart, or on silence over a second connection); ``reclaiming``: True while
    it is being reclaimed, after a clean stop or on silence (still held: ``held`` stays True
    until its deadline, and ``lost`` is not set)."""

    def __init__(self, session: "_Session", token: int, slot: int | None) -> None:
        self.name = session.name
        self.token = token
        self.slot = slot
        self.limit = session.limit
        self.shared = session.shared
        self.lost = threading.Event()
        self.error: LockLostError | None = None
        self._session = session
        self._callbacks: list[Callable[[LockLostError], None]] = []
        self._cb_lock = threading.Lock()
        self.reclaims = 0

    @property
    def reclaiming(self) -> bool:
        return (self._session.reclaiming or self._session.silent) and not self.lost.is_set()

    @property
    def held(self) -> bool:
        """Whether ownership is still confirmed, reading the clock now (not trusting a timer)."""
        if self.lost.is_set():
            return False
        if time.monotonic() >= self._session.confirmed_until():
            self._session.request_stop(LockLostError(self.name, "unconfirmed", "no answer within 0.8 x lease"))
            return False
        return True

    def on_lost(self, callback: Callable[[LockLostError], None]) -> None:
        """Call ``callback(error)`` (from the session's thread) when the lock is lost; at once if it already is."""
        with self._cb_lock:
            if self.error is None:
                self._callbacks.append(callback)
                return
        callback(self.error)

    def _set_lost(self, error: LockLostError) -> None:
        with self._cb_lock:
            if self.error is not None:
                return
            self.error = error
            callbacks, self._callbacks = self._callbacks, []
        self.lost.set()
        for cb in callbacks:
            cb(error)

    def release(self) -> None:
        """Close the connection (the release); returns once closed. Calling it again is harmless."""
        self._session.request_stop(LockLostError(self.name, "released", "released"))
        self._session.done.wait()

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


ReclaimFrame = Callable[[int, "int | None"], bytes]


class _Session:
    """One claim's connection, and after a clean stop of the server the reconnects of its
    reclaim (docs/protocol.md section 14.3): the deadline then does not move, the lock stays
    held until it, and ACQUIRED with REPLY and the same token and slot confirms it again."""

    def __init__(
        self, client: "Client", addrs: list[tuple[str, int]], index: int, name: str, frame: bytes, lease: float,
        limit: int = 1, shared: bool = False,
        reclaim_frame: ReclaimFrame | None = None, on_reclaim: Callable[[Lock], object] | None = None,
    ) -> None:
        self.client = client
        self.addrs = addrs
        self.index = index
        self.addr = addrs[index]
        self.name = name
        self.frame = frame
        self.lease = lease
        self.limit = limit
        self.shared = shared
        self.timeout = client_timeout(lease)
        self.cv = threading.Condition()
        self.done = threading.Event()
        self.lock: Lock | None = None
        self.outcome: BaseException | None = None
        self.answered = False
        self._stop: LockError | None = None
        self._confirmed_send = time.monotonic()
        self.sock: socket.socket | None = None
        self.reclaim_frame = reclaim_frame
        self.on_reclaim = on_reclaim
        self.reclaimable = False  # the grant's last ACQUIRED had RECLAIMABLE
        self.reclaiming = False  # held, reclaiming after a clean stop: not confirmed again yet
        self.silent = False  # held, a heartbeat unanswered for lease/4: reclaims on silence under way
        self.token = 0
        self.slot: int | None = None
        self.rtt: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"lockd {name}", daemon=True)
        self.thread.start()

    def confirmed_until(self) -> float:
        return self._confirmed_send + self.timeout

    def request_stop(self, err: LockError) -> None:
        with self.cv:
            if self._stop is None:
                self._stop = err
            self.cv.notify_all()  # wakes a reclaim's pause
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the select; the close is the release anyway
            except OSError:
                pass

    def _end(self, err: BaseException) -> None:
        with self.cv:
            if self.lock is not None and not isinstance(err, LockLostError):
                err = LockLostError(self.name, "aborted", str(err))
            self.outcome = err
            if self.lock is not None:
                self.lock._set_lost(err)  # the work is told first, then the connection closes
            if self.sock is not None:
                try:
                    self.sock.close()
                except OSError:
                    pass
            self.done.set()
            self.cv.notify_all()

    def _fail(self, why: str, detail: str, code: int | None = None, message: str = "") -> None:
        with self.cv:
            stop = self._stop
        if stop is not None:
            # A release (or a cancel) asked first: its shutdown of the socket is what failed.
            self._end(stop)
            return
        if self.lock is not None:
            self._end(LockLostError(self.name, "protocol" if why == "violation" else why, detail, code, message))
        elif why == "server-error":
            assert code is not None
            if class_of_code(code) == "server" or code == 0x10:
                self._end(_Retry(f"{code_name(code)}: {message}", self.answered))
            else:
                err = server_error(self.name, code, message, self.limit, self.shared)
                err.server = f"[{self.addr[0]}]:{self.addr[1]}" if ":" in self.addr[0] else f"{self.addr[0]}:{self.addr[1]}"  # the address that sent it
                self._end(err)
        elif why == "violation":
            self._end(LockRequestError("PROTOCOL_VIOLATION", f"broken server at {self.addr[0]}:{self.addr[1]}: {detail}", lock=self.name))
        else:
            self._end(_Retry(detail, self.answered))

    def _bad_grant(self, got_token: int, got_slot: int | None, token: int, slot: int | None) -> str:
        """What is wrong with an ACQUIRED carrying ``got_token`` and ``got_slot`` (None: no
        FLAG_SLOT) for this claim, which holds ``token`` and ``slot`` (token 0: not granted
        yet); '' if nothing. A name with limit above 1 grants with a slot below the limit on
        every ACQUIRED, limit 1 never; a held claim's token and slot never change."""
        if got_token == 0:
            return "ACQUIRED with token 0"
        if self.limit == 1 and got_slot is not None:
            return f"ACQUIRED with slot {got_slot} for a claim with limit 1"
        if self.limit > 1 and got_slot is None:
            return f"ACQUIRED without a slot for a claim with limit {self.limit}"
        if got_slot is not None and got_slot >= self.limit:
            return f"ACQUIRED with slot {got_slot}, not below the claim's limit {self.limit}"
        if token and (got_token != token or got_slot != slot):
            return f"ACQUIRED with token {got_token} slot {got_slot} (held token {token} slot {slot})"
        return ""

    def _connect(self, timeout: float | None = None, addr: tuple[str, int] | None = None) -> socket.socket:
        addr = self.addr if addr is None else addr
        sock = socket.create_connection(addr, timeout=self.timeout if timeout is None else timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.client.tls is not None:
                sock = self.client.tls.wrap_socket(sock, server_hostname=self.client.server_hostname or addr[0])
        except BaseException:
            sock.close()
            raise
        return sock

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # never leave a claim without an outcome
            if not self.done.is_set():
                self._end(e if self.lock is None else LockLostError(self.name, "closed", repr(e)))

    def _loop(self) -> None:
        try:
            sock = self._connect()
        except ssl.SSLError as e:
            self._end(ServerUnavailableError(f"TLS with {self.addr[0]}:{self.addr[1]} failed: {e}", lock=self.name))
            return
        except OSError as e:
            self._end(_Retry(f"cannot connect to {self.addr[0]}:{self.addr[1]}: {e}", False))
            return
        frame: bytes | None = self.frame
        reader: Reader | None = None
        sent_at: float | None = None
        while True:
            with self.cv:
                self.sock = sock
                stop = self._stop
            if stop is not None:
                self._end(stop)
                return
            try:
                self._converse(sock, frame, reader, sent_at)
                return
            except _Reclaim as e:
                detail, attempt = str(e), e.attempt
            assert self.reclaim_frame is not None
            frame = self.reclaim_frame(self.token, self.slot)
            taken = self._reclaim_connect(sock, detail, attempt)
            if taken is None:
                return
            sock, reader, sent_at = taken
            if sent_at is not None:
                frame = None  # the reclaim on silence was sent on it already

    def _reclaim_connect(
        self, old: socket.socket, detail: str, attempt: _Attempt | None = None,
    ) -> tuple[socket.socket, Reader | None, float | None] | None:
        """After SHUTTING_DOWN with RECLAIM: close the old connection, connect again (the next
        address, paced as any reconnect) until a connect gets through or the deadline, which
        does not move, passes (the lock is lost then). ``attempt``: a reclaim on silence under
        way at the stop, taken as the first connect (if it connected; its reclaim may have
        been sent already). Returns the connection, and if its reclaim was sent already its
        reader and the send's time; None: the session has ended."""
        self.reclaiming = True
        self.silent = False
        with self.cv:
            self.sock = None
        try:
            old.close()
        except OSError:
            pass
        if attempt is not None:
            self.index, self.addr = attempt.index, attempt.addr
            with self.cv:
                self.cv.wait_for(
                    lambda: attempt.finished or self._stop is not None or time.monotonic() >= self.confirmed_until(),
                    timeout=max(self.confirmed_until() - time.monotonic(), 0),
                )
                stop, finished, sock = self._stop, attempt.finished, attempt.sock
            if stop is not None or not finished:
                attempt.cancel()
                if stop is not None:
                    self._end(stop)
                else:
                    self._fail("unconfirmed", f"not reclaimed within {self.timeout:.3f} s (0.8 x lease) of the last answered send: {detail}")
                return None
            if sock is not None:
                return sock, (attempt.reader if attempt.sent_at is not None else None), attempt.sent_at
            detail = attempt.error
        n = len(self.addrs)
        failures = 0
        while True:
            failures += 1
            self.index = (self.index + 1) % n
            self.addr = self.addrs[self.index]
            pause = reconnect_pause(failures, n, random.random())
            with self.cv:
                self.cv.wait_for(lambda: self._stop is not None or time.monotonic() >= self.confirmed_until(), timeout=pause)
                stop = self._stop
            if stop is not None:
                self._end(stop)
                return None
            left = self.confirmed_until() - time.monotonic()
            if left <= 0:
                self._fail("unconfirmed", f"not reclaimed within {self.timeout:.3f} s (0.8 x lease) of the last answered send: {detail}")
                return None
            try:
                return self._connect(timeout=left), None, None
            except (OSError, ssl.SSLError) as e:
                detail = f"cannot connect to {self.addr[0]}:{self.addr[1]}: {e}"

    def _reclaimed(self) -> None:
        """The reclaim was granted: the same token and slot, confirmed again."""
        self.reclaiming = False
        self.silent = False
        lock = self.lock
        assert lock is not None
        lock.reclaims += 1
        if self.on_reclaim is not None:
            try:
                self.on_reclaim(lock)
            except Exception:  # the callback's trouble is not the lock's: it stays held
                print(f"lockd: the on_reclaim callback of lock {self.name!r} raised:", file=sys.stderr)
                traceback.print_exc()

    def _converse(self, sock: socket.socket, frame: bytes | None, reader: Reader | None = None, sent_at: float | None = None) -> None:
        """Send ``frame`` (the ACQUIRE, or a reclaim's) on ``sock`` and serve the claim until
        it ends; raises _Reclaim on a clean stop that lets the held lock be reclaimed. ``frame``
        None: a reclaim on silence, sent at ``sent_at`` on ``sock`` and read by ``reader``
        so far, goes on as the reclaim after a clean stop.

        Reclaim on silence (docs/protocol.md section 14.3): while the lock is held, its grant
        RECLAIMABLE and reclaim on, a HEARTBEAT unanswered for lease/4 starts reclaims on a
        second connection (the list's next address, wrapping), one at a time, paced as
        reconnects, while the deadline (which does not move) allows. The old connection is
        kept and read: its answer ends the silence (the attempt is closed); SHUTTING_DOWN with
        RECLAIM on it hands the attempt under way to the reclaim after a clean stop; anything
        else ending it is a loss. ACQUIRED with REPLY and the grant's token and slot on the
        attempt's connection reclaims the lock: the old connection is closed and the claim
        goes on on the new one, confirmed up to the reclaim's send. Any other outcome of an
        attempt (no answer within lease/4 of its start among them) fails only that attempt."""
        reclaim = self.reclaiming
        if frame is None:
            assert sent_at is not None
            pending_send = sent_at
        else:
            pending_send = time.monotonic()
            if not reclaim:
                self._confirmed_send = pending_send
            try:
                sock.settimeout(max(min(self.timeout, self.confirmed_until() - pending_send), 0.001))
                sock.sendall(frame)
            except OSError as e:
                self._fail("closed", f"cannot send ACQUIRE: {e}")
                return
        in_flight = True
        next_hb: float | None = None
        if reader is None:
            reader = Reader()
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ, "main")
        minimum = self.client.min_heartbeat_interval
        silence: _Silence | None = None
        wake_r: socket.socket | None = None
        wake_w: socket.socket | None = None
        backlog: list = []  # frames read on a reclaim's connection after its grant, served as the new connection's

        def end_attempt(detail: str, now: float) -> None:
            """The attempt under way failed (or is given up): close it, pace the next."""
            assert silence is not None and silence.attempt is not None
            attempt = silence.attempt
            if attempt.sent_at is not None and attempt.sock is not None:
                sel.unregister(attempt.sock)
            attempt.cancel()
            silence.attempt = None
            silence.failures += 1
            silence.detail = detail
            silence.next_at = now + reconnect_pause(silence.failures, len(self.addrs), random.random())

        def end_silence() -> None:
            """The old connection answered: the silence is over, the reclaim's connection closed."""
            nonlocal silence
            if silence is None:
                return
            attempt = silence.attempt
            if attempt is not None:
                if attempt.sent_at is not None and attempt.sock is not None:
                    sel.unregister(attempt.sock)
                attempt.cancel()
            silence = None
            self.silent = False

        try:
            while True:
                with self.cv:
                    stop = self._stop
                if stop is not None:
                    self._end(stop)
                    return
                now = time.monotonic()
                deadline = self.confirmed_until()
                if now >= deadline:
                    if reclaim:
                        self._fail("unconfirmed", f"not reclaimed within {self.timeout:.3f} s (0.8 x lease) of the last answered send")
                    elif silence is not None:
                        self._fail("unconfirmed", f"no answer within {self.timeout:.3f} s (0.8 x lease), and not reclaimed on silence: {silence.detail or 'no reclaim answered'}")
                    else:
                        self._fail("unconfirmed", f"no answer within {self.timeout:.3f} s (0.8 x lease)")
                    return
                silence_at: float | None = None
                if (
                    silence is None and in_flight and self.lock is not None and not reclaim
                    and self.reclaimable and self.reclaim_frame is not None
                ):
                    silence_at = pending_send + self.lease / 4  # the HEARTBEAT in flight goes unanswered for lease/4 then
                    if now >= silence_at:
                        silence = _Silence(self.index, now)
                        self.silent = True
                        silence_at = None
                        if wake_r is None:
                            wake_r, wake_w = socket.socketpair()
                            wake_w.setblocking(False)
                            sel.register(wake_r, selectors.EVENT_READ, "wake")
                if silence is not None and silence.attempt is not None and now >= silence.attempt.due_at:
                    attempt = silence.attempt
                    end_attempt(f"the reclaim at {attempt.addr[0]}:{attempt.addr[1]} was not answered within lease/4 ({self.lease / 4:.3f} s)", now)
                if silence is not None and silence.attempt is None and silence.next_at is not None and now >= silence.next_at:
                    assert wake_w is not None
                    silence.next_at = None
                    silence.index = (silence.index + 1) % len(self.addrs)
                    # One attempt (its connect and the reclaim's answer) gets lease/4: an address
                    # that does not answer is not waited for to the deadline, the next is tried.
                    silence.attempt = _Attempt(self, silence.index, now + self.lease / 4, min(deadline - now, self.lease / 4), wake_w)
                if backlog:
                    frames, backlog = backlog, []
                    ready = {"main"}
                else:
                    if not in_flight and next_hb is not None and now >= next_hb:
                        try:
                            sock.settimeout(max(deadline - now, 0.001))
                            sock.sendall(HEARTBEAT_FRAME)
                        except OSError as e:
                            self._fail("closed", f"cannot send HEARTBEAT: {e}")
                            return
                        pending_send = now
                        in_flight = True
                        continue
                    wait = deadline - now
                    if not in_flight and next_hb is not None:
                        wait = min(wait, next_hb - now)
                    if silence_at is not None:
                        wait = min(wait, silence_at - now)
                    if silence is not None and silence.attempt is None and silence.next_at is not None:
                        wait = min(wait, silence.next_at - now)
                    if silence is not None and silence.attempt is not None:
                        wait = min(wait, silence.attempt.due_at - now)
                    pending_tls = set()  # TLS bytes decrypted already: the socket may not select readable for them
                    if isinstance(sock, ssl.SSLSocket) and sock.pending() > 0:
                        pending_tls.add("main")
                    asock = silence.attempt.sock if silence is not None and silence.attempt is not None and silence.attempt.sent_at is not None else None
                    if isinstance(asock, ssl.SSLSocket) and asock.pending() > 0:
                        pending_tls.add("attempt")
                    ready = {key.data for key, _ in sel.select(0 if pending_tls else max(wait, 0))} | pending_tls
                    if not ready:
                        continue
                    frames = []
                if "main" in ready and not frames:
                    try:
                        sock.settimeout(self.timeout)
                        chunk = sock.recv(65536)
                    except (OSError, ssl.SSLError) as e:
                        self._fail("closed", f"connection failed: {e}")
                        return
                    if not chunk:
                        with self.cv:
                            stop = self._stop
                        if stop is not None:
                            continue
                        self._fail("closed", "the server closed the connection")
                        return
                    try:
                        frames = reader.push(chunk)
                    except SpeaksTLS as e:
                        self._end(ServerUnavailableError(str(e), lock=self.name) if self.lock is None else LockLostError(self.name, "protocol", str(e)))
                        return
                    except ProtocolViolation as e:
                        self._fail("violation", str(e))
                        return
                now = time.monotonic()
                for f in frames:
                    if f.type == ERROR:
                        if (
                            self.lock is not None and not reclaim and f.code == 0x01 and f.flags & FLAG_RECLAIM
                            and self.reclaimable and self.reclaim_frame is not None
                        ):
                            attempt = None
                            if silence is not None and silence.attempt is not None:
                                attempt = silence.attempt
                                if attempt.sent_at is not None and attempt.sock is not None:
                                    sel.unregister(attempt.sock)
                                silence.attempt = None  # handed over: not closed below
                            self.reclaiming = True  # held all along: reclaiming from now on
                            raise _Reclaim(f"the server sent ERROR SHUTTING_DOWN with RECLAIM: {f.message}", attempt)
                        self._fail("server-error", f"the server sent ERROR {code_name(f.code)}: {f.message}", f.code, f.message)
                        return
                    if f.type == ACQUIRED:
                        bad = self._bad_grant(f.token, f.slot, self.token, self.slot)
                        if not bad and reclaim and not f.reply:
                            bad = "ACQUIRED without REPLY to a reclaim (a reclaim is answered at once)"
                        if bad:
                            self._fail("violation", ("the reclaim was answered: " if reclaim else "") + bad)
                            return
                    if f.type == WAITING and (self.token or not f.reply):
                        self._fail("violation", "WAITING after ACQUIRED, or without REPLY")
                        return
                    if f.reply:
                        if not in_flight:
                            self._fail("violation", "a reply with nothing in flight")
                            return
                        if reclaim and now >= self.confirmed_until():
                            # The deadline does not move for a reclaim: an answer after it confirms nothing.
                            self._fail("unconfirmed", f"the reclaim was answered too late: not within {self.timeout:.3f} s (0.8 x lease) of the last answered send")
                            return
                        in_flight = False
                        self.answered = True
                        self.rtt = smooth_rtt(self.rtt, now - pending_send)
                        self._confirmed_send = pending_send  # count from the send of the frame just answered
                        next_hb = now + heartbeat_interval(self.lease, self.rtt, minimum)
                    if now >= self.confirmed_until():
                        # Read after the deadline (this process was paused): it confirms nothing,
                        # and the server may have expired this session already.
                        self._fail("unconfirmed", f"no answer within {self.timeout:.3f} s (0.8 x lease)")
                        return
                    if f.type == ACQUIRED:
                        self.reclaimable = bool(f.flags & FLAG_RECLAIMABLE)
                        if f.reply:
                            end_silence()  # the old connection answered
                        if reclaim:
                            reclaim = False
                            self._reclaimed()
                        elif not self.token:
                            self.token, self.slot = f.token, f.slot
                            with self.cv:
                                self.lock = Lock(self, self.token, self.slot)
                                self.cv.notify_all()
                if "wake" in ready:  # drained even when the attempt that wrote it is gone
                    assert wake_r is not None
                    try:
                        wake_r.recv(64)
                    except OSError:
                        pass
                if silence is None or silence.attempt is None:
                    continue
                attempt = silence.attempt
                if attempt.sent_at is None:
                    with self.cv:
                        finished, asock, error = attempt.finished, attempt.sock, attempt.error
                    if not finished:
                        continue
                    if asock is None:
                        end_attempt(error, now)
                        continue
                    assert self.reclaim_frame is not None
                    attempt.sent_at = now
                    try:
                        asock.settimeout(max(self.confirmed_until() - now, 0.001))
                        asock.sendall(self.reclaim_frame(self.token, self.slot))
                    except OSError as e:
                        attempt.sent_at = None
                        end_attempt(f"cannot send the reclaim to {attempt.addr[0]}:{attempt.addr[1]}: {e}", now)
                        continue
                    sel.register(asock, selectors.EVENT_READ, "attempt")
                    continue
                if "attempt" not in ready:
                    continue
                asock = attempt.sock
                assert asock is not None
                where = f"{attempt.addr[0]}:{attempt.addr[1]}"
                try:
                    asock.settimeout(self.timeout)
                    chunk = asock.recv(65536)
                except (OSError, ssl.SSLError) as e:
                    end_attempt(f"the reclaim's connection to {where} failed: {e}", now)
                    continue
                if not chunk:
                    end_attempt(f"{where} closed the reclaim's connection without an answer", now)
                    continue
                try:
                    answers = attempt.reader.push(chunk)
                except ProtocolViolation as e:  # SpeaksTLS and SpeaksHTTP too
                    end_attempt(f"the reclaim was answered by {where}: {e}", now)
                    continue
                if not answers:
                    continue
                f = answers[0]
                if f.type == ERROR:
                    end_attempt(f"the reclaim was answered by {where} with ERROR {code_name(f.code)}: {f.message}", now)
                    continue
                if f.type != ACQUIRED or not f.reply:
                    end_attempt(f"the reclaim was answered by {where} with {'WAITING' if f.type == WAITING else 'ACQUIRED without REPLY'}", now)
                    continue
                bad = self._bad_grant(f.token, f.slot, self.token, self.slot)
                if bad:
                    end_attempt(f"the reclaim was answered by {where} with {bad}", now)
                    continue
                if now >= self.confirmed_until():
                    end_attempt(f"the reclaim was answered by {where} too late", now)
                    continue  # the loop's top ends the claim: not reclaimed by the deadline
                # Reclaimed: the old connection is closed, the claim goes on on the new one.
                assert attempt.sent_at is not None
                sel.unregister(sock)
                sel.unregister(asock)
                with self.cv:
                    old, self.sock = sock, asock
                try:
                    old.close()
                except OSError:
                    pass
                sock, reader = asock, attempt.reader
                sel.register(sock, selectors.EVENT_READ, "main")
                silence = None
                self.index, self.addr = attempt.index, attempt.addr
                pending_send = attempt.sent_at
                in_flight = False
                self.answered = True
                self.rtt = smooth_rtt(self.rtt, now - pending_send)
                self._confirmed_send = pending_send
                next_hb = now + heartbeat_interval(self.lease, self.rtt, minimum)
                self.reclaimable = bool(f.flags & FLAG_RECLAIMABLE)
                backlog = answers[1:]
                self._reclaimed()
        finally:
            if silence is not None and silence.attempt is not None:
                silence.attempt.cancel()
            self.silent = False
            sel.close()
            for s in (wake_r, wake_w):
                if s is not None:
                    s.close()


def first_connect_retried(setting: bool | None, try_: bool, wait: float | None, addresses: int) -> bool:
    """The rule all three clients and ``lockd run`` share (docs/clients.md, "Retrying the first
    connect"): whether a claim retries before any server has answered it. An explicit setting
    wins; by default a claim that may wait retries when it has a wait or two or more addresses."""
    if setting is not None:
        return bool(setting)
    if try_:
        return False
    return (wait is not None and wait > 0) or addresses > 1


class Client:
    """Settings shared by claims. ``servers``: an address list ('a:7700,b:7700'), or a map of
    shards ('gen=1;alpha=a:7700,b:7700;beta=c:7700': each lock name goes to its shard's
    list); default LOCKD_SERVER, else 127.0.0.1:7700. ``tls``: an ssl.SSLContext (load_cert_chain on it
    for mutual TLS). ``retry_first_connect``: whether a claim retries (within ``reconnect``, never
    past its ``wait``) before any server has answered it; None (the default): a claim that may wait
    retries when it has a ``wait`` or its list has two or more addresses, a ``try_`` claim or one
    address without a ``wait`` fails at once; True: always; False: never (each address once).
    Durations are in seconds."""

    def __init__(
        self,
        servers: str | None = None,
        owner: str | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        reconnect: float = DEFAULT_RECONNECT,
        retry_first_connect: bool | None = None,
        min_heartbeat_interval: float = MIN_HEARTBEAT_INTERVAL,
    ) -> None:
        from .shard import parse_server_map

        self.map = parse_server_map(servers or os.environ.get("LOCKD_SERVER") or DEFAULT_SERVER)
        self.servers = self.map.shards[0].addresses  # a plain list's addresses (the first shard's for a map)
        self.owner = owner or f"{socket.gethostname()}/pid-{os.getpid()}"
        self.tls = tls
        self.server_hostname = server_hostname
        self.reconnect = reconnect
        self.retry_first_connect = retry_first_connect
        self.min_heartbeat_interval = min_heartbeat_interval

    def acquire(
        self,
        name: str,
        lease: float = DEFAULT_LEASE,
        wait: float | None = None,
        try_: bool = False,
        owner: str | None = None,
        cancel: threading.Event | None = None,
        limit: int = 1,
        shared: bool = False,
        on_retry: Callable[[str, float, bool], object] | None = None,
        reclaim: bool = True,
        on_reclaim: Callable[[Lock], object] | None = None,
    ) -> Lock:
        """Claim ``name``; return the Lock once granted. ``wait``: give up after this many
        seconds (WaitTimeoutError); ``try_``: LockBusyError if held (LockDelayedError if
        held back by a lock-delay); ``cancel``: an Event that aborts the wait
        (LockAbortedError); WrongShardError if the server serves another shard than this
        client's map says. ``limit``: the permits of the name, 1 .. 65535 (above 1 a
        semaphore: the first ``limit`` claims hold at once, each with its ``lock.slot``);
        ``shared``: a shared (read) claim, holding beside other shared claims (limit 1
        only). Every live session of a name uses the same limit, or the claim fails with
        LimitMismatchError; a limit or ``shared`` no server accepts is LockRequestError
        BAD_REQUEST at once, without connecting.
        ``on_retry(detail, pause, backoff)``: called (on this thread)
        before each reconnect while the claim is not held yet: what failed, the pause in
        seconds, and whether it is the backoff after every address of the list failed
        (True) or the move on to the list's next address (False); for logging.
        ``reclaim`` (default True): when the server stops cleanly and lets its holders
        reclaim (SHUTTING_DOWN with RECLAIM for a grant it flagged RECLAIMABLE, docs/protocol.md
        section 14), keep the lock held (``lost`` not set) and claim the grant back from the
        server's next run, with the same token and slot, before the lock's deadline (0.8 x
        lease after the last answered send), which does not move; if that fails the lock is
        lost as for any loss. Also on silence (a HEARTBEAT of a flagged grant unanswered for
        lease/4, the connection still open): the old connection is kept, and the reclaim is
        tried on a second connection to the list's next address (again, paced, while the
        deadline allows) until it is granted there (the claim goes on on the new connection)
        or the old connection answers. False: a clean stop loses the lock, and silence is
        not reclaimed. ``on_reclaim(lock)``: called (on the session's thread) each time the
        lock was reclaimed; ``lock.reclaims`` counts them."""
        if not isinstance(reclaim, bool):
            raise LockRequestError("BAD_REQUEST", f"reclaim must be True or False, got {reclaim!r}", lock=name)
        shard = self.map.shard_of(name)
        try:
            return self._acquire(name, self.map.shards[shard].addresses, lease, wait, try_, owner, cancel, limit, shared, on_retry, reclaim, on_reclaim)
        except LockRequestError as e:
            if e.code != "WRONG_SHARD":
                raise
            from .shard import describe_mismatch

            client_shard = self.map.shards[shard].name
            detail = describe_mismatch(self.map.names(), self.map.generation, client_shard, getattr(e, "server", None), e.server_message)
            raise WrongShardError(name, client_shard, self.map.describe(), e.server_message, detail) from None

    def shard_of(self, name: str) -> str:
        """The shard ``name`` belongs to in this client's map ('' for a plain address list)."""
        return self.map.shards[self.map.shard_of(name)].name

    def _acquire(self, name, addrs, lease, wait, try_, owner, cancel, limit=1, shared=False, on_retry=None, reclaim=True, on_reclaim=None) -> Lock:
        who = owner or self.owner
        lease_ms = round(lease * 1000)
        try:
            frame = encode_acquire(name, who, lease_ms, try_, limit, shared)
        except (ValueError, UnicodeError) as e:
            raise LockRequestError("BAD_REQUEST", str(e), lock=name) from None
        reclaim_frame: ReclaimFrame | None = None
        if reclaim:
            # The reclaim (protocol.md section 14.3): the same claim, with RECLAIM and the grant's token and slot.
            def reclaim_frame(token: int, slot: int | None) -> bytes:
                return encode_acquire(name, who, lease_ms, try_, limit, shared, reclaim_token=token, reclaim_slot=slot)
        retry_first = first_connect_retried(self.retry_first_connect, try_, wait, len(addrs))
        start = time.monotonic()
        wait_until = start + wait if wait is not None else None
        idx = failures = 0
        answered_ever = False
        trouble_since: float | None = None
        last = ""
        while True:
            session = _Session(self, addrs, idx, name, frame, lease, limit, shared, reclaim_frame, on_reclaim)
            outcome = self._await(session, wait_until, cancel)
            if isinstance(outcome, Lock):
                return outcome
            if isinstance(outcome, (WaitTimeoutError, LockAbortedError)):
                raise outcome
            if not isinstance(outcome, _Retry):
                raise outcome
            last = str(outcome)
            now = time.monotonic()
            if outcome.answered:
                answered_ever = True
                failures = 0
                trouble_since = now
            if trouble_since is None:
                trouble_since = now
            failures += 1
            n = len(addrs)
            if not answered_ever and not retry_first and failures >= n:
                raise ServerUnavailableError(f"no server of {self._list(addrs)} took the claim: {last}", lock=name)
            if now - trouble_since >= self.reconnect:
                raise ServerUnavailableError(f"the servers {self._list(addrs)} stayed unavailable for {self.reconnect} s: {last}", lock=name)
            idx = (idx + 1) % n
            if not answered_ever and not retry_first:
                pause = 0.0
            else:
                pause = reconnect_pause(failures, n, random.random())
            if on_retry is not None:
                on_retry(last, pause, failures % n == 0)
            if wait_until is not None and now + pause >= wait_until:
                raise WaitTimeoutError(f"lock {name!r} not granted within {wait} s; last: {last}", lock=name)
            if cancel is not None:
                if cancel.wait(pause):
                    raise LockAbortedError(f"claim of {name!r} cancelled", lock=name)
            else:
                time.sleep(pause)

    def _list(self, addrs: list[tuple[str, int]]) -> str:
        return ",".join(f"{h}:{p}" for h, p in addrs)

    def _await(self, s: _Session, wait_until: float | None, cancel: threading.Event | None) -> object:
        with s.cv:
            while s.lock is None and not s.done.is_set():
                if cancel is not None and cancel.is_set():
                    break
                if wait_until is not None and time.monotonic() >= wait_until:
                    break
                step = 0.05 if cancel is not None else None
                if wait_until is not None:
                    left = wait_until - time.monotonic()
                    step = left if step is None else min(step, left)
                s.cv.wait(None if step is None else max(step, 0))
            if s.lock is not None:
                return s.lock
            if s.done.is_set():
                return s.outcome
        if cancel is not None and cancel.is_set():
            err: LockError = LockAbortedError(f"claim of {s.name!r} cancelled", lock=s.name)
        else:
            err = WaitTimeoutError(f"lock {s.name!r} not granted in time", lock=s.name)
        s.request_stop(err)
        s.done.wait()
        return err

    @contextmanager
    def lock(self, name: str, **options) -> Iterator[Lock]:
        """``with client.lock("name", lease=5) as lock:`` acquire, yield the Lock, release.
        Check ``lock.lost`` (or ``lock.held``) in the work; pass ``lock.token`` to guarded writes."""
        held = self.acquire(name, **options)
        try:
            yield held
        finally:
            held.release()

    def with_lock(self, name: str, fn: Callable[[Lock], T], **options) -> T:
        """Acquire, run ``fn(lock)``, release, return its result; raise the LockLostError
        if the lock was lost while ``fn`` ran. ``fn`` is never run twice."""
        with self.lock(name, **options) as held:
            result = fn(held)
            if held.error is not None:
                raise held.error
            return result
