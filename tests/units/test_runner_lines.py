"""What the supervisor makes of lines it cannot show."""

from __future__ import annotations

from typing import Any

from promptmgr import live
from promptmgr.processes import Line
from promptmgr.runner import RunSupervisor

MiB = 1024 * 1024


async def test_an_over_long_line_is_left_out_with_a_message_that_says_so() -> None:
    supervisor = RunSupervisor(run_id=424242)
    ctx: Any = None  # not needed for a line that is left out

    await supervisor._on_line(ctx, Line(b"x" * (16 * MiB), truncated=True))

    [event] = await live.read_events(424242, 0)
    assert event.event == "error"
    assert event.data == {
        "message": "Claude Code printed a line of more than 16 MB; it was left out of the stream."
    }
