"""Frames of lockd protocol version 1 (docs/protocol.md sections 2 to 4): encoders and an incremental reader."""
from __future__ import annotations

import struct
from dataclasses import dataclass

PROTOCOL_VERSION = 1
ACQUIRE = 0x01
HEARTBEAT = 0x02
ACQUIRED = 0x81
WAITING = 0x82
ERROR = 0xFF
FLAG_REPLY = 0x01
FLAG_SLOT = 0x02  # ACQUIRED: a u16 slot follows the token (a body of 10 bytes); only for a name with limit above 1
FLAG_RECLAIMABLE = 0x04  # ACQUIRED: the grant may be reclaimed after a clean stop of the server (section 14)
FLAG_RECLAIM = 0x04  # ERROR SHUTTING_DOWN: a clean stop that published its holders; reclaim the grant from the next run
OPTION_TRY = 0x01
OPTION_SHARED = 0x02  # a shared (read) claim; limit 1 only
OPTION_LIMIT = 0x04  # a u16 limit follows lease_ms, and name_length moves to body offset 8
OPTION_RECLAIM = 0x08  # a u64 token (and, with OPTION_LIMIT, a u16 slot) follows lease_ms (and the limit)
MAX_LIMIT = 0xFFFF
MAX_NAME_LENGTH = 512
MAX_OWNER_LENGTH = 256

CODE_NAMES = {
    0x01: "SHUTTING_DOWN",
    0x02: "OVERLOADED",
    0x10: "LEASE_EXPIRED",
    0x11: "FORCE_RELEASED",
    0x12: "KICKED",
    0x13: "LOCK_BUSY",
    0x14: "LOCK_DELAYED",
    0x15: "RECLAIM_REFUSED",
    0x20: "PROTOCOL_ERROR",
    0x21: "BAD_REQUEST",
    0x22: "UNSUPPORTED_VERSION",
    0x23: "IO_TIMEOUT",
    0x24: "WRONG_SHARD",
    0x25: "LIMIT_MISMATCH",
}

HEARTBEAT_FRAME = bytes([HEARTBEAT, 0, 0, 0])


def code_name(code: int) -> str:
    """The protocol's name of an ERROR code, or UNKNOWN_0xNN."""
    return CODE_NAMES.get(code, f"UNKNOWN_0x{code:02x}")


def class_of_code(code: int) -> str:
    """'server' (0x0_), 'lock' (0x1_), 'client' (0x2_ and the undefined classes above)."""
    return {0: "server", 1: "lock"}.get(code >> 4, "client")


def check_limit(limit: object, shared: object) -> None:
    """Refuse (ValueError) a ``limit`` outside 1 .. 65535 or not a whole number, a ``shared``
    that is not a bool, and ``shared`` with a limit above 1 (a name is a read/write lock or a
    semaphore, not both): requests no server would accept."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number 1 .. {MAX_LIMIT}, got {limit!r}")
    if not isinstance(shared, bool):
        raise ValueError(f"shared must be True or False, got {shared!r}")
    if shared and limit != 1:
        raise ValueError(f"a shared claim has limit 1, got limit {limit} (a name is a read/write lock or a semaphore, not both)")


def encode_acquire(
    name: str, owner: str, lease_ms: int, try_: bool = False, limit: int = 1, shared: bool = False,
    reclaim_token: int | None = None, reclaim_slot: int | None = None,
) -> bytes:
    """The ACQUIRE frame. Refuses only what the frame cannot carry and what no server accepts
    (ValueError: a lease or limit out of range, ``shared`` with a limit above 1); the server
    judges the rest. A limit of 1 is sent without OPTION_LIMIT: an exclusive claim's bytes are
    those of a server that knows no semaphores. ``reclaim_token``: a reclaim of that grant
    (OPTION_RECLAIM, docs/protocol.md section 14): the u64 token after lease_ms (and the
    limit), then, with a limit above 1, ``reclaim_slot`` as a u16 (required then, below the
    limit; refused for limit 1)."""
    if not 1 <= lease_ms <= 0xFFFFFFFF:
        raise ValueError(f"lease must be 1 .. 4294967295 ms, got {lease_ms}")
    check_limit(limit, shared)
    n = name.encode("utf-8")
    o = owner.encode("utf-8")
    with_limit = limit != 1
    tail = b""
    if reclaim_token is not None:
        if not 1 <= reclaim_token <= 0xFFFFFFFFFFFFFFFF:
            raise ValueError(f"a reclaim's token is 1 .. 2^64 - 1, got {reclaim_token}")
        tail = reclaim_token.to_bytes(8, "big")
        if with_limit:
            if reclaim_slot is None or not 0 <= reclaim_slot < limit:
                raise ValueError(f"a reclaim of a semaphore's grant names its slot 0 .. {limit - 1}, got {reclaim_slot}")
            tail += reclaim_slot.to_bytes(2, "big")
        elif reclaim_slot is not None:
            raise ValueError(f"a reclaim with limit 1 has no slot, got {reclaim_slot}")
    elif reclaim_slot is not None:
        raise ValueError("a reclaim slot without a reclaim token")
    body_len = (10 if with_limit else 8) + len(tail) + len(n) + len(o)
    if body_len > 0xFFFF:
        raise ValueError(f"name and owner are too long for one frame ({body_len} bytes)")
    options = (OPTION_TRY if try_ else 0) | (OPTION_SHARED if shared else 0) | (OPTION_LIMIT if with_limit else 0) | (OPTION_RECLAIM if tail else 0)
    if with_limit:
        head = struct.pack(">BBHBBIH", ACQUIRE, 0, body_len, PROTOCOL_VERSION, options, lease_ms, limit)
    else:
        head = struct.pack(">BBHBBI", ACQUIRE, 0, body_len, PROTOCOL_VERSION, options, lease_ms)
    return head + tail + struct.pack(">H", len(n)) + n + o


@dataclass(frozen=True)
class Frame:
    type: int
    flags: int
    token: int = 0  # ACQUIRED
    slot: int | None = None  # ACQUIRED with FLAG_SLOT
    code: int = 0  # ERROR
    message: str = ""  # ERROR

    @property
    def reply(self) -> bool:
        return bool(self.flags & FLAG_REPLY)


class ProtocolViolation(Exception):
    """The server sent something protocol version 1 does not allow: the connection is broken."""


class SpeaksTLS(ProtocolViolation):
    pass


class SpeaksHTTP(ProtocolViolation):
    pass


class Reader:
    """Decodes server frames from a byte stream; frames split across pushes and coalesced in one are both handled."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def push(self, chunk: bytes) -> list[Frame]:
        self._buf += chunk
        out: list[Frame] = []
        buf = self._buf
        while len(buf) >= 4:
            t, flags, n = buf[0], buf[1], (buf[2] << 8) | buf[3]
            _check_header(bytes(buf[:4]), t, n)
            if len(buf) < 4 + n:
                break
            body = bytes(buf[4 : 4 + n])
            if t == ACQUIRED:
                if bool(flags & FLAG_SLOT) != (n == 10):
                    raise ProtocolViolation(f"ACQUIRED with flags 0x{flags:02x} and a body of {n} bytes: FLAG_SLOT goes with 10 bytes (token and slot), no flag with 8")
                slot = (body[8] << 8) | body[9] if n == 10 else None
                out.append(Frame(t, flags, token=int.from_bytes(body[:8], "big"), slot=slot))
            elif t == ERROR:
                out.append(Frame(t, flags, code=body[0], message=body[1:].decode("utf-8", "replace")))
            else:
                out.append(Frame(t, flags))
            del buf[: 4 + n]
        return out


def _check_header(head: bytes, t: int, n: int) -> None:
    if t == ACQUIRED and n in (8, 10) or t == WAITING and n == 0 or t == ERROR and 1 <= n <= 1025:
        return
    if t in (0x15, 0x16):
        raise SpeaksTLS("the server speaks TLS (a TLS record arrived): pass tls= to the client")
    if head == b"HTTP":
        raise SpeaksHTTP("the server answered with HTTP: this is an HTTP port (the ops port, most likely), not the lock port")
    if t in (ACQUIRED, WAITING, ERROR):
        raise ProtocolViolation(f"server frame type 0x{t:02x} with body length {n} out of range")
    raise ProtocolViolation(f"unknown server frame type 0x{t:02x}")
