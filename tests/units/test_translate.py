"""stream-json lines become the app's named events."""

from __future__ import annotations

from promptmgr.translate import TOOL_RESULT_MAX_CHARS, translate


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


def test_assistant_markdown_is_sanitized_html() -> None:
    line = {
        "type": "assistant",
        "message": {"content": [{"type": "text", "text": "**hi** <script>x()</script>"}]},
    }
    [(name, data)] = translate(line)
    assert name == "assistant_text"
    assert data["html"] == "<p><strong>hi</strong> &lt;script&gt;x()&lt;/script&gt;</p>\n"


def test_javascript_links_are_dropped() -> None:
    line = {
        "type": "assistant",
        "message": {"content": [{"type": "text", "text": "[x](javascript:alert(1))"}]},
    }
    [(_name, data)] = translate(line)
    assert "<a" not in data["html"] and "href" not in data["html"]


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
    from promptmgr.event_history import for_storage
    from promptmgr.live import Event

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
