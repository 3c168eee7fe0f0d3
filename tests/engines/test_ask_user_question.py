"""The SDK engine: the built-in AskUserQuestion answered through the shared card and store.

Real parts throughout: uvicorn, Redis, the bundled CLI driven by claude-agent-sdk, and the
scripted model, which quotes back the tool results it received.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from askuser.models import Question
from promptmgr.models import Run
from tests.engines.support import ask_user_question, sdk_question
from tests.helpers import (
    QUOTE,
    login_client,
    make_project,
    next_question,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    submit_answer,
    tool_results,
)

pytestmark = pytest.mark.e2e

AUTH = sdk_question("Which auth method?", "Auth", ["OAuth", "API key"])
CHECKS = sdk_question("Which checks?", "Checks", ["Lint", "Types", "Tests"], multi=True)
ANSWERED = "Your questions have been answered: {pairs}. You can now continue with these answers in mind."


def test_two_questions_one_multi_select_reach_the_model(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH, CHECKS), QUOTE))
    card = next_question(client, started["events_url"])
    assert card.data["source"] == "sdk"
    assert card.data["questions"] == [AUTH, CHECKS]
    assert Run.objects.get(pk=started["run_id"]).status == "waiting_for_user"

    answers = {
        "Which auth method?": {"selected": [0], "other": ""},
        "Which checks?": {"selected": [0, 2], "other": ""},
    }
    response = submit_answer(client, card.data["question_id"], answers=answers)
    assert response.status_code == 200, response.text

    events = read_sse(client, started["events_url"])
    pairs = '"Which auth method?"="OAuth", "Which checks?"="Lint, Tests"'
    assert tool_results(events) == [{"text": ANSWERED.format(pairs=pairs), "is_error": False}]
    assert events[-1].data == {"status": "completed"}


def test_string_answers_other_text_and_notes_reach_the_model(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH, CHECKS), QUOTE))
    card = next_question(client, started["events_url"])
    answers = {"Which auth method?": "SAML via the company IdP", "Which checks?": "Types, Tests"}
    response = submit_answer(client, card.data["question_id"], answers=answers, notes="tests first")
    assert response.status_code == 200, response.text

    events = read_sse(client, started["events_url"])
    # Typed text and notes make the CLI ask Claude to read the answers carefully.
    assert tool_results(events) == [
        {
            "text": 'The user answered: "Which auth method?"="SAML via the company IdP" notes: tests first, '
            '"Which checks?"="Types, Tests". Read the answers carefully \u2014 they may request '
            "clarification, changes, or that you not proceed \u2014 and follow what they actually say.",
            "is_error": False,
        }
    ]


def test_the_verification_marks_the_question_delivered(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH, CHECKS), QUOTE))
    card = next_question(client, started["events_url"])
    answers = {"Which auth method?": "API key", "Which checks?": "Lint, Types"}
    assert submit_answer(client, card.data["question_id"], answers=answers).status_code == 200

    events = read_sse(client, started["events_url"])
    [delivered] = [e.data for e in events if e.event == "ask_user_delivered"]
    assert delivered == {"question_id": card.data["question_id"], "ok": True, "answers": answers}
    names = [e.event for e in events]
    assert names.index("tool_result") < names.index("ask_user_delivered")
    question = Question.objects.get(question_id=card.data["question_id"])
    assert question.status == "delivered" and question.delivered_at is not None
    assert question.answered_by == alice and question.source == "sdk"


@pytest.mark.parametrize("mode", ["default", "acceptEdits", "plan"])
def test_every_permission_mode_sends_the_question_to_the_user(app_server: Any, alice: Any, mode: str) -> None:
    project = make_project(owner=alice, engine="sdk", permission_mode=mode)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH), QUOTE))
    card = next_question(client, started["events_url"])
    assert (
        submit_answer(client, card.data["question_id"], answers={"Which auth method?": "OAuth"}).status_code
        == 200
    )
    events = read_sse(client, started["events_url"])
    pairs = '"Which auth method?"="OAuth"'
    assert tool_results(events) == [{"text": ANSWERED.format(pairs=pairs), "is_error": False}]


def test_an_unanswered_question_is_denied_with_the_timeout_sentence(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk", ask_user_timeout=30)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH), QUOTE))
    card = next_question(client, started["events_url"])
    # The project minimum is 30 s; the deadline is brought forward instead of waiting for it.
    Question.objects.filter(question_id=card.data["question_id"]).update(
        expires_at=timezone.now() + timedelta(seconds=1)
    )

    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [
        {"text": "User did not respond within 30 seconds. Proceed with your best judgment.", "is_error": True}
    ]
    expired = [e.data for e in events if e.event == "ask_user_expired"]
    assert expired == [{"question_id": card.data["question_id"], "reason": "timeout"}]
    assert Question.objects.get(question_id=card.data["question_id"]).status == "expired"
    late = submit_answer(client, card.data["question_id"], answers={"Which auth method?": "OAuth"})
    assert late.status_code == 410
    assert events[-1].data == {"status": "completed"}


def test_cancel_while_waiting_ends_the_run_with_no_process_left(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH), QUOTE))
    card = next_question(client, started["events_url"])
    workspace = run_workdir(started["run_id"])
    assert processes_in(workspace), "the CLI should be running in the workspace"

    response = client.post(f"/api/runs/{started['run_id']}/cancel")
    assert response.status_code == 202, response.text
    events = read_sse(client, started["events_url"], timeout=30)

    assert events[-1].data == {"status": "cancelled"}
    assert processes_in(workspace) == []
    run = Run.objects.get(pk=started["run_id"])
    assert run.status == "cancelled" and run.error == "Cancelled by the user."
    expired = [e.data for e in events if e.event == "ask_user_expired"]
    assert expired == [{"question_id": card.data["question_id"], "reason": "cancelled"}]
    assert Question.objects.get(question_id=card.data["question_id"]).status == "cancelled"
    late = submit_answer(client, card.data["question_id"], answers={"Which auth method?": "OAuth"})
    assert late.status_code == 410


def test_waiting_for_the_user_is_not_idleness(app_server: Any, alice: Any, settings: Any) -> None:
    settings.RUN_IDLE_TIMEOUT = 3
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH), QUOTE))
    card = next_question(client, started["events_url"])
    time.sleep(settings.RUN_IDLE_TIMEOUT + 4)  # the user thinks; the CLI prints nothing meanwhile
    assert Run.objects.get(pk=started["run_id"]).status == "waiting_for_user"
    assert (
        submit_answer(client, card.data["question_id"], answers={"Which auth method?": "OAuth"}).status_code
        == 200
    )
    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "completed"}


def test_with_ask_user_off_the_tool_is_not_offered(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk", ask_user_enabled=False)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask_user_question(AUTH), QUOTE))
    events = read_sse(client, started["events_url"])
    [session] = [e.data for e in events if e.event == "session"]
    assert "AskUserQuestion" not in session["tools"]
    [result] = tool_results(events)
    assert result["is_error"] is True and "No such tool available: AskUserQuestion" in result["text"]
    assert "ask_user_question" not in [e.event for e in events]
    assert events[-1].data == {"status": "completed"}
