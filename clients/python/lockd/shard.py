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


_WRONG_SHARD = re.compile(
    r"this server is shard ([a-z0-9][a-z0-9_-]*) of ([a-z0-9][a-z0-9_,-]*) \(generation (\d+)\), where this lock belongs to shard ([a-z0-9][a-z0-9_-]*):"
)


def describe_mismatch(names: list[str], generation: int, shard: str, address: str | None, server_message: str) -> str:
    """A WRONG_SHARD refusal in the client's words (the same as the TypeScript client's), after
    "lock NAME: ": where the client sent the name (shard, and address when known), what the
    server there is (read from its message, docs/protocol.md section 12.2), and what differs:
    the shard names (and counts), the generation, or the address the map lists under the
    wrong shard. A server message in other words is passed on."""
    sent_to = "" if address is None else f" and sent it to {address}"
    head = f"the client's map {','.join(names)} (generation {generation}) places it on shard {shard}{sent_to}"
    m = _WRONG_SHARD.match(server_message)
    if m is None:
        return f"{head}, but {server_message or 'the server says it is another shard' + chr(39) + 's'}"
    s_shard, s_names, s_gen, s_owner = m[1], m[2].split(","), int(m[3]), m[4]
    only_ours = [n for n in names if n not in s_names]
    only_theirs = [n for n in s_names if n not in names]
    same_names = not only_ours and not only_theirs
    same_generation = s_gen == generation
    differs: list[str] = []
    if not same_names:
        only = [part for part in (
            f"{','.join(only_ours)} only in the client's" if only_ours else "",
            f"{','.join(only_theirs)} only in the server's" if only_theirs else "",
        ) if part]
        differs.append(f"the shards ({len(names)} in the client's map, {len(s_names)} in the server's; {'; '.join(only)})")
    if not same_generation:
        differs.append(f"the generation ({generation} in the client's map, {s_gen} in the server's)")
    if s_shard != shard:
        at = "the address it asked" if address is None else address
        differs.append(f"the addresses: the client's map lists {at}, a server of shard {s_shard}, under shard {shard}")
    there = "the server" if address is None else "the server there"
    server_map = "of the same shards and generation" if same_names and same_generation else f"of {','.join(s_names)} (generation {s_gen})"
    owner = "" if s_owner == shard else f", where it belongs to shard {s_owner}"
    what = "the maps differ" if not differs else f"what differs is {', and '.join(differs)}"
    return f"{head}, but {there} is shard {s_shard} {server_map}{owner}: {what}; fix the map (LOCKD_SERVER) and claim again"
