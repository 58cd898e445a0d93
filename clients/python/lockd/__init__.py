"""lockd: a client for the lockd lock server (protocol version 1), standard library only.

Blocking::

    from lockd import Client
    client = Client("127.0.0.1:7700")
    with client.lock("jobs/nightly", lease=5) as lock:
        do_work(fencing_token=lock.token, stop=lock.lost)

A semaphore (at most three holders at once, each with its slot) and a shared claim::

    with client.lock("jobs/render", limit=3) as lock:
        render(slot=lock.slot, fencing_token=lock.token)
    with client.lock("config", shared=True) as lock:
        read_config(fencing_token=lock.token)

asyncio::

    from lockd.aio import AsyncClient
    async with AsyncClient("127.0.0.1:7700").lock("jobs/nightly") as lock:
        await do_work(lock.token)   # this task is cancelled if the lock is lost
"""
from .client import DEFAULT_LEASE, DEFAULT_RECONNECT, DEFAULT_SERVER, Client, Lock, parse_addresses
from .errors import (
    LockAbortedError,
    LockBusyError,
    LockDelayedError,
    LockError,
    LimitMismatchError,
    LockLostError,
    LockRequestError,
    ServerUnavailableError,
    WaitTimeoutError,
    WrongShardError,
)
from .shard import ServerMap, Shard, parse_server_map, place_index, weight
from .schedule import PAUSE_BOUNDS, PauseBounds, base_interval, client_timeout, heartbeat_interval, reconnect_pause, smooth_rtt

__all__ = [
    "Client", "Lock", "parse_addresses", "DEFAULT_LEASE", "DEFAULT_RECONNECT", "DEFAULT_SERVER",
    "LockError", "LockBusyError", "LockDelayedError", "WaitTimeoutError", "LockLostError", "ServerUnavailableError", "LockRequestError", "LockAbortedError", "WrongShardError", "LimitMismatchError",
    "ServerMap", "Shard", "parse_server_map", "place_index", "weight",
    "base_interval", "client_timeout", "heartbeat_interval", "smooth_rtt", "reconnect_pause", "PauseBounds", "PAUSE_BOUNDS",
]
