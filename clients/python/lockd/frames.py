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
OPTION_TRY = 0x01
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
    0x20: "PROTOCOL_ERROR",
    0x21: "BAD_REQUEST",
    0x22: "UNSUPPORTED_VERSION",
    0x23: "IO_TIMEOUT",
    0x24: "WRONG_SHARD",
}

HEARTBEAT_FRAME = bytes([HEARTBEAT, 0, 0, 0])


def code_name(code: int) -> str:
    """The protocol's name of an ERROR code, or UNKNOWN_0xNN."""
    return CODE_NAMES.get(code, f"UNKNOWN_0x{code:02x}")


def class_of_code(code: int) -> str:
    """'server' (0x0_), 'lock' (0x1_), 'client' (0x2_ and the undefined classes above)."""
    return {0: "server", 1: "lock"}.get(code >> 4, "client")


def encode_acquire(name: str, owner: str, lease_ms: int, try_: bool = False) -> bytes:
    """The ACQUIRE frame. Refuses only what the frame cannot carry (ValueError); the server judges the rest."""
    if not 1 <= lease_ms <= 0xFFFFFFFF:
        raise ValueError(f"lease must be 1 .. 4294967295 ms, got {lease_ms}")
    n = name.encode("utf-8")
    o = owner.encode("utf-8")
    body_len = 8 + len(n) + len(o)
    if body_len > 0xFFFF:
        raise ValueError(f"name and owner are too long for one frame ({body_len} bytes)")
    return struct.pack(">BBHBBIH", ACQUIRE, 0, body_len, PROTOCOL_VERSION, OPTION_TRY if try_ else 0, lease_ms, len(n)) + n + o


@dataclass(frozen=True)
class Frame:
    type: int
    flags: int
    token: int = 0  # ACQUIRED
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
                out.append(Frame(t, flags, token=int.from_bytes(body, "big")))
            elif t == ERROR:
                out.append(Frame(t, flags, code=body[0], message=body[1:].decode("utf-8", "replace")))
            else:
                out.append(Frame(t, flags))
            del buf[: 4 + n]
        return out


def _check_header(head: bytes, t: int, n: int) -> None:
    if t == ACQUIRED and n == 8 or t == WAITING and n == 0 or t == ERROR and 1 <= n <= 1025:
        return
    if t in (0x15, 0x16):
        raise SpeaksTLS("the server speaks TLS (a TLS record arrived): pass tls= to the client")
    if head == b"HTTP":
        raise SpeaksHTTP("the server answered with HTTP: this is an HTTP port (the ops port, most likely), not the lock port")
    if t in (ACQUIRED, WAITING, ERROR):
        raise ProtocolViolation(f"server frame type 0x{t:02x} with body length {n} out of range")
    raise ProtocolViolation(f"unknown server frame type 0x{t:02x}")
