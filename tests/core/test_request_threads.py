"""Requests borrow long-lived threads (``promptmgr.request_threads``): a request's
synchronous steps run on a pooled thread whose database connection serves the next
request too, instead of a new thread and connection per request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import signals
from django.db import connection

from promptmgr.request_threads import PooledThreadHandler
from tests.helpers import asgi_request, http_scope

pytestmark = pytest.mark.unit


async def get(handler: PooledThreadHandler, path: str = "/accounts/login/", method: str = "GET") -> int:
    """One request (a GET unless told) through the handler as an ASGI server sends it, with
    no body; returns the status."""
    sent = await asgi_request(handler, http_scope(path, method))
    return int(sent[0]["status"])


@pytest.fixture
def request_threads() -> Iterator[list[tuple[threading.Thread, Any]]]:
    """(thread, database connection) of each request, seen as the request ends on its thread."""
    # The objects themselves, not their ids: a finished thread's ident can be reused.
    seen: list[tuple[threading.Thread, Any]] = []

    def record(**_kwargs: Any) -> None:
        connection.ensure_connection()
        seen.append((threading.current_thread(), connection.connection))

    signals.request_finished.connect(record)
    yield seen
    signals.request_finished.disconnect(record)


@pytest.mark.django_db(transaction=True)
async def test_requests_one_after_another_share_one_thread_and_its_database_connection(
    request_threads: list[tuple[threading.Thread, Any]],
) -> None:
    handler = PooledThreadHandler(4)

    statuses = [await get(handler) for _ in range(3)]

    assert statuses == [200, 200, 200]
    assert handler.threads_made == 1
    assert len(request_threads) == 3
    (thread, conn), *later = request_threads
    assert all(t is thread and c is conn for t, c in later), request_threads
    assert thread is not threading.current_thread()  # not the event loop's thread


@pytest.mark.django_db(transaction=True)
async def test_requests_at_once_get_threads_of_their_own_up_to_the_pool_size_and_beyond(
    request_threads: list[tuple[threading.Thread, Any]],
) -> None:
    handler = PooledThreadHandler(2)

    statuses = await asyncio.gather(*(get(handler) for _ in range(4)))

    assert statuses == [200] * 4
    assert handler.threads_made == 2
    # Each request ran on one thread of its own while it lasted: two pooled ones and, past
    # the pool, two made for the request (as Django does for every request).
    assert len({id(thread) for thread, _conn in request_threads}) == 4


def test_a_borrowed_thread_is_lent_again_once_given_back() -> None:
    handler = PooledThreadHandler(1)
    first = handler._borrow()
    assert first is not None
    assert handler._borrow() is None  # the only pooled thread is lent out

    handler._idle.append(first)

    assert handler._borrow() is first
    first.shutdown()


@pytest.mark.django_db(transaction=True)
async def test_the_csrf_check_runs_on_the_event_loop_and_still_refuses_a_post_without_a_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.middleware import csrf

    checked_on: list[threading.Thread] = []
    check = csrf.CsrfViewMiddleware.process_view

    def recording(self: Any, *args: Any) -> Any:
        checked_on.append(threading.current_thread())
        return check(self, *args)

    monkeypatch.setattr(csrf.CsrfViewMiddleware, "process_view", recording)
    handler = PooledThreadHandler(2)

    # A form post (the sign-in page) with no CSRF cookie and no token.
    assert await get(handler, method="POST") == 403
    assert checked_on == [threading.current_thread()]  # no hand-over to a request thread


@pytest.mark.django_db(transaction=True)
async def test_threads_a_crowd_used_close_their_database_connections_once_idle_but_the_next_one_lent(
    monkeypatch: pytest.MonkeyPatch, request_threads: list[tuple[threading.Thread, Any]]
) -> None:
    monkeypatch.setattr("promptmgr.request_threads.IDLE_CLOSE_SECONDS", 0.2)
    handler = PooledThreadHandler(3)

    def connected() -> bool:
        return connection.connection is not None

    async def connected_threads() -> list[bool]:
        # Asked on each idle thread itself: Django's connections are per thread.
        return [await asyncio.wrap_future(e.submit(connected)) for e in handler._idle]

    # Three at once, each on a pooled thread of its own, each connected (request_threads).
    assert await asyncio.gather(*(get(handler) for _ in range(3))) == [200] * 3
    assert await connected_threads() == [True, True, True]

    # Idle for less than the time: nothing is closed yet.
    await asyncio.sleep(0.1)
    assert await connected_threads() == [True, True, True]

    # Then nobody comes: only the thread lent next keeps its connection.
    await asyncio.sleep(0.5)
    assert await connected_threads() == [False, False, True]
    # And a request on a closed one connects again.
    assert await asyncio.gather(*(get(handler) for _ in range(3))) == [200] * 3
    assert await connected_threads() == [True, True, True]
    for executor in handler._idle:
        executor.shutdown()
