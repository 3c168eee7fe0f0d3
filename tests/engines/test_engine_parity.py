"""One scenario under both engines: the browser receives the same events.

The CLI engine asks through the ask-user MCP tool, the SDK engine through the built-in
AskUserQuestion; apart from that tool's name, input and result wording, the events are
the same, so the browser needs no engine-specific code.
"""

from __future__ import annotations

from typing import Any

import pytest

from promptmgr.models import Run
from tests.engines.support import ask_user_question, mcp_ask_user, sdk_question
from tests.helpers import (
    WAIT_RULE,
    SSEEvent,
    allow_in_workspace,
    login_client,
    make_project,
    next_question,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    submit_answer,
    wait_command,
)

pytestmark = pytest.mark.e2e

DB = sdk_question("Which database?", "DB", ["SQLite", "PostgreSQL"])
WRITE = {"tool_use": {"name": "Write", "input": {"file_path": "notes.txt", "content": "hello"}}}
ASK_TOOLS = {"mcp__ask-user__ask_user", "AskUserQuestion"}
# What each engine's question tool tells the model; the only wording that differs.
ANSWER_TEXT = {
    "cli": "User selected: PostgreSQL",
    "sdk": 'Your questions have been answered: "Which database?"="PostgreSQL". '
    "You can now continue with these answers in mind.",
}
EXPECTED = [
    "prompt",
    "run_status:queued",
    "run_status:running",
    "session",
    "text_delta",
    "assistant_text",
    "tool_use:Write",
    "tool_result",
    "text_delta",
    "assistant_text",
    "tool_use:ask",
    # The card first, the status in the same round trip (as for a permission card).
    "ask_user_question",
    "run_status:waiting_for_user",
    "ask_user_answered",
    "run_status:running",
    "tool_result",
    "ask_user_delivered",
    "text_delta",
    "assistant_text",
    "result",
    "changes",  # the Write, seen by git in the conversation's worktree
    "run_status:completed",
    "done",
]


def normalized(events: list[SSEEvent]) -> list[str]:
    """Event names, with what distinguishes them; a run of text deltas counts once."""
    names: list[str] = []
    for event in events:
        if event.event == "run_status":
            name = f"run_status:{event.data['status']}"
        elif event.event == "tool_use":
            name = "tool_use:ask" if event.data["name"] in ASK_TOOLS else f"tool_use:{event.data['name']}"
        else:
            name = event.event
        if not (name == "text_delta" and names and names[-1] == "text_delta"):
            names.append(name)
    return names


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_text_a_tool_and_a_question_give_the_same_events(app_server: Any, alice: Any, engine: str) -> None:
    ask = mcp_ask_user(DB) if engine == "cli" else ask_user_question(DB)
    prompt = script(
        {"text": "Let me write the notes first.", **WRITE},
        {"text": "Now a decision.", **ask},
        {"text": "Thanks, all done."},
    )
    project = make_project(owner=alice, engine=engine)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, prompt)
    card = next_question(client, started["events_url"])
    assert (
        submit_answer(client, card.data["question_id"], answers={"Which database?": "PostgreSQL"}).status_code
        == 200
    )
    events = read_sse(client, started["events_url"])

    assert normalized(events) == EXPECTED
    by_name = {e.event: e.data for e in events}  # the last of each
    assert [e.data["text"] for e in events if e.event == "assistant_text"] == [
        "Let me write the notes first.",
        "Now a decision.",
        "Thanks, all done.",
    ]
    assert set(by_name["session"]) == {"session_id", "model", "permission_mode", "tools", "mcp_servers"}
    assert by_name["session"]["permission_mode"] == "acceptEdits"
    [written, answered] = [e.data for e in events if e.event == "tool_result"]
    assert written["content"].startswith("File created successfully at: notes.txt")
    assert (run_workdir(started["run_id"]) / "notes.txt").read_text() == "hello"
    assert answered == {
        "tool_use_id": answered["tool_use_id"],
        "content": ANSWER_TEXT[engine],
        "is_error": False,
    }
    assert {k: v for k, v in card.data.items() if k not in ("question_id", "expires_at")} == {
        "kind": "question",
        "source": "mcp" if engine == "cli" else "sdk",
        "questions": [DB],
        "timeout": 300,
    }
    assert by_name["ask_user_answered"]["answers"] == {"Which database?": "PostgreSQL"}
    assert by_name["ask_user_delivered"]["ok"] is True
    result = by_name["result"]
    assert (result["subtype"], result["is_error"], result["num_turns"]) == ("success", False, 3)
    assert result["cost_usd"] > 0
    assert by_name["done"] == {"status": "completed"}


@pytest.mark.parametrize("engine", ["cli", "sdk"])
@pytest.mark.parametrize(
    ("mode", "ask_user", "message"),
    [
        # With nobody to ask (ask-user off), default mode refuses as -p mode does; with
        # ask-user on the same Write becomes a permission card (test_approvals_e2e).
        (
            "default",
            False,
            "Claude requested permissions to write to {path}, but you haven't granted it yet.",
        ),
        # Plan mode never writes, even with a person to ask.
        ("plan", True, "Cannot write to {path} while in plan mode."),
        ("acceptEdits", True, None),
    ],
)
def test_a_write_is_allowed_or_refused_alike(
    app_server: Any, alice: Any, engine: str, mode: str, ask_user: bool, message: str | None
) -> None:
    project = make_project(owner=alice, engine=engine, permission_mode=mode, ask_user_enabled=ask_user)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(WRITE, {"text": "ok"}))
    events = read_sse(client, started["events_url"])
    [result] = [e.data for e in events if e.event == "tool_result"]
    target = run_workdir(started["run_id"]) / "notes.txt"
    if message is None:
        assert result["is_error"] is False and target.read_text() == "hello"
    else:
        assert result["content"] == message.format(path=target) and result["is_error"] is True
        assert not target.exists()
    assert events[-1].data == {"status": "completed"}


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_a_background_command_finishes_and_wakes_a_second_turn_alike(
    app_server: Any, alice: Any, engine: str
) -> None:
    project = make_project(owner=alice, engine=engine)
    allow_in_workspace(project, WAIT_RULE)
    client = login_client(app_server, "alice", "alice-password")
    command = {
        "command": wait_command(4),
        "description": "wait",
        "run_in_background": True,
    }
    prompt = script({"tool_use": {"name": "Bash", "input": command}}, {"text": "Started it."})
    started = start_run(client, project.pk, prompt)
    events = read_sse(client, started["events_url"])

    # The command's completion wakes the session for one more turn before the CLI exits.
    assert normalized(events) == [
        "prompt",
        "run_status:queued",
        "run_status:running",
        "session",
        "tool_use:Bash",
        "tool_result",
        "text_delta",
        "assistant_text",
        "result",
        "session",
        "text_delta",
        "assistant_text",
        "result",
        "run_status:completed",
        "done",
    ]
    run = Run.objects.get(pk=started["run_id"])
    assert (run.status, run.exit_code) == ("completed", 0)
    assert processes_in(run_workdir(started["run_id"])) == []
