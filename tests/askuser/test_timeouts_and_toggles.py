"""Question expiry, a browser that goes away mid-question, and the ask-user switches."""

from __future__ import annotations

from typing import Any

import pytest

from askuser.models import Question
from tests.helpers import (
    QUOTE,
    ask,
    login_client,
    make_project,
    next_question,
    read_sse,
    script,
    start_run,
    submit_answer,
    tool_results,
)

pytestmark = pytest.mark.e2e


def test_an_unanswered_question_times_out_for_the_model_and_the_card(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, ask_user_timeout=30)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask("Anyone there?", ["Yes"]), QUOTE))
    card = next_question(client, started["events_url"])
    events = read_sse(client, started["events_url"], timeout=90)
    assert tool_results(events) == [
        {"text": "User did not respond within 30 seconds. Proceed with your best judgment.", "is_error": True}
    ]
    expired = [e.data for e in events if e.event == "ask_user_expired"]
    assert expired == [{"question_id": card.data["question_id"], "reason": "timeout"}]
    assert Question.objects.get(question_id=card.data["question_id"]).status == "expired"
    late = submit_answer(client, card.data["question_id"], selectedOptions=[0])
    assert late.status_code == 410
    assert events[-1].data == {"status": "completed"}


def test_browser_gone_while_waiting_then_back_sees_the_question_and_answers(
    app_server: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    first_tab = login_client(app_server, "alice", "alice-password")
    started = start_run(first_tab, project.pk, script(ask("Still there?", ["Yes", "No"]), QUOTE))
    next_question(first_tab, started["events_url"])
    first_tab.close()  # the browser goes away; the run keeps waiting

    later = login_client(app_server, "alice", "alice-password")
    card = next_question(later, started["events_url"])  # a fresh page replays from the start
    assert card.data["questions"][0]["question"] == "Still there?"
    assert submit_answer(later, card.data["question_id"], selectedOptions=[0]).status_code == 200
    events = read_sse(later, started["events_url"])
    assert tool_results(events) == [{"text": "User selected: Yes", "is_error": False}]


def test_ask_user_disabled_for_the_project_registers_no_mcp_server(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, ask_user_enabled=False)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "plain streaming still works"}))
    events = read_sse(client, started["events_url"])
    [session] = [e.data for e in events if e.event == "session"]
    assert session["mcp_servers"] == []
    assert "mcp__ask-user__ask_user" not in session["tools"]
    assert [e.data["text"] for e in events if e.event == "assistant_text"] == ["plain streaming still works"]


def test_ask_user_disabled_globally_registers_no_mcp_server(
    app_server: Any, alice: Any, settings: Any
) -> None:
    settings.ASK_USER_ENABLED = False
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "ok"}))
    events = read_sse(client, started["events_url"])
    [session] = [e.data for e in events if e.event == "session"]
    assert session["mcp_servers"] == []


def test_ask_user_enabled_lists_the_server_as_connected(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "ok"}))
    events = read_sse(client, started["events_url"])
    [session] = [e.data for e in events if e.event == "session"]
    assert {"name": "ask-user", "status": "connected"} in session["mcp_servers"]
