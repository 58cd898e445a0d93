"""The asyncio API, over the blocking client's session threads: the claim
waits in a worker thread (cancellable), and a loss cancels the task doing
the guarded work from the session thread, through call_soon_threadsafe."""
from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, Callable, TypeVar

from .client import Client, Lock
from .errors import LockLostError

T = TypeVar("T")


class AsyncClient:
    """Same arguments as Client."""

    def __init__(self, *args, **kwargs) -> None:
        self.client = Client(*args, **kwargs)

    async def acquire(self, name: str, **options) -> Lock:
        """Claim ``name``; cancelling the awaiting task cancels the claim (nothing stays queued)."""
        cancel = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(None, lambda: self.client.acquire(name, cancel=cancel, **options))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()
            try:
                lock = await future
            except Exception:
                raise asyncio.CancelledError() from None
            await asyncio.to_thread(lock.release)
            raise

    def lock(self, name: str, **options) -> "_Held":
        """``async with client.lock(name) as lock:`` the body's task is cancelled the moment
        the lock is lost, and the ``async with`` then raises the LockLostError."""
        return _Held(self, name, options)

    async def with_lock(self, name: str, fn: Callable[[Lock], Awaitable[T]], **options) -> T:
        """Acquire, run ``await fn(lock)`` in a task that is cancelled on loss, release.
        Raises the LockLostError if the lock was lost; ``fn`` is never run twice."""
        async with self.lock(name, **options) as held:
            return await fn(held)


class _Held:
    def __init__(self, client: AsyncClient, name: str, options: dict) -> None:
        self.client, self.name, self.options = client, name, options
        self.held: Lock | None = None
        self.task: asyncio.Task | None = None
        self.cancelled_by_loss = False

    async def __aenter__(self) -> Lock:
        self.held = await self.client.acquire(self.name, **self.options)
        self.task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def lost(_: LockLostError) -> None:
            loop.call_soon_threadsafe(self._cancel)

        self.held.on_lost(lost)
        return self.held

    def _cancel(self) -> None:
        assert self.held is not None and self.task is not None
        if self.held.error is not None and self.held.error.why != "released" and not self.task.done():
            self.cancelled_by_loss = True
            self.task.cancel()

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        assert self.held is not None and self.task is not None
        await asyncio.to_thread(self.held.release)
        error = self.held.error
        if self.cancelled_by_loss and error is not None:
            self.task.uncancel()
            raise error
        if exc_type is None and error is not None and error.why != "released":
            raise error
        return False
