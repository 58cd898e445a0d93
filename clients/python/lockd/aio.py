"""The asyncio API, over the blocking client's session threads: the claim
waits in a thread of its own (cancellable), and a loss cancels the task
doing the guarded work from the session thread, through
call_soon_threadsafe."""
from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, Callable, TypeVar

from .client import Client, Lock
from .errors import LockLostError

T = TypeVar("T")


def _in_thread(fn: Callable[[], T], orphan: Callable[[T], object] | None = None) -> "asyncio.Future[T]":
    """Run the blocking ``fn`` in a thread of its own; its outcome as a future of the running loop.

    Not the loop's default executor: that pool has min(32, CPUs + 4) threads,
    and a claim waits there for as long as the lock is held elsewhere, so a
    handful of waiting claims filled it and every later claim (and anything
    else the application runs there) queued behind them, cancellation
    included. A thread per claim costs what the claim's session thread
    already costs.

    ``orphan`` gets a result nobody will take (the future was cancelled, or
    the loop closed, before ``fn`` returned): a granted Lock is released
    there, not left held by its session thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def drop(value) -> None:
        if orphan is not None:
            threading.Thread(target=orphan, args=(value,), name="lockd-aio-orphan", daemon=True).start()

    def settle(ok: bool, value) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)
        elif ok:
            drop(value)

    def run() -> None:
        try:
            outcome = (True, fn())
        except BaseException as error:  # handed to the awaiting task, as run_in_executor does
            outcome = (False, error)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody awaits the outcome any more
            if outcome[0]:
                drop(outcome[1])

    threading.Thread(target=run, name="lockd-aio", daemon=True).start()
    return future


class AsyncClient:
    """Same arguments as Client."""

    def __init__(self, *args, **kwargs) -> None:
        self.client = Client(*args, **kwargs)

    async def acquire(self, name: str, **options) -> Lock:
        """Claim ``name``; cancelling the awaiting task cancels the claim (nothing stays queued).
        Options as Client.acquire; ``on_reclaim(lock)`` is called on this event loop (a plain
        callable: schedule a coroutine with asyncio.create_task from it)."""
        cancel = threading.Event()
        on_reclaim = options.get("on_reclaim")
        if on_reclaim is not None:
            loop = asyncio.get_running_loop()

            def reclaimed(lock: Lock) -> None:
                try:
                    loop.call_soon_threadsafe(on_reclaim, lock)
                except RuntimeError:  # the loop is closed: nobody to tell
                    pass

            options = {**options, "on_reclaim": reclaimed}
        future = _in_thread(lambda: self.client.acquire(name, cancel=cancel, **options), orphan=lambda lock: lock.release())
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()
            try:
                lock = await future
            except Exception:
                raise asyncio.CancelledError() from None
            await _in_thread(lock.release)
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
        await _in_thread(self.held.release)
        error = self.held.error
        if self.cancelled_by_loss and error is not None:
            self.task.uncancel()
            raise error
        if exc_type is None and error is not None and error.why != "released":
            raise error
        return False
