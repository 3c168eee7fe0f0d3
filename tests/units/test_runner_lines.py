"""What the supervisor makes of the messages it reads: batches, cut lines, garbage, tokens,
long replies; and how a CLI line becomes a message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from askuser import runtime
from core import events as live
from promptmgr.engines.base import Garbage, Item, Message, read_line
from promptmgr.processes import TIMEOUT, Line, LineTimeout
from promptmgr.runner import RunSupervisor

pytestmark = pytest.mark.unit

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_live_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """No other test's relay token is live in this process: text that could begin one of
    their encodings would be held back, and these tests count what is streamed at once."""
    monkeypatch.setattr(runtime, "_encoded_tokens", {})


async def test_an_over_long_line_is_left_out_with_a_message_that_says_so() -> None:
    supervisor = RunSupervisor(run_id=424242)
    ctx: Any = None  # not needed for a line that is left out

    await supervisor._on_item(ctx, read_line(Line(b"x" * (16 * MiB), truncated=True)))

    [event] = await live.read_events(424242, 0)
    assert event.event == "error"
    assert event.data == {
        "message": "Claude Code printed a line of more than 16 MB; it was left out of the stream."
    }


def message(data: dict[str, Any]) -> Item:
    return read_line(Line(json.dumps(data).encode()))


def delta_line(text: str, index: int = 0) -> Item:
    event = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}
    return message({"type": "stream_event", "event": event})


class ReadyItems:
    """A turn whose further output is already waiting when the supervisor looks."""

    def __init__(self, items: list[Item]) -> None:
        self.items = items

    def ready_item(self) -> Item | LineTimeout:
        return self.items.pop(0) if self.items else TIMEOUT


async def test_deltas_of_one_block_that_arrive_together_become_one_event() -> None:
    supervisor = RunSupervisor(run_id=434343)
    burst = [delta_line("a"), delta_line("b"), delta_line("c"), delta_line("X", index=1), delta_line("d")]
    supervisor.turn = ReadyItems(burst[1:])  # type: ignore[assignment]
    ctx: Any = None  # stream_event lines need no run context

    await supervisor._handle_ready(ctx, burst[0])

    events = [(e.event, e.data["text"], e.data["index"]) for e in await live.read_events(434343, 0)]
    assert events == [("text_delta", "abc", 0), ("text_delta", "X", 1), ("text_delta", "d", 0)]


async def test_a_delta_that_arrives_alone_is_streamed_at_once_as_it_came() -> None:
    supervisor = RunSupervisor(run_id=454545)
    supervisor.turn = ReadyItems([])  # type: ignore[assignment]
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
        supervisor.turn = ReadyItems([])  # type: ignore[assignment]
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
    burst = [delta_line("a"), delta_line("b"), message(assistant)]
    supervisor = RunSupervisor(run_id=474747)
    supervisor.turn = ReadyItems(burst[1:])  # type: ignore[assignment]
    ctx: Any = None

    await supervisor._handle_ready(ctx, burst[0])

    assert seen_at_render == ["text_delta"]
    events = await live.read_events(474747, 0)
    assert [e.event for e in events] == ["text_delta", "assistant_text"]
    assert events[1].data["html"] == markdown.render_markdown(reply)


async def test_json_of_the_wrong_shape_is_reported_as_the_line_the_cli_printed() -> None:
    supervisor = RunSupervisor(run_id=484848)
    ctx: Any = None
    printed = b'{"type":"assistant","message":{"content":[1]}}'

    await supervisor._on_item(ctx, read_line(Line(printed)))
    await supervisor._on_item(ctx, read_line(Line(b"Segmentation fault")))
    await supervisor._on_item(ctx, read_line(Line(b"[1, 2]")))

    assert [e.data["message"] for e in await live.read_events(484848, 0)] == [
        'Claude Code printed a line that is not stream-json: {"type":"assistant","message":{"content":[1]}}',
        "Claude Code printed a line that is not stream-json: Segmentation fault",
        "Claude Code printed a line that is not stream-json: [1, 2]",
    ]
    assert supervisor.garbage == 3 and len(supervisor.errors) == 3


def test_a_relay_token_is_redacted_before_the_line_is_parsed() -> None:
    import secrets

    token = f"pmr_12_{secrets.token_urlsafe(32)}"
    item = read_line(Line(json.dumps({"type": "user", "content": f"token {token}"}).encode()))

    assert isinstance(item, Message)
    assert item.data == {"type": "user", "content": "token pmr_[redacted]"}
    assert token.encode() not in item.line
    garbage = read_line(Line(f"not json {token}".encode()))
    assert garbage == Garbage(b"not json pmr_[redacted]")
