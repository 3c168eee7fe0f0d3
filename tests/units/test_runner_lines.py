"""What the supervisor makes of the lines it reads: batches, cut lines, tokens, long replies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core import events as live
from promptmgr.processes import TIMEOUT, Line, LineTimeout
from promptmgr.runner import RunSupervisor

pytestmark = pytest.mark.unit

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


def delta_line(text: str, index: int = 0) -> Line:
    event = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}
    return Line(json.dumps({"type": "stream_event", "event": event}).encode())


class ReadyLines:
    """A process whose further output is already waiting when the supervisor looks."""

    def __init__(self, lines: list[Line]) -> None:
        self.lines = lines

    def ready_line(self) -> Line | LineTimeout:
        return self.lines.pop(0) if self.lines else TIMEOUT

    def ack(self) -> None:
        pass


async def test_deltas_of_one_block_that_arrive_together_become_one_event() -> None:
    supervisor = RunSupervisor(run_id=434343)
    burst = [delta_line("a"), delta_line("b"), delta_line("c"), delta_line("X", index=1), delta_line("d")]
    supervisor.process = ReadyLines(burst[1:])  # type: ignore[assignment]
    ctx: Any = None  # stream_event lines need no run context

    await supervisor._handle_ready(ctx, burst[0])

    events = [(e.event, e.data["text"], e.data["index"]) for e in await live.read_events(434343, 0)]
    assert events == [("text_delta", "abc", 0), ("text_delta", "X", 1), ("text_delta", "d", 0)]


async def test_a_delta_that_arrives_alone_is_streamed_at_once_as_it_came() -> None:
    supervisor = RunSupervisor(run_id=454545)
    supervisor.process = ReadyLines([])  # type: ignore[assignment]
    ctx: Any = None

    await supervisor._handle_ready(ctx, delta_line("a"))
    await supervisor._handle_ready(ctx, delta_line("b"))

    assert [e.data["text"] for e in await live.read_events(454545, 0)] == ["a", "b"]


async def test_a_token_the_model_streams_in_pieces_never_reaches_the_event_stream() -> None:
    import secrets

    token = f"pmr_9_{secrets.token_urlsafe(32)}"
    text = f"The config says {token}, done."
    supervisor = RunSupervisor(run_id=464646)
    ctx: Any = None
    # Each piece arrives on its own, as a model paced by the network streams it.
    for start in range(0, len(text), 5):
        supervisor.process = ReadyLines([])  # type: ignore[assignment]
        await supervisor._handle_ready(ctx, delta_line(text[start : start + 5]))
    await supervisor._emit_held_text()  # what the end of output does

    events = await live.read_events(464646, 0, count=1000)
    shown = "".join(e.data["text"] for e in events)
    assert token not in shown
    assert shown == "The config says pmr_[redacted], done."


async def test_text_streamed_before_a_long_reply_is_not_held_back_by_its_render(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from promptmgr import markdown

    reply = "word " * 2_000
    seen_at_render: list[str] = []

    async def render(text: str) -> str:
        seen_at_render.extend(e.event for e in await live.read_events(474747, 0))
        return await real_render(text)

    real_render = markdown.render_markdown_async
    monkeypatch.setattr(markdown, "render_markdown_async", render)
    assistant = {"type": "assistant", "message": {"content": [{"type": "text", "text": reply}]}}
    burst = [delta_line("a"), delta_line("b"), Line(json.dumps(assistant).encode())]
    supervisor = RunSupervisor(run_id=474747)
    supervisor.process = ReadyLines(burst[1:])  # type: ignore[assignment]
    ctx: Any = None

    await supervisor._handle_ready(ctx, burst[0])

    assert seen_at_render == ["text_delta"]
    events = await live.read_events(474747, 0)
    assert [e.event for e in events] == ["text_delta", "assistant_text"]
    assert events[1].data["html"] == markdown.render_markdown(reply)
