"""stream-json lines become the app's named events."""

from __future__ import annotations

import pytest

from promptmgr.translate import TOOL_RESULT_MAX_CHARS, translate

pytestmark = pytest.mark.unit


def test_init_line_becomes_a_session_event() -> None:
    line = {
        "type": "system",
        "subtype": "init",
        "session_id": "s1",
        "model": "m",
        "permissionMode": "plan",
        "tools": ["Bash"],
        "mcp_servers": [{"name": "ask-user", "status": "connected", "source": "project"}],
    }
    assert translate(line) == [
        (
            "session",
            {
                "session_id": "s1",
                "model": "m",
                "permission_mode": "plan",
                "tools": ["Bash"],
                "mcp_servers": [{"name": "ask-user", "status": "connected"}],
            },
        )
    ]


def test_a_text_block_becomes_assistant_text_whose_html_the_runner_adds() -> None:
    line = {
        "type": "assistant",
        "parent_tool_use_id": "t1",
        "message": {"content": [{"type": "text", "text": "**hi**"}]},
    }
    assert translate(line) == [("assistant_text", {"text": "**hi**", "parent_tool_use_id": "t1"})]


def test_tool_results_are_clipped_with_a_marker() -> None:
    huge = "z" * (TOOL_RESULT_MAX_CHARS + 10)
    line = {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "t", "content": huge}]},
    }
    [(_name, data)] = translate(line)
    assert data["content"].endswith("[10 more characters not shown]")


def test_unknown_lines_are_ignored() -> None:
    assert translate({"type": "system", "subtype": "status"}) == []
    assert translate({"type": "something_new"}) == []


def test_storage_drops_only_deltas_a_complete_text_repeats() -> None:
    from core.events import Event
    from promptmgr.event_history import for_storage

    events = [
        Event(1, "text_delta", {"text": "a"}),
        Event(2, "assistant_text", {"text": "a"}),
        Event(3, "tool_use", {}),
        Event(4, "text_delta", {"text": "cut off"}),
        Event(5, "done", {}),
    ]
    assert [e.id for e in for_storage(events)] == [2, 3, 4, 5]


def test_json_of_the_wrong_shape_is_refused_as_malformed_not_a_crash() -> None:
    import pytest

    from promptmgr.translate import MalformedLine

    for line in (
        {"type": "assistant", "message": {"content": [1]}},
        {"type": "assistant", "message": "text"},
        {"type": "stream_event", "event": ["x"]},
    ):
        with pytest.raises(MalformedLine):
            translate(line)
