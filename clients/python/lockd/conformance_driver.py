"""The Python client's driver for the client conformance suite
(test/conformance/README.md): commands as JSON lines on stdin, events as
JSON lines on stdout. Run as ``python3 -m lockd.conformance_driver``."""
from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time

from . import Client, Lock, LockError
from .frames import code_name

_out = threading.Lock()
_locks: dict[str, Lock] = {}


def out(event: dict) -> None:
    with _out:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def since() -> float:
    """This driver's monotonic clock in ms (the timing fields the bench reads)."""
    return time.monotonic() * 1000


def acquire(cmd: dict) -> None:
    ident = cmd["id"]
    try:
        tls = None
        if cmd.get("tls"):
            tls = ssl.create_default_context(cafile=cmd["tls"]["ca"])
            if cmd["tls"].get("cert"):
                tls.load_cert_chain(cmd["tls"]["cert"], cmd["tls"]["key"])
        options = {}
        if cmd.get("reconnect") is not None:
            options["reconnect"] = cmd["reconnect"] / 1000
        client = Client(cmd["servers"], owner=cmd.get("owner") or ident, tls=tls, retry_first_connect=cmd.get("retryFirstConnect"), **options)
        wait = cmd.get("wait")
        started_at = since()

        def retried(detail: str, _pause: float, backoff: bool) -> None:
            out({"id": ident, "event": "retry", "backoff": backoff, "detail": detail})

        def reclaimed(held: Lock) -> None:
            out({"id": ident, "event": "reclaimed", "token": str(held.token), "slot": held.slot})

        if cmd.get("reclaim") is not None:
            options = {"reclaim": cmd["reclaim"]}
        else:
            options = {}
        lock = client.acquire(
            cmd["name"], lease=cmd["lease"] / 1000, wait=None if wait is None else wait / 1000, try_=bool(cmd.get("try")),
            limit=1 if cmd.get("limit") is None else cmd["limit"], shared=bool(cmd.get("shared")), on_retry=retried,
            on_reclaim=reclaimed, **options,
        )
    except LockError as e:
        sc = code_name(e.server_code) if e.server_code is not None else None
        out({"id": ident, "event": "error", "code": e.code, "class": e.error_class, "serverCode": sc, "message": str(e)})
        return
    at = since()
    _locks[ident] = lock
    out({"id": ident, "event": "acquired", "token": str(lock.token), "slot": lock.slot, "startedAt": started_at, "at": at})

    def lost(error) -> None:
        if error.why != "released":
            sc = code_name(error.server_code) if error.server_code is not None else None
            out({"id": ident, "event": "lost", "why": error.why, "serverCode": sc})

    lock.on_lost(lost)


def main() -> None:
    out({"event": "ready", "client": "python"})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        ident = cmd.get("id")
        if cmd["cmd"] == "acquire":
            threading.Thread(target=acquire, args=(cmd,), daemon=True).start()
        elif cmd["cmd"] == "release":
            started_at = since()
            lock = _locks.get(ident)
            if lock is not None:
                lock.release()
            out({"id": ident, "event": "released", "startedAt": started_at, "at": since()})
        elif cmd["cmd"] == "held":
            lock = _locks.get(ident)
            out({"id": ident, "event": "held", "held": lock is not None and lock.held})
        else:
            out({"id": ident, "event": "error", "code": "BAD_COMMAND", "class": "client", "serverCode": None, "message": f"unknown command {cmd['cmd']}"})
    for lock in list(_locks.values()):
        lock.release()
    # Daemon threads (acquires still waiting, the client's reader threads
    # running on_lost callbacks) may write events to the very end. Returning
    # would finalize the interpreter under them, and CPython aborts ("Fatal
    # Python error: _enter_buffered_busy") when one of them holds stdout's
    # buffer then. So: take the event lock (no write is half done), flush,
    # and exit without finalizing.
    with _out:
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
