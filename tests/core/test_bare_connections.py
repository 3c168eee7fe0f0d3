"""The per-delta paths' own connections (``core.redis.bare_connection``) time out on a Redis
that stops answering, and connect again once it answers.

Between the app and the real Redis sits a relay that can go silent: it keeps accepting
and reading, and answers nothing, as a hung server or a dead network path does (a refused
connection is the outage tests' case, ``tests/hardening``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from core import events
from core import redis as core_redis

pytestmark = pytest.mark.unit


class SilentableRelay:
    """A TCP relay to Redis; while ``silent``, new connections are read and never answered."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 6379
        self.db = parts.path or "/0"
        self.silent = False
        self.server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}{self.db}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.silent:
                while await reader.read(65536):
                    pass
                return
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            writer.close()
            self._tasks.discard(task)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    finally:
        with contextlib.suppress(Exception):
            sink.close()


@pytest.fixture
async def relay(settings: Any, redis_url: str) -> AsyncIterator[SilentableRelay]:
    relay = SilentableRelay(redis_url)
    await relay.start()
    settings.REDIS_URL = relay.url
    core_redis.reset_clients()
    try:
        yield relay
    finally:
        settings.REDIS_URL = redis_url
        core_redis.reset_clients()
        await relay.stop()


async def test_an_append_to_a_silent_redis_times_out_and_the_next_one_connects_again(
    relay: SilentableRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "SOCKET_TIMEOUT", 0.5)
    relay.silent = True
    started = time.monotonic()

    with pytest.raises(redis.TimeoutError):
        await events.append_events(801, [("a", {})])

    assert time.monotonic() - started < 5
    assert not core_redis.append_connection().is_connected  # closed: it was out of step
    relay.silent = False
    # The same connection object connects again, and the stream holds the one append.
    assert await events.append_events(801, [("b", {})]) == [1]
    assert [e.event for e in await events.read_events(801, 0)] == ["b"]


async def test_the_streams_reader_reports_a_silent_redis_and_delivers_once_it_answers(
    relay: SilentableRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "SOCKET_TIMEOUT", 0.3)
    monkeypatch.setattr(events._TailHub, "BLOCK_MS", 200)
    relay.silent = True
    tail = events.run_tail(802, 0)
    try:
        deadline = time.monotonic() + 5
        while not tail.failing and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert tail.failing

        relay.silent = False
        waiting = asyncio.create_task(tail.wait(0, 10))
        await events.append_events(802, [("text_delta", {"text": "back"})])
        assert [(e.id, e.data) for e in await waiting] == [(1, {"text": "back"})]
        assert not tail.failing
    finally:
        tail.close()


async def test_an_exchange_cancelled_from_elsewhere_is_cancelled_not_timed_out(
    relay: SilentableRelay,
) -> None:
    # A worker's shutdown cancels the appender and the streams' reader mid-exchange: that
    # must stay a cancellation, which their callers end on, not become a Redis timeout.
    relay.silent = True
    connection = core_redis.bare_connection("test")
    exchange = asyncio.create_task(core_redis.bare_exchange(connection, [["PING"]], timeout=30))
    await asyncio.sleep(0.2)  # sent, and waiting for a reply that does not come

    exchange.cancel()

    with pytest.raises(asyncio.CancelledError):
        await exchange
    await connection.disconnect()


async def test_an_exchange_past_its_bound_raises_a_timeout_and_leaves_its_task_uncancelled(
    relay: SilentableRelay,
) -> None:
    relay.silent = True
    connection = core_redis.bare_connection("test")
    task = asyncio.current_task()
    assert task is not None

    with pytest.raises(redis.TimeoutError, match="PING within 0.3 s"):
        await core_redis.bare_exchange(connection, [["PING"]], timeout=0.3)

    # The bound's own cancellation was taken back: the task goes on as if never cancelled.
    assert task.cancelling() == 0
    assert not connection.is_connected
    await asyncio.sleep(0)  # would raise CancelledError had a cancellation been left pending


async def test_an_exchange_in_a_task_that_caught_a_cancellation_still_times_out(
    relay: SilentableRelay,
) -> None:
    # As asyncio.timeout: only a cancellation beyond those the task was already in is
    # someone else's (a shutdown's clean-up may have caught one and gone on).
    relay.silent = True
    connection = core_redis.bare_connection("test")

    async def after_a_caught_cancellation() -> int:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1)
        with pytest.raises(redis.TimeoutError):
            await core_redis.bare_exchange(connection, [["PING"]], timeout=0.3)
        return task.cancelling()

    assert await asyncio.create_task(after_a_caught_cancellation()) == 1
    await connection.disconnect()
