"""Tool approvals end to end, on both engines: the real CLI asks, a person decides in the browser's
place (the same HTTP calls), and the scripted model quotes back what the tool call gave it.

CLI engine: ``--permission-prompt-tool mcp__ask-user__approve`` → the real MCP server →
relay-permission / poll-decision. SDK engine: ``can_use_tool`` → the same store.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.utils import timezone

from askuser import approvals
from askuser.models import PermissionRequest
from core.tool_names import ASK_USER_QUESTION
from promptmgr.models import PermissionRule
from promptmgr.workspaces import workspace_path
from tests.conftest import LiveServer
from tests.helpers import (
    QUOTE,
    SSEEvent,
    login_client,
    make_project,
    open_conversation,
    read_sse,
    run_workdir,
    script,
    start_run,
    submit_answer,
    tool_results,
)

pytestmark = pytest.mark.e2e

ENGINES = ["cli", "sdk"]


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "Say it"}}}


def next_request(client: Any, url: str, after: int = 0) -> SSEEvent:
    return read_sse(client, url, until=lambda e: e.event == "permission_request", last_event_id=after)[-1]


def decide(client: Any, request_id: str, decision: str, **extra: Any) -> Any:
    return client.post(
        "/api/askuser/submit-decision", json={"request_id": request_id, "decision": decision, **extra}
    )


def asking_project(owner: Any, engine: str, **fields: Any) -> Any:
    # "default": every Bash command that is not read-only needs a person's approval.
    return make_project(owner=owner, engine=engine, permission_mode="default", **fields)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_allowed_bash_command_runs_and_its_output_reaches_the_model(
    app_server: LiveServer, alice: Any, bob: Any, engine: str
) -> None:
    project = asking_project(alice, engine)
    client = login_client(app_server, "alice", "alice-password")
    # Not read-only (the CLI runs those without asking): it writes a file.
    command = "mkdir -p build && echo approved-$((6*7))"
    started = start_run(client, project.pk, script(bash(command), QUOTE))

    card = next_request(client, started["events_url"])
    assert card.event == "permission_request"
    assert card.data["tool_name"] == "Bash"
    assert card.data["preview"]["command"] == command
    assert card.data["source"] == ("mcp" if engine == "cli" else "sdk")

    stranger = login_client(app_server, "bob", "bob-password")
    assert decide(stranger, card.data["request_id"], "allow").status_code == 404
    assert decide(client, card.data["request_id"], "allow").status_code == 200
    assert decide(client, card.data["request_id"], "deny").status_code == 409

    events = read_sse(client, started["events_url"])
    [result] = tool_results(events)
    assert result == {"text": "approved-42", "is_error": False}
    assert (run_workdir(started["run_id"]) / "build").is_dir()
    decided = [e.data for e in events if e.event == "permission_decided"]
    assert [(d["decision"], d["by"]) for d in decided] == [("allow", "alice")]
    assert events[-1].data == {"status": "completed"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_denied_command_does_not_run_and_the_model_receives_the_message(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = asking_project(alice, engine)
    client = login_client(app_server, "alice", "alice-password")
    conversation_id, worktree = open_conversation(project, alice)
    marker = worktree / "touched"
    started = start_run(client, project.pk, script(bash(f"touch {marker}"), QUOTE), conversation_id)

    card = next_request(client, started["events_url"])
    assert decide(client, card.data["request_id"], "deny", message="Not on this branch.").status_code == 200

    events = read_sse(client, started["events_url"])
    [result] = tool_results(events)
    assert result["is_error"] is True
    assert approvals.DENIED_WITH.format(tool="Bash", message="Not on this branch.") in result["text"]
    assert not marker.exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_always_allow_lets_the_next_runs_identical_command_run_without_a_card(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = asking_project(alice, engine)
    client = login_client(app_server, "alice", "alice-password")
    prompt = script(bash("touch ruled.txt"), QUOTE)
    first = start_run(client, project.pk, prompt)
    marker = run_workdir(first["run_id"]) / "ruled.txt"
    card = next_request(client, first["events_url"])
    assert card.data["suggested_rule"] == "Bash(touch:*)"
    assert decide(client, card.data["request_id"], "always").json()["rule"] == "Bash(touch:*)"
    [first_result] = tool_results(read_sse(client, first["events_url"]))
    assert first_result["is_error"] is False
    assert marker.exists()

    # Written into the main checkout (where new worktrees start from) and the run's worktree.
    for root in (workspace_path(project), marker.parent):
        settings_file = root / ".claude" / "settings.local.json"
        assert "Bash(touch:*)" in json.loads(settings_file.read_text())["permissions"]["allow"]
    assert PermissionRule.objects.filter(project=project, rule="Bash(touch:*)").exists()

    second = start_run(client, project.pk, prompt)
    events = read_sse(client, second["events_url"])
    assert [e for e in events if e.event == "permission_request"] == []
    assert tool_results(events) == [first_result]
    assert (run_workdir(second["run_id"]) / "ruled.txt").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_undecided_request_expires_and_the_model_is_told_it_was_not_run(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = asking_project(alice, engine, ask_user_timeout=30)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(bash("touch never.txt"), QUOTE))
    card = next_request(client, started["events_url"])
    assert card.event == "permission_request"
    # The clock runs out now rather than in 30 s; the waiting side notices within its wait slice.
    PermissionRequest.objects.filter(request_id=card.data["request_id"]).update(expires_at=timezone.now())

    events = read_sse(client, started["events_url"], last_event_id=card.id, timeout=90)

    [result] = tool_results(events)
    assert result == {"text": approvals.DENIED_TIMEOUT.format(tool="Bash", seconds=30), "is_error": True}
    assert [e.data for e in events if e.event == "permission_expired"] == [
        {"request_id": card.data["request_id"], "reason": "timeout"}
    ]
    assert decide(client, card.data["request_id"], "allow").status_code == 410
    assert not (run_workdir(started["run_id"]) / "never.txt").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_edit_asks_with_a_unified_diff_and_changes_the_file_once_allowed(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = asking_project(alice, engine)
    conversation_id, worktree = open_conversation(project, alice)
    readme = worktree / "README.md"
    readme.write_text("# Demo\nstatus: draft\n")
    client = login_client(app_server, "alice", "alice-password")
    read = {"tool_use": {"name": "Read", "input": {"file_path": str(readme)}}}
    edit = {
        "tool_use": {
            "name": "Edit",
            "input": {"file_path": str(readme), "old_string": "status: draft", "new_string": "status: final"},
        }
    }
    started = start_run(client, project.pk, script(read, edit, QUOTE), conversation_id)

    card = next_request(client, started["events_url"])
    assert card.data["tool_name"] == "Edit"
    preview = card.data["preview"]
    assert (preview["type"], preview["path"], preview["additions"], preview["deletions"]) == (
        "diff",
        "README.md",
        1,
        1,
    )
    assert "-status: draft\n+status: final\n" in preview["diff"]
    assert card.data["suggested_rule"] == "Edit(README.md)"
    assert decide(client, card.data["request_id"], "allow").status_code == 200

    read_sse(client, started["events_url"])
    assert readme.read_text() == "# Demo\nstatus: final\n"


def test_the_cli_engine_answers_the_built_in_ask_user_question_through_the_card(
    app_server: LiveServer, alice: Any
) -> None:
    project = make_project(owner=alice, engine="cli")
    client = login_client(app_server, "alice", "alice-password")
    questions = [
        {
            "question": "Which database?",
            "header": "DB",
            "options": [{"label": "Postgres", "description": "p"}, {"label": "SQLite", "description": "s"}],
            "multiSelect": False,
        },
        {
            "question": "Which extras?",
            "header": "Extras",
            "options": [{"label": "Cache", "description": "c"}, {"label": "Search", "description": "s"}],
            "multiSelect": True,
        },
    ]
    ask = {"tool_use": {"name": ASK_USER_QUESTION, "input": {"questions": questions}}}
    started = start_run(client, project.pk, script(ask, QUOTE))

    card = read_sse(client, started["events_url"], until=lambda e: e.event == "ask_user_question")[-1]
    assert [q["question"] for q in card.data["questions"]] == ["Which database?", "Which extras?"]
    assert card.data["questions"][1]["multiSelect"] is True
    answers = {"Which database?": {"selected": [0]}, "Which extras?": {"selected": [0, 1]}}
    assert submit_answer(client, card.data["question_id"], answers=answers).status_code == 200

    [result] = tool_results(read_sse(client, started["events_url"]))
    assert result["is_error"] is False
    assert '"Which database?"="Postgres", "Which extras?"="Cache, Search"' in result["text"]
