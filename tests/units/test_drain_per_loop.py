"""A worker's drain belongs to the event loop that began it, and to no loop after it."""

from __future__ import annotations

import asyncio
import gc

import pytest

from promptmgr import lifecycle

pytestmark = pytest.mark.unit


async def _mark_this_loop_draining() -> None:
    # What a drain that never reached the lifespan's shutdown leaves behind (a test's loop
    # that was closed mid-drain, a server killed in between).
    lifecycle._drain().closing_streams = True
    assert lifecycle.shutting_down()


async def _shutting_down() -> bool:
    return lifecycle.shutting_down()


def test_a_new_event_loop_never_inherits_a_closed_loops_drain() -> None:
    seen = []
    for _ in range(20):
        asyncio.run(_mark_this_loop_draining())
        gc.collect()  # the closed loop is freed: CPython hands its address to the next
        seen.append(asyncio.run(_shutting_down()))
    # A loop that took a drained loop's place would end every stream it serves at once.
    assert not any(seen)
