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
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler

from core.middleware import InlineViewStepsMixin


class PooledThreadHandler(InlineViewStepsMixin, ASGIHandler):
    """``ASGIHandler`` whose requests borrow a long-lived thread from a pool of ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._idle: list[ThreadPoolExecutor] = []
        self._made = 0

    def _borrow(self) -> ThreadPoolExecutor | None:
        if self._idle:
            # The thread used last: its connection and caches are the warmest.
            return self._idle.pop()
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
        executor = self._borrow()
        if executor is None:
            async with ThreadSensitiveContext():
                await self.handle(scope, receive, send)
            return
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            # A step the request left running (its client went away) finishes first: the
            # executor runs one call at a time, so the next borrower's calls queue behind it.
            self._idle.append(executor)
