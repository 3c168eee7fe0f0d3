"""Django requests on a pool of long-lived threads, instead of a new thread per request.

Django's ``ASGIHandler`` enters a fresh ``ThreadSensitiveContext`` for every request: the
request's synchronous steps (its session, user and queries) run on a thread made for it,
which opens a database connection of its own, closes it at the end and is joined by yet
another new thread. On this 2-core VM that made a session-authenticated 404 cost 10 ms
(bench/askuser_latency.py, the submit-answer ack). Here each request borrows one of
``REQUEST_THREADS`` single-thread executors for its duration (asgiref's
``ThreadSensitiveContext(executor=...)``), so its thread and that thread's database
connection (kept ``DB_CONN_MAX_AGE`` seconds) serve the next request too.

A request still runs its synchronous steps on one thread of its own while it lasts, as
Django expects. When every pooled thread is lent out, a request gets Django's own
thread-per-request, so a crowd never waits on the pool.

A pooled thread left idle for ``IDLE_CLOSE_SECONDS`` closes its database connection,
except the one lent next: a crowd that has gone leaves one warm connection, not one per
thread it happened to use (which made the worker's resting file descriptors depend on
how busy its past had been, bench/streams_footprint.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler
from django.db import connections

from core.middleware import InlineViewStepsMixin

# How long a pooled thread other than the next one to lend stays idle before it closes its
# database connection: the rest the Redis pools give an idle connection too, so one figure
# says when a worker's idle connections are gone (bench/streams_footprint.py waits for it).
from core.redis import IDLE_CLOSE_SECONDS


class PooledThreadHandler(InlineViewStepsMixin, ASGIHandler):
    """``ASGIHandler`` whose requests borrow a long-lived thread from a pool of ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._idle: list[ThreadPoolExecutor] = []
        self._made = 0
        # Idle threads whose connection is still open -> when they were given back.
        self._idle_since: dict[ThreadPoolExecutor, float] = {}
        self._close_timer: asyncio.TimerHandle | None = None

    def _borrow(self) -> ThreadPoolExecutor | None:
        if self._idle:
            # The thread used last: its connection and caches are the warmest.
            executor = self._idle.pop()
            self._idle_since.pop(executor, None)
            return executor
        if self._made < self.size:
            self._made += 1
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")
        return None

    @property
    def threads_made(self) -> int:
        return self._made

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        async with self.borrowed_thread():
            await self.handle(scope, receive, send)

    @contextlib.asynccontextmanager
    async def borrowed_thread(self) -> AsyncIterator[None]:
        """The synchronous steps inside run on one pooled thread (Django's own thread for
        the purpose when every pooled one is lent out): a request's, or a click's from the
        page's click channel (``askuser.clicks``)."""
        executor = self._borrow()
        if executor is None:
            async with ThreadSensitiveContext():
                yield
            return
        try:
            async with ThreadSensitiveContext(executor=executor):
                yield
        finally:
            self._give_back(executor)

    def _give_back(self, executor: ThreadPoolExecutor) -> None:
        self._idle.append(executor)
        self._idle_since[executor] = time.monotonic()
        if len(self._idle) > 1 and self._close_timer is None:
            self._close_timer = asyncio.get_running_loop().call_later(
                IDLE_CLOSE_SECONDS, self._close_idle_connections
            )

    def _close_idle_connections(self) -> None:
        """Close the database connections of the threads idle for ``IDLE_CLOSE_SECONDS``,
        all but the one lent next; look again later while some are idle for less."""
        self._close_timer = None
        now = time.monotonic()
        younger = False
        for executor in self._idle[:-1]:
            since = self._idle_since.get(executor)
            if since is None:  # closed already
                continue
            if now - since < IDLE_CLOSE_SECONDS:
                younger = True
                continue
            del self._idle_since[executor]
            # On the thread itself (Django's connections are per thread). A step a request
            # left running (its client went away) finishes first: the executor runs one call
            # at a time, and the next borrower's calls queue behind this one; the next query
            # connects again.
            executor.submit(connections.close_all)
        if younger:
            self._close_timer = asyncio.get_running_loop().call_later(
                IDLE_CLOSE_SECONDS, self._close_idle_connections
            )
