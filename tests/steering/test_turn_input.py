"""``engines.inbox.TurnInput``: how the CLI's lifecycle lines decide a message's delivery and the
input's end. The line shapes are the bundled CLI's (tests/harness/test_stream_json_input.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from promptmgr.engines.inbox import Delivery, TurnInput

pytestmark = pytest.mark.unit


class Pipe:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.closed = False

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise BrokenPipeError
        self.lines.append(json.loads(data))

    def close(self) -> None:
        self.closed = True


def started(message_id: str) -> dict[str, Any]:
    return {"type": "command_lifecycle", "command_uuid": message_id, "state": "started"}


RESULT = {"type": "result", "subtype": "success"}


@pytest.mark.asyncio
async def test_a_message_taken_in_before_the_result_joined_the_running_turn() -> None:
    pipe = Pipe()
    turn = TurnInput(write=pipe.write, end=pipe.close)
    await turn.send_prompt("Do it", "p")
    turn.observe(started("p"))
    assert await turn.send("Also this", "m")
    assert pipe.lines[1] == {
        "type": "user",
        "message": {"role": "user", "content": "Also this"},
        "parent_tool_use_id": None,
        "uuid": "m",
    }
    turn.observe(started("m"))
    assert turn.take_deliveries() == [Delivery("m", "turn")]
    assert not pipe.closed
    turn.observe(RESULT)
    assert (pipe.closed, turn.ended) == (True, True)
    assert not await turn.send("Too late", "n")


@pytest.mark.asyncio
async def test_a_message_taken_in_after_the_result_starts_the_next_turn_and_keeps_the_input_open() -> None:
    pipe = Pipe()
    turn = TurnInput(write=pipe.write, end=pipe.close)
    await turn.send_prompt("Do it", "p")
    turn.observe(started("p"))
    await turn.send("Then this", "m")
    turn.observe(RESULT)
    assert not pipe.closed  # "m" is not taken in yet
    assert turn.unstarted() == ["m"]
    turn.observe(started("m"))
    assert turn.take_deliveries() == [Delivery("m", "next_turn")]
    assert not pipe.closed
    turn.observe(RESULT)
    assert pipe.closed


@pytest.mark.asyncio
async def test_the_input_stays_open_while_something_else_needs_it() -> None:
    pipe = Pipe()
    busy = [True]
    turn = TurnInput(write=pipe.write, end=pipe.close, may_end=lambda: not busy[0])
    await turn.send_prompt("Do it", "p")
    turn.observe(started("p"))
    turn.observe(RESULT)
    assert not pipe.closed
    busy[0] = False
    turn.end_if_settled()
    assert pipe.closed
