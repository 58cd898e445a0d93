"""Shards (docs/protocol.md section 12): the server map string and the placement of lock
names on shards by rendezvous hashing, exactly as the TypeScript and Go clients do
(checked on test/conformance/placement.json)."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .errors import LockRequestError

MAX_GENERATION = 31
"""Tokens are generation << 48 | counter and stay below 2^53."""

_SHARD_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def weight(shard: str, lock: str) -> bytes:
    """The first 8 bytes of SHA-256(UTF-8(shard) || 0x00 || UTF-8(lock)): a big-endian weight."""
    return hashlib.sha256(shard.encode() + b"\0" + lock.encode()).digest()[:8]


def place_index(shards: list[str], lock: str) -> int:
    """Index of the shard ``lock`` belongs to: the largest weight; on equal weights the name first in byte order."""
    best = -1
    best_w = b""
    for i, s in enumerate(shards):
        w = weight(s, lock)
        if best < 0 or w > best_w or (w == best_w and s.encode() < shards[best].encode()):
            best, best_w = i, w
    return best


@dataclass(frozen=True)
class Shard:
    name: str
    """'' for the one shard of a plain address list."""
    addresses: list[tuple[str, int]]


@dataclass(frozen=True)
class ServerMap:
    generation: int
    shards: list[Shard]

    def names(self) -> list[str]:
        return [s.name for s in self.shards]

    def shard_of(self, lock: str) -> int:
        """Index of the shard ``lock`` belongs to (0 for a plain list)."""
        return 0 if len(self.shards) == 1 else place_index(self.names(), lock)

    def describe(self) -> str:
        return f"{','.join(self.names())} (generation {self.generation})"


def _bad(message: str) -> LockRequestError:
    return LockRequestError("BAD_REQUEST", message)


def _addresses(text: str) -> list[tuple[str, int]]:
    from .client import parse_addresses

    return parse_addresses(text)


def parse_server_map(servers: str) -> ServerMap:
    """'[gen=N;]NAME=HOST:PORT[,...];...' or a plain address list (one unnamed shard).
    Raises LockRequestError (BAD_REQUEST) naming the part that is wrong."""
    parts = [p.strip() for p in servers.split(";")]
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    generation = 0
    if parts[0].startswith("gen="):
        g = parts[0][4:].strip()
        if not g.isdigit() or not 0 <= int(g) <= MAX_GENERATION:
            raise _bad(f"generation {g!r} is not a whole number in 0..{MAX_GENERATION}")
        generation = int(g)
        parts = parts[1:]
        if not parts:
            raise _bad(f"{servers!r} has a generation but no servers")
    if len(parts) == 1 and "=" not in parts[0]:
        if parts[0] == "":
            raise _bad("no address given")
        return ServerMap(generation, [Shard("", _addresses(parts[0]))])
    shards: list[Shard] = []
    owners: dict[tuple[str, int], str] = {}
    for i, part in enumerate(parts, 1):
        name, eq, rest = part.partition("=")
        name = name.strip()
        if not eq:
            raise _bad(f"shard {i} of {servers!r} ({part!r}) has no NAME=")
        if name == "gen":
            raise _bad(f"shard {i} of {servers!r}: gen=N must come first, once")
        if not _SHARD_NAME.fullmatch(name):
            raise _bad(f"shard name {name!r} must be 1 to 63 of a-z 0-9 - _, starting with a letter or digit")
        if any(s.name == name for s in shards):
            raise _bad(f"shard {name!r} is named twice")
        try:
            addrs = _addresses(rest)
        except LockRequestError as e:
            raise _bad(f"shard {name!r} of the map: {e}") from None
        for a in addrs:
            if a in owners:
                raise _bad(f"{a[0]}:{a[1]} is in two shards ({owners[a]!r} and {name!r})")
            owners[a] = name
        shards.append(Shard(name, addrs))
    return ServerMap(generation, shards)


def format_address(addr: tuple[str, int]) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
