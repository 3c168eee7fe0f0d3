"""The tails of a worker's runs share one reader, and a tail that joins is read at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from core import events

pytestmark = pytest.mark.unit


async def test_tails_of_several_runs_get_their_own_events_from_one_reader() -> None:
    first = events.run_tail(701, 0)
    waiting = asyncio.create_task(first.wait(0, 5))
    await asyncio.sleep(0.2)  # the reader is blocked on run 701's stream alone
    # A second run's tail joins while that read is under way: it must not wait for it to end.
    second = events.run_tail(702, 0)
    started = time.monotonic()
    second_waiting = asyncio.create_task(second.wait(0, 5))
    await asyncio.sleep(0.2)
    await events.append_events(702, [("b", {"n": 1})])
    got_second = await second_waiting
    assert time.monotonic() - started < 2  # not the reader's 10-second block
    await events.append_events(701, [("a", {"n": 1}), ("a", {"n": 2})])
    got_first = await waiting

    assert [(e.id, e.event) for e in got_first] == [(1, "a"), (2, "a")]
    assert [(e.id, e.event) for e in got_second] == [(1, "b")]
    assert events._hubs.get()._task is not None
    first.close()
    second.close()
    # The last tail gone, the shared reader stops (and closes its connection).
    assert events._hubs.get()._task is None
    assert first.stopped and second.stopped


async def test_a_tail_started_behind_the_stream_gets_only_newer_events() -> None:
    await events.append_events(703, [("a", {}), ("a", {})])
    tail = events.run_tail(703, 2)
    waiting = asyncio.create_task(tail.wait(2, 5))
    await asyncio.sleep(0.1)
    await events.append_events(703, [("c", {})])
    assert [(e.id, e.event) for e in await waiting] == [(3, "c")]
    tail.close()


async def test_a_shutdown_waits_until_the_closing_events_written_have_reached_the_waiting_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The shared reader pauses between reads that come back at once (a busy moment); the
    # closing events land in such a pause.
    monkeypatch.setattr(events._TailHub, "READ_INTERVAL", 0.5)
    await events.append_events(703, [("text_delta", {"text": "hi"})])
    tail = events.run_tail(703, 0)
    received: list[str] = []

    async def stream() -> None:
        after = 0
        while "done" not in received:
            batch = await tail.wait(after, 5)
            received.extend(event.event for event in batch)
            after = batch[-1].id if batch else after

    watching = asyncio.create_task(stream())
    while not received:  # the reader's first read came back at once: it pauses now
        await asyncio.sleep(0.01)
    await events.append_events(703, [("run_status", {"status": "cancelled"}), ("done", {})])

    # The worker's drain, right after the run wrote its last events: the stream must have
    # them before it is told to reconnect.
    await events.tails_delivered([703], timeout=5)

    assert received == ["text_delta", "run_status", "done"]
    await watching
    tail.close()


async def test_waiting_for_runs_without_a_tail_here_returns_at_once() -> None:
    started = time.monotonic()

    await events.tails_delivered([704], timeout=5)

    assert time.monotonic() - started < 1


async def test_a_wait_with_nothing_arriving_returns_nothing_after_its_timeout() -> None:
    tail = events.run_tail(705, 0)
    started = time.monotonic()
    assert await tail.wait(0, 0.2) == []
    assert 0.15 < time.monotonic() - started < 2
    tail.close()


def stopped(tail: events.RunTail) -> bool:
    return tail.stopped


async def test_a_tail_stops_once_no_waiter_came_back_within_its_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(events.RunTail, "LINGER", 0.3)
    tail = events.run_tail(706, 0)
    # Waiters come and go, as a stream's client waits once per batch.
    for index in range(1, 6):
        waiting = asyncio.create_task(tail.wait(index - 1, 5))
        await asyncio.sleep(0.01)
        await events.append_events(706, [("a", {"n": index})])
        assert [e.id for e in await waiting] == [index]
        await asyncio.sleep(0.1)  # less than the linger between waits
    assert not stopped(tail)
    await asyncio.sleep(0.5)  # no waiter for longer than the linger
    assert stopped(tail)
    assert events._tails.get((id(asyncio.get_running_loop()), 706)) is None


async def test_a_waiter_that_goes_away_leaves_the_others_their_batch() -> None:
    tail = events.run_tail(707, 0)
    leaving = asyncio.create_task(tail.wait(0, 5))
    staying = asyncio.create_task(tail.wait(0, 5))
    await asyncio.sleep(0.05)
    leaving.cancel()
    await events.append_events(707, [("a", {})])
    assert [e.id for e in await staying] == [1]
    with pytest.raises(asyncio.CancelledError):
        await leaving
    tail.close()
