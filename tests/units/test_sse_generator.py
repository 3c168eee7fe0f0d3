"""The SSE generator, fed a finite source (no HTTP, no Redis)."""

from __future__ import annotations

import asyncio

import pytest

from core.events import Event
from promptmgr.sse import event_stream

pytestmark = pytest.mark.unit


class ListSource:
    def __init__(self, events: list[Event], *, finished: bool = True) -> None:
        self.events = events
        self._finished = finished
        self.waits: list[float] = []
        self.closed = False

    async def next_batch(self, after: int, wait_seconds: float) -> list[Event]:
        self.waits.append(wait_seconds)
        # Blocks like the Redis source: until an event is there or the wait is over.
        deadline = asyncio.get_running_loop().time() + wait_seconds
        while not (batch := [e for e in self.events if e.id > after][:2]):
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.01)
        return batch

    async def finished(self) -> bool:
        return self._finished

    def close(self) -> None:
        self.closed = True


async def collect(source: ListSource, after: int = 0, heartbeat: float = 0.05) -> list[bytes]:
    stream = event_stream(source, after=after, heartbeat=heartbeat, closing_grace=0.05)
    return [chunk async for chunk in stream]


EVENTS = [Event(1, "prompt", {"text": "hi"}), Event(2, "text_delta", {"text": "a\nb"}), Event(3, "done", {})]


async def test_every_event_carries_id_and_event_and_done_ends_the_stream() -> None:
    chunks = await collect(ListSource(EVENTS))
    assert chunks[0] == b"retry: 2000\n\n"
    # The source hands out two events at a time: each batch is written as one chunk.
    assert chunks[1:] == [
        b'id: 1\nevent: prompt\ndata: {"text":"hi"}\n\nid: 2\nevent: text_delta\ndata: {"text":"a\\nb"}\n\n',
        b"id: 3\nevent: done\ndata: {}\n\n",
    ]


async def test_it_replays_only_events_after_last_event_id() -> None:
    chunks = await collect(ListSource(EVENTS), after=2)
    assert chunks[1:] == [b"id: 3\nevent: done\ndata: {}\n\n"]


async def test_a_quiet_stream_gets_heartbeat_comments() -> None:
    source = ListSource([Event(1, "prompt", {})], finished=False)
    stream = event_stream(source, after=0, heartbeat=0.05)
    received = [await stream.__anext__() for _ in range(4)]
    assert received[2] == b": keep-alive\n\n" and received[3] == b": keep-alive\n\n"
    await stream.aclose()


async def test_a_run_that_ended_without_done_still_ends_the_stream() -> None:
    chunks = await collect(ListSource([Event(1, "prompt", {})], finished=True))
    assert chunks[-1] == b'id: 2\nevent: done\ndata: {"status":"unknown"}\n\n'


async def test_closing_events_written_just_after_the_run_ended_are_not_replaced_by_a_made_up_done() -> None:
    source = ListSource([Event(1, "prompt", {})], finished=True)

    async def close_the_run_late() -> None:
        await asyncio.sleep(0.12)  # after the first heartbeat has seen the run ended
        source.events += [
            Event(2, "run_status", {"status": "completed"}),
            Event(3, "done", {"status": "completed"}),
        ]

    closer = asyncio.create_task(close_the_run_late())
    stream = event_stream(source, after=0, heartbeat=0.05, closing_grace=1.0)
    chunks = [chunk async for chunk in stream]
    await closer
    assert chunks[-1].endswith(b'id: 3\nevent: done\ndata: {"status":"completed"}\n\n')
    assert b"unknown" not in b"".join(chunks)


async def test_client_going_away_cancels_and_reraises() -> None:
    source = ListSource([], finished=False)

    async def consume() -> None:
        async for _chunk in event_stream(source, after=0, heartbeat=10):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_an_event_read_from_redis_is_served_as_stored_and_decoded_when_asked() -> None:
    stored = '{"text":"é","n":1.50}'  # as written: a float's spelling and non-ASCII kept
    event = Event(7, "text_delta", raw=stored)

    assert event.to_sse() == f"id: 7\nevent: text_delta\ndata: {stored}\n\n".encode()
    assert event.data == {"text": "é", "n": 1.5}
    assert event == Event(7, "text_delta", {"text": "é", "n": 1.5})
    assert event != Event(7, "text_delta", {"text": "e"})


def test_an_event_needs_its_data_or_its_text() -> None:
    with pytest.raises(TypeError):
        Event(1, "prompt")
