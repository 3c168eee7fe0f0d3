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
    assert events._hub(asyncio.get_running_loop())._task is not None
    first.close()
    second.close()
    # The last tail gone, the shared reader stops (and closes its connection).
    assert events._hub(asyncio.get_running_loop())._task is None
    assert first.stopped and second.stopped


async def test_a_tail_started_behind_the_stream_gets_only_newer_events() -> None:
    await events.append_events(703, [("a", {}), ("a", {})])
    tail = events.run_tail(703, 2)
    waiting = asyncio.create_task(tail.wait(2, 5))
    await asyncio.sleep(0.1)
    await events.append_events(703, [("c", {})])
    assert [(e.id, e.event) for e in await waiting] == [(3, "c")]
    tail.close()
