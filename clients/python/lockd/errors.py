"""Typed errors: every one has a stable ``code`` and an ``error_class`` ('server', 'lock', 'client'), like the TypeScript and Go clients."""
from __future__ import annotations

from .frames import class_of_code, code_name


class LockError(Exception):
    code = "LOCK_ERROR"
    error_class = "client"

    def __init__(self, message: str, *, lock: str = "", server_code: int | None = None, server_message: str = "") -> None:
        super().__init__(message)
        self.lock = lock
        self.server_code = server_code
        self.server_message = server_message


class LockBusyError(LockError):
    """``try_=True`` and the lock is held (ERROR LOCK_BUSY)."""
    code = "LOCK_BUSY"
    error_class = "lock"


class LockDelayedError(LockError):
    """``try_=True`` and the server holds the name back by a lock-delay (ERROR LOCK_DELAYED, 0x14):
    it started serving after a failover or a restart, and a holder an earlier server granted may
    still believe it holds the lock. ``server_message`` (also in the text) says how many ms remain;
    trying again after that can succeed. Not retried."""
    code = "LOCK_DELAYED"
    error_class = "lock"


class WaitTimeoutError(LockError):
    """``wait`` passed before the grant."""
    code = "WAIT_TIMEOUT"
    error_class = "lock"


class ServerUnavailableError(LockError):
    """No address took the claim, or the server stayed unavailable for ``reconnect`` seconds while waiting, or TLS is set up on one end only."""
    code = "SERVER_UNAVAILABLE"
    error_class = "server"


class LockAbortedError(LockError):
    """The caller cancelled the claim while it waited."""
    code = "ABORTED"
    error_class = "client"


class LockRequestError(LockError):
    """The request cannot succeed as is: a server ERROR (KICKED, BAD_REQUEST, ...), or PROTOCOL_VIOLATION for a broken server."""

    def __init__(self, code: str, message: str, **kw) -> None:
        super().__init__(message, **kw)
        self.code = code
        sc = kw.get("server_code")
        self.error_class = class_of_code(sc) if sc is not None else "client"


class WrongShardError(LockRequestError):
    """ERROR WRONG_SHARD: the server serves another shard than this client's map places the
    name on; the text names what differs (shards, generation, or the address listed under
    the wrong shard). A setting to fix, never retried. ``client_shard`` and ``client_map``
    are this client's view; ``server_message`` is the server's; ``detail`` the text after
    ``lock NAME: ``."""

    def __init__(self, lock: str, client_shard: str, client_map: str, server_message: str, detail: str | None = None) -> None:
        if detail is None:
            detail = f"the client's map {client_map} places it on shard {client_shard}, but {server_message}"
        super().__init__("WRONG_SHARD", f"lock {lock!r}: {detail}", lock=lock, server_code=0x24, server_message=server_message)
        self.client_shard = client_shard
        self.client_map = client_map


class LimitMismatchError(LockRequestError):
    """ERROR LIMIT_MISMATCH (0x25): the claim's limit differs from the limit the name's live
    sessions use (a shared or an exclusive claim counts as limit 1). A setting to fix: never
    retried, on this address or the next. ``limit`` and ``shared`` are this claim's;
    ``server_message`` (also in the text) names both limits."""

    def __init__(self, lock: str, limit: int, shared: bool, server_message: str) -> None:
        what = "shared claim" if shared else "claim"
        super().__init__(
            "LIMIT_MISMATCH",
            f"lock {lock!r}: this {what} with limit {limit} was refused (LIMIT_MISMATCH): {server_message}",
            lock=lock, server_code=0x25, server_message=server_message,
        )
        self.limit = limit
        self.shared = shared


class LockLostError(LockError):
    """The held lock was lost. ``why``: 'server-error' (``server_code`` set), 'closed', 'unconfirmed', 'protocol' (the server broke the protocol), 'aborted', 'released'."""
    code = "LOCK_LOST"

    def __init__(self, lock: str, why: str, detail: str, server_code: int | None = None, server_message: str = "") -> None:
        super().__init__(f"lock {lock!r} lost ({why}): {detail}", lock=lock, server_code=server_code, server_message=server_message)
        self.why = why
        if server_code is not None:
            self.error_class = class_of_code(server_code)
        else:
            self.error_class = "client" if why in ("aborted", "released") else "lock"


def server_error(lock: str, code: int, message: str, limit: int = 1, shared: bool = False) -> LockError:
    """The error for an ERROR frame that ended a claim before the grant (``limit`` and
    ``shared``: the claim's, for LIMIT_MISMATCH)."""
    if code == 0x13:
        return LockBusyError(f"lock {lock!r} is held", lock=lock, server_code=code, server_message=message)
    if code == 0x14:
        text = f"lock {lock!r} is held back by a lock-delay" + (f": {message}" if message else "")
        return LockDelayedError(text, lock=lock, server_code=code, server_message=message)
    if code == 0x25:
        return LimitMismatchError(lock, limit, shared, message)
    return LockRequestError(code_name(code), f"server sent ERROR {code_name(code)}: {message}", lock=lock, server_code=code, server_message=message)
