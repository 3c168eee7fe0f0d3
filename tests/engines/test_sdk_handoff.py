"""How the SDK engine knows the supervisor has streamed what came before a question's card.

The supervisor takes messages from the turn (``next_item``, ``ready_item``) and, by asking
for the next one with ``next_item``, says that those taken before are in the event stream.
"""

from __future__ import annotations

import asyncio

import pytest

from promptmgr.engines.base import Message
from promptmgr.engines.sdk import Handoff
from promptmgr.processes import TIMEOUT

pytestmark = pytest.mark.unit


def message(kind: str) -> Message:
    return Message({"type": kind}, b"")


async def still_waiting(task: asyncio.Task[None]) -> bool:
    await asyncio.sleep(0.05)
    return not task.done()


async def test_caught_up_waits_until_the_supervisor_asks_for_more_after_taking_the_messages() -> None:
    handoff = Handoff()
    handoff.put(message("assistant"))
    handoff.put(message("control_request"))
    waiting = asyncio.create_task(handoff.caught_up(5))
    assert await still_waiting(waiting)

    assert await handoff.next(1) == message("assistant")
    assert handoff.ready() == message("control_request")
    assert handoff.ready() is TIMEOUT
    assert await still_waiting(waiting)  # taken, but the batch is not flushed yet

    assert await handoff.next(0.01) is TIMEOUT
    await asyncio.wait_for(waiting, 1)


async def test_caught_up_does_not_wait_for_messages_that_came_after_it() -> None:
    handoff = Handoff()
    handoff.put(message("assistant"))
    waiting = asyncio.create_task(handoff.caught_up(5))
    await handoff.next(1)
    handoff.put(message("stream_event"))

    await handoff.next(1)  # the first one is handled; the later one only taken

    await asyncio.wait_for(waiting, 1)


async def test_caught_up_gives_up_after_its_timeout_and_the_end_of_output_is_none() -> None:
    handoff = Handoff()
    handoff.put(message("assistant"))
    handoff.end()

    await asyncio.wait_for(handoff.caught_up(0.1), 1)  # nobody reads: it gives up

    assert await handoff.next(1) == message("assistant")
    assert handoff.ready() is None
