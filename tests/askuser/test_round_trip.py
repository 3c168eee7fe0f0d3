"""The ask-user round trip with every real part: uvicorn, the CLI, the MCP server process."""

from __future__ import annotations

from typing import Any

import pytest

from askuser.models import Question
from promptmgr.models import Run
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


def test_single_choice_answer_reaches_the_model(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(
        client, project.pk, script(ask("Which database?", ["SQLite", "PostgreSQL"], header="DB"), QUOTE)
    )
    card = next_question(client, started["events_url"])
    assert card.data["source"] == "mcp"
    assert card.data["questions"] == [
        {
            "question": "Which database?",
            "header": "DB",
            "options": [
                {"label": "SQLite", "description": "about SQLite"},
                {"label": "PostgreSQL", "description": "about PostgreSQL"},
            ],
            "multiSelect": False,
        }
    ]
    assert Run.objects.get(pk=started["run_id"]).status == "waiting_for_user"
    response = submit_answer(client, card.data["question_id"], selectedOptions=[1])
    assert response.status_code == 200, response.text
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [{"text": "User selected: PostgreSQL", "is_error": False}]
    answered = [e.data for e in events if e.event == "ask_user_answered"]
    assert (
        answered[0]["answers"] == {"Which database?": "PostgreSQL"} and answered[0]["answered_by"] == "alice"
    )
    delivered = [e.data for e in events if e.event == "ask_user_delivered"]
    assert delivered and delivered[0]["ok"] is True
    question = Question.objects.get(question_id=card.data["question_id"])
    assert question.status == "delivered" and question.answered_by == alice
    assert events[-1].data == {"status": "completed"}


def test_free_text_answer_reaches_the_model(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask("What should the module be called?"), QUOTE))
    card = next_question(client, started["events_url"])
    assert submit_answer(client, card.data["question_id"], answer="  billing_core  ").status_code == 200
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [{"text": "User answered: billing_core", "is_error": False}]


def test_multi_select_answer_reaches_the_model_comma_joined(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(
        client, project.pk, script(ask("Which checks?", ["Lint", "Types", "Tests"], multi=True), QUOTE)
    )
    card = next_question(client, started["events_url"])
    assert (
        submit_answer(
            client, card.data["question_id"], selectedOptions=[0, 2], notes="tests first"
        ).status_code
        == 200
    )
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [
        {"text": "User selected: Lint, Tests\nNotes: tests first", "is_error": False}
    ]


def test_two_sequential_questions_in_one_run(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask("First?", ["A", "B"]), ask("Second?"), QUOTE))
    first = next_question(client, started["events_url"])
    assert submit_answer(client, first.data["question_id"], selectedOptions=[0]).status_code == 200
    second = next_question(client, started["events_url"], after=first.id)
    assert second.data["question_id"] != first.data["question_id"]
    assert second.data["questions"][0]["question"] == "Second?"
    assert submit_answer(client, second.data["question_id"], answer="done").status_code == 200
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [
        {"text": "User selected: A", "is_error": False},
        {"text": "User answered: done", "is_error": False},
    ]


def test_second_answer_is_rejected_with_409(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask("Once?", ["Yes", "No"]), QUOTE))
    card = next_question(client, started["events_url"])
    assert submit_answer(client, card.data["question_id"], selectedOptions=[0]).status_code == 200
    again = submit_answer(client, card.data["question_id"], selectedOptions=[1])
    assert again.status_code == 409
    assert again.json()["detail"] == "This question was already answered."
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [{"text": "User selected: Yes", "is_error": False}]


def test_in_plan_mode_the_cli_still_lets_claude_ask_and_gets_the_answer(app_server: Any, alice: Any) -> None:
    # The CLI refuses every tool in plan mode unless it is annotated readOnlyHint.
    project = make_project(owner=alice, engine="cli", ask_user_enabled=True, permission_mode="plan")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(
        client, project.pk, script(ask("Plan which way?", ["Small steps", "Big bang"]), QUOTE)
    )
    card = next_question(client, started["events_url"])
    assert submit_answer(client, card.data["question_id"], selectedOptions=[0]).status_code == 200
    events = read_sse(client, started["events_url"])
    [session] = [e.data for e in events if e.event == "session"]
    assert session["permission_mode"] == "plan"
    assert tool_results(events) == [{"text": "User selected: Small steps", "is_error": False}]
    assert events[-1].data == {"status": "completed"}
    assert Run.objects.get(pk=started["run_id"]).status == "completed"
