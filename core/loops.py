"""One object per running event loop.

A worker process runs several event loops at once (the web server's, the queue worker's
thread, a test's), and what is bound to a loop (a redis.asyncio client, a semaphore, a
task hub, a render process) must never be awaited from another: each loop gets its own,
made on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """The running loop's ``T``, made by ``make(loop)`` the first time that loop asks."""

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self._make = make
        self._made: dict[int, tuple[asyncio.AbstractEventLoop, T]] = {}

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        found = self._made.get(id(loop))
        # The identity check guards against a new loop reusing a dead loop's id.
        if found is None or found[0] is not loop:
            found = self._made[id(loop)] = (loop, self._make(loop))
        return found[1]

    def discard(self) -> None:
        """Forget the running loop's ``T`` (its loop is ending)."""
        loop = asyncio.get_running_loop()
        found = self._made.get(id(loop))
        if found is not None and found[0] is loop:
            del self._made[id(loop)]

    def values(self) -> list[T]:
        return [made for _loop, made in self._made.values()]

    def clear(self) -> None:
        self._made.clear()
