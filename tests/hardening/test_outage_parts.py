"""The parts that carry a run and its streams through a Redis outage, one at a time.

The writer runs against the real Redis, made unreachable by pointing the app at a port
where nothing listens; the SSE generator is fed a source that is unavailable for a while.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from core import events
from core import redis as core_redis
from core.events import Event, EventWriter, RedisOutageTooLong
from promptmgr.sse import SourceUnavailable, event_stream
from tests.helpers import free_port

pytestmark = pytest.mark.unit


@pytest.fixture
def unreachable(settings: Any, redis_url: str) -> Any:
    """Switch the app's Redis off (a port nobody listens on) and back on."""

    class Switch:
        def off(self) -> None:
            settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
            core_redis.reset_clients()

        def on(self) -> None:
            settings.REDIS_URL = redis_url
            core_redis.reset_clients()

    return Switch()


async def test_the_writer_holds_events_while_redis_is_gone_and_writes_them_in_order_after(
    unreachable: Any,
) -> None:
    writer = EventWriter(7, max_outage=60)
    assert [e.id for e in await writer.write([("a", {"n": 1})])] == [1]

    unreachable.off()
    assert await writer.write([("b", {"n": 2})]) == []
    assert await writer.write([("c", {"n": 3})]) == []  # still within the backoff: not even tried
    unreachable.on()
    written = await writer.drain()

    assert [(e.id, e.event) for e in written] == [(2, "b"), (3, "c")]
    assert [(e.id, e.event) for e in await events.read_events(7, 0)] == [(1, "a"), (2, "b"), (3, "c")]
    assert writer.held == []


async def test_the_writer_gives_up_past_the_outage_limit(unreachable: Any) -> None:
    writer = EventWriter(8, max_outage=0.3)
    unreachable.off()
    assert await writer.write([("a", {})]) == []
    await asyncio.sleep(0.4)

    with pytest.raises(RedisOutageTooLong, match="unreachable for more than 0 s"):
        await writer.drain()


async def test_what_the_writer_still_holds_when_it_gives_up_is_numbered_after_what_it_wrote(
    unreachable: Any,
) -> None:
    writer = EventWriter(9, max_outage=0.3)
    written = await writer.write([("a", {"n": 1})])
    unreachable.off()
    assert await writer.write([("b", {"n": 2}), ("c", {"n": 3})]) == []
    await asyncio.sleep(0.4)
    with pytest.raises(RedisOutageTooLong):
        await writer.drain()

    kept = [*written, *writer.held_events()]

    assert [(e.id, e.event, e.data) for e in kept] == [
        (1, "a", {"n": 1}),
        (2, "b", {"n": 2}),
        (3, "c", {"n": 3}),
    ]


class FlakySource:
    """Unavailable for the first ``down`` calls, then the events."""

    def __init__(self, events: list[Event], *, down: int) -> None:
        self.events, self.down, self.closed = events, down, False

    async def next_batch(self, after: int, wait_seconds: float) -> list[Event]:
        if self.down:
            self.down -= 1
            await asyncio.sleep(0.02)
            raise SourceUnavailable
        return [e for e in self.events if e.id > after]

    async def finished(self) -> bool:
        return True  # the run ended meanwhile: only Redis knows its closing events

    def close(self) -> None:
        self.closed = True


async def test_a_stream_keeps_waiting_through_a_short_outage_and_then_carries_on() -> None:
    source = FlakySource([Event(1, "prompt", {}), Event(2, "done", {"status": "completed"})], down=10)

    chunks = [
        c async for c in event_stream(source, after=0, heartbeat=0.05, closing_grace=0.05, max_outage=5)
    ]

    body = b"".join(chunks)
    assert b": keep-alive" in body  # heartbeats while it waited
    assert body.endswith(b'id: 2\nevent: done\ndata: {"status":"completed"}\n\n')
    assert b"unknown" not in body  # no made-up ending while the events could not be read
    assert source.closed


async def test_a_stream_ends_with_a_retry_hint_when_the_outage_lasts_too_long() -> None:
    source = FlakySource([Event(1, "prompt", {})], down=1000)

    chunks = [c async for c in event_stream(source, after=3, heartbeat=0.05, max_outage=0.2)]

    assert chunks[-1] == (
        b'retry: 5000\nid: 3\nevent: reconnect\ndata: {"reason":"unavailable","retry_ms":5000}\n\n'
    )


async def test_an_unexpected_error_ends_the_stream_cleanly_too() -> None:
    class Broken(FlakySource):
        async def next_batch(self, after: int, wait_seconds: float) -> list[Event]:
            raise RuntimeError("boom")

    chunks = [c async for c in event_stream(Broken([], down=0), after=4, heartbeat=0.05)]

    assert chunks[-1].startswith(b"retry: 5000\nid: 4\nevent: reconnect\n")


@pytest.mark.django_db
def test_an_outage_only_requests_met_is_declared_over_by_the_next_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from promptmgr.recovery import recover_orphaned_runs

    core_redis.outage_seen(ConnectionError("refused"))  # as the API's 503 handler reports it
    assert core_redis.outage_seconds() > 0

    recover_orphaned_runs()  # Redis answers again

    assert core_redis.outage_seconds() == 0
    assert any(r.getMessage().startswith("Redis is reachable again") for r in caplog.records)


async def test_an_append_whose_reply_was_lost_is_not_written_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis stopped between writing an append and sending its reply: the writer cannot
    tell, holds the events and tries again. Finding them in the stream (after another
    writer's event), it counts them as written instead of appending each a second time."""
    writer = EventWriter(10, max_outage=60)
    await writer.write([("a", {"n": 1})])
    real_append = events.append_events

    async def written_then_cut_off(run_id: int, batch: list[tuple[str, dict[str, Any]]]) -> list[int]:
        await real_append(run_id, batch)
        await real_append(run_id, [("card", {"by": "another writer"})])
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(events, "append_events", written_then_cut_off)
    assert await writer.write([("b", {"n": 2}), ("b", {"n": 2})]) == []
    monkeypatch.setattr(events, "append_events", real_append)
    written = await writer.drain()
    later = await writer.write([("c", {"n": 3})])

    assert [(e.id, e.event) for e in written] == [(2, "b"), (3, "b")]
    assert [(e.id, e.event) for e in later] == [(5, "c")]
    stored = [(e.id, e.event) for e in await events.read_events(10, 0)]
    assert stored == [(1, "a"), (2, "b"), (3, "b"), (4, "card"), (5, "c")]
    assert writer.held == []
