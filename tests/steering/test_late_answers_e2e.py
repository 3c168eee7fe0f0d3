"""Late answers, end to end: a question that expired still takes an answer, and Claude gets it.

The real CLI (both engines) asks through the real question store; the test runs the clock
out on a question (its ``expires_at``), as the waiting side would notice after the
project's timeout, then answers it late.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from django.utils import timezone

from askuser.models import LateDelivery, Question, QuestionStatus
from core.redis import get_redis
from promptmgr import live
from tests.conftest import LiveServer
from tests.engines.support import ask_user_question, mcp_ask_user, sdk_question
from tests.helpers import (
    QUOTE,
    SSEEvent,
    login_client,
    make_project,
    read_sse,
    script,
    start_run,
    wait_until,
)

pytestmark = pytest.mark.e2e

ENGINES = ["cli", "sdk"]
RECEIVED = "User messages received: "
LATE_TEXT = "Late answer to your question “{question}” (it timed out and you went on without it): {answer}"


@pytest.fixture(autouse=True)
def quick_polls(settings: Any) -> None:
    # The MCP server's long-poll notices an expiry at its next turn: make turns short.
    settings.ASK_USER_LONG_POLL_SECONDS = 1


def asking(engine: str, question: str, labels: list[str]) -> dict[str, Any]:
    spec = sdk_question(question, "Q", labels)
    return mcp_ask_user(spec) if engine == "cli" else ask_user_question(spec)


def late_answer(client: httpx.Client, question_id: str, **body: Any) -> httpx.Response:
    return client.post(f"/api/questions/{question_id}/late-answer", json=body)


def card(client: httpx.Client, url: str, after: int = 0) -> SSEEvent:
    return read_sse(client, url, until=lambda e: e.event == "ask_user_question", last_event_id=after)[-1]


def run_out_the_clock(client: httpx.Client, url: str, question: SSEEvent) -> SSEEvent:
    """Expire the question now; returns its ask_user_expired event once the run noticed."""
    Question.objects.filter(question_id=question.data["question_id"]).update(expires_at=timezone.now())
    return read_sse(
        client, url, until=lambda e: e.event == "ask_user_expired", last_event_id=question.id, timeout=60
    )[-1]


def message_texts(request: dict[str, Any]) -> list[str]:
    """The texts of a Messages API request's messages, one per text block."""
    texts = []
    for message in request["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
    return texts


def of(events: list[SSEEvent], name: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == name]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_expired_questions_late_answer_reaches_claude_in_the_running_turn(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = make_project(owner=alice, engine=engine, ask_user_timeout=30)
    client = login_client(app_server, "alice", "alice-password")
    # The second question keeps the turn running while the first one is answered late.
    steps = (
        asking(engine, "Which database?", ["SQLite", "Postgres"]),
        asking(engine, "Which port?", ["5432", "6543"]),
        {"quote_user_messages": True},
    )
    started = start_run(client, project.pk, script(*steps))
    url = started["events_url"]
    first = card(client, url)
    expired = run_out_the_clock(client, url, first)
    assert expired.data == {"question_id": first.data["question_id"], "reason": "timeout"}
    second = card(client, url, after=expired.id)

    response = late_answer(client, first.data["question_id"], answer="", selectedOptions=[1])
    assert response.status_code == 200, response.text
    assert response.json()["delivery"] == "pending"
    assert response.json()["answers"] == {"Which database?": "Postgres"}
    # The late answer goes through the run's inbox, the second answer through its own hand-off:
    # answered at once, the turn could take the second answer and end before the supervisor
    # wrote the late one into its input (then "next_turn", which is right for that order).
    # So the person answers once the run took the late answer from its inbox.
    wait_until(
        lambda: get_redis().llen(live.inbox_key(started["run_id"])) == 0,
        timeout=30,
        what="the run took the late answer from its inbox",
    )
    answered = client.post(
        "/api/askuser/submit-answer",
        json={"question_id": second.data["question_id"], "answer": "", "selectedOptions": [0]},
    )
    assert answered.status_code == 200, answered.text

    events = read_sse(client, url, last_event_id=second.id)
    [shown] = of(events, "user_message")
    assert (shown["kind"], shown["question_id"]) == ("late_answer", first.data["question_id"])
    [delivered] = of(events, "user_message_delivered")
    assert (delivered["delivery"], delivered["question_id"]) == ("turn", first.data["question_id"])
    [reply] = [t["text"] for t in of(events, "assistant_text") if RECEIVED in t["text"]]
    late_text = LATE_TEXT.format(question="Which database?", answer="Postgres")
    assert json.loads(reply.split(RECEIVED, 1)[1]) == [late_text]
    question = Question.objects.get(question_id=first.data["question_id"])
    assert (question.status, question.late_delivery, question.answered_by) == (
        QuestionStatus.LATE,
        LateDelivery.TURN,
        alice,
    )
    assert len(of(events, "result")) == 1


def test_a_late_answer_after_the_run_ended_is_the_conversations_next_prompt_in_its_session(
    app_server: LiveServer, alice: Any, scripted_model_url: str
) -> None:
    project = make_project(owner=alice, ask_user_timeout=30)
    client = login_client(app_server, "alice", "alice-password")
    prompt = script(asking("cli", "Which colour?", ["Red", "Blue"]), QUOTE)
    started = start_run(client, project.pk, prompt)
    url = started["events_url"]
    run_out_the_clock(client, url, card(client, url))
    assert read_sse(client, url)[-1].data == {"status": "completed"}

    response = late_answer(client, card(client, url).data["question_id"], answer="Blue")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["delivery"] == "next_prompt" and body["run_id"] != started["run_id"]

    events = read_sse(client, body["events_url"])
    late_text = LATE_TEXT.format(question="Which colour?", answer="Blue")
    assert of(events, "prompt")[0]["text"] == late_text
    assert of(events, "prompt")[0]["conversation_id"] == started["conversation_id"]
    assert events[-1].data == {"status": "completed"}
    # Resumed: the model's request for the late answer holds the conversation's first prompt.
    requests = httpx.get(f"{scripted_model_url}/_scripted/requests").json()
    carrying = [texts for texts in map(message_texts, requests) if any(late_text in t for t in texts)]
    assert carrying
    assert all(any(prompt in text for text in texts) for texts in carrying)
    question = Question.objects.get(run_id=started["run_id"])
    assert (question.late_delivery, question.late_run_id) == (LateDelivery.NEXT_PROMPT, body["run_id"])


def test_late_answers_take_expired_questions_only_once_and_from_the_projects_people(
    app_server: LiveServer, alice: Any, bob: Any
) -> None:
    project = make_project(owner=alice, ask_user_timeout=30)
    client = login_client(app_server, "alice", "alice-password")
    steps = (asking("cli", "Which colour?", ["Red", "Blue"]), asking("cli", "Which size?", ["S", "M"]))
    started = start_run(client, project.pk, script(*steps))
    url = started["events_url"]
    first = card(client, url)
    question_id = first.data["question_id"]

    still_open = late_answer(client, question_id, answer="Red")
    assert (still_open.status_code, still_open.json()["code"]) == (409, "still_open")
    expired = run_out_the_clock(client, url, first)
    stranger = login_client(app_server, "bob", "bob-password")
    assert late_answer(stranger, question_id, answer="Red").status_code == 404
    bad = late_answer(client, question_id, answer="", selectedOptions=[7])
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_answer")
    assert late_answer(client, question_id, answer="Red").status_code == 200
    again = late_answer(client, question_id, answer="Blue")
    assert (again.status_code, again.json()["code"]) == (409, "already_answered")
    # The question that is open now is answered on its card, not late.
    second = card(client, url, after=expired.id)
    assert late_answer(client, second.data["question_id"], answer="S").status_code == 409
    client.post(f"/api/runs/{started['run_id']}/cancel")
    read_sse(client, url)
    cancelled = late_answer(client, second.data["question_id"], answer="S")
    assert (cancelled.status_code, cancelled.json()["code"]) == (410, "cancelled")
