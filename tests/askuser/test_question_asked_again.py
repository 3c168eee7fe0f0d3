"""A tool call's question posted again (``Idempotency-Key``) is the question it asked.

The MCP server sends one key per ask_user call, the same on every try. A try the app stored
before its reply failed (a Redis outage after the commit: 503; a reply lost on its way: a
proxy's 502, a web process restarting) is posted again, and must get that question back,
not a second one that supersedes it. The app runs under uvicorn on a real port, against
the test database and a real Redis (its own where the test takes it down).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from askuser.models import Question, QuestionStatus
from core import events
from promptmgr.models import Run
from tests.askuser.test_authorization import QUESTION, active_run, open_session
from tests.helpers import PrivateRedis, login_client, make_project, submit_answer

pytestmark = pytest.mark.e2e

OTHER_QUESTION = {"question": "Which branch?", "options": [{"label": "main"}, {"label": "dev"}]}


def asking_run(owner: Any) -> tuple[Run, str]:
    """A live run of this process, in a project of ``owner``'s, and its relay token."""
    run = active_run(make_project(owner=owner), owner)
    _session, token = open_session(run)
    return run, token


def relay_post(
    app_server: Any, token: str, endpoint: str, body: dict[str, Any], key: str | None
) -> httpx.Response:
    """A relay endpoint's POST as the MCP server sends it, under ``key`` unless None."""
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{app_server.url}/api/askuser/{endpoint}", json=body, headers=headers)


def relay_poll(app_server: Any, token: str, endpoint: str, params: dict[str, str]) -> httpx.Response:
    """One long-poll of a relay endpoint, held up to the server's ~25 s."""
    return httpx.get(
        f"{app_server.url}/api/askuser/{endpoint}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        timeout=40,
    )


def relay(app_server: Any, token: str, body: dict[str, Any], key: str | None) -> httpx.Response:
    return relay_post(app_server, token, "relay-question", body, key)


def poll_answer(app_server: Any, token: str, question_id: str) -> httpx.Response:
    return relay_poll(app_server, token, "poll-answer", {"question_id": question_id})


def cards(run: Run) -> list[tuple[str, str]]:
    """The run's question cards and their closings, as the page hears them."""
    wanted = ("ask_user_question", "ask_user_expired")
    return [
        (e.event, e.data["question_id"])
        for e in asyncio.run(events.read_events(run.pk, 0))
        if e.event in wanted
    ]


def test_a_question_posted_again_after_its_card_failed_is_the_stored_one_with_one_card(
    app_server: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, token = asking_run(alice)

    with private_redis.down():
        # The run's token is checked in this process; the question is stored, its card is not shown.
        refused = relay(app_server, token, QUESTION, "call-1")
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "redis_unavailable"
    [stored] = Question.objects.filter(run=run)

    again = relay(app_server, token, QUESTION, "call-1")

    assert again.status_code == 201, again.text
    assert again.json()["question_id"] == str(stored.question_id)
    assert Question.objects.filter(run=run).count() == 1
    stored.refresh_from_db()
    assert stored.status == QuestionStatus.PENDING
    assert cards(run) == [("ask_user_question", str(stored.question_id))]
    statuses = [
        e.data["status"] for e in asyncio.run(events.read_events(run.pk, 0)) if e.event == "run_status"
    ]
    assert statuses == ["waiting_for_user"]


def test_a_question_posted_again_after_it_was_answered_gets_its_answer(app_server: Any, alice: Any) -> None:
    """The first reply was lost on its way and the person answered meanwhile: the retry
    gets the answered question, its card is not shown again, and its poll takes the answer."""
    run, token = asking_run(alice)
    first = relay(app_server, token, QUESTION, "call-1")
    question_id = first.json()["question_id"]
    assert submit_answer(
        login_client(app_server, "alice", "alice-password"), question_id, answer="Yes"
    ).is_success

    again = relay(app_server, token, QUESTION, "call-1")

    assert again.status_code == 201 and again.json()["question_id"] == question_id
    assert cards(run) == [("ask_user_question", question_id)]
    poll = poll_answer(app_server, token, question_id)
    assert poll.status_code == 200 and poll.json()["answer"] == "Yes"


def test_another_call_supersedes_the_question_and_a_key_is_the_runs_own(
    app_server: Any, alice: Any, bob: Any
) -> None:
    run, token = asking_run(alice)
    bobs_run, bobs_token = asking_run(bob)
    first = relay(app_server, token, QUESTION, "call-1").json()["question_id"]

    second = relay(app_server, token, OTHER_QUESTION, "call-2").json()["question_id"]
    # Another run's call under the same key asks its own question: keys name calls of one run.
    bobs = relay(app_server, bobs_token, QUESTION, "call-1")
    # No key (an MCP server of an earlier version): every post is a question of its own.
    unkeyed = [relay(app_server, token, OTHER_QUESTION, None).json()["question_id"] for _ in range(2)]

    assert second != first and len(set(unkeyed)) == 2 and second not in unkeyed
    assert Question.objects.get(question_id=first).status == QuestionStatus.SUPERSEDED
    assert bobs.status_code == 201 and bobs.json()["question_id"] not in (first, second)
    assert Question.objects.get(question_id=bobs.json()["question_id"]).run_id == bobs_run.pk
    assert cards(run)[:3] == [
        ("ask_user_question", first),
        ("ask_user_expired", first),
        ("ask_user_question", second),
    ]


def test_an_idempotency_key_longer_than_a_tool_call_id_is_refused_with_nothing_stored(
    app_server: Any, alice: Any
) -> None:
    run, token = asking_run(alice)

    response = relay(app_server, token, QUESTION, "k" * 201)

    assert response.status_code == 422, response.text
    assert "Idempotency-Key" in response.text
    assert not Question.objects.filter(run=run).exists()


def test_a_question_shown_and_asked_again_sends_nothing_more(app_server: Any, alice: Any) -> None:
    """Its first reply was lost after the card went out: the retry changes nothing on the
    page, not even the run's status, which may have moved on since."""
    run, token = asking_run(alice)
    first = relay(app_server, token, QUESTION, "call-1").json()["question_id"]
    before = asyncio.run(events.read_events(run.pk, 0))

    again = relay(app_server, token, QUESTION, "call-1")

    assert again.status_code == 201 and again.json()["question_id"] == first
    assert asyncio.run(events.read_events(run.pk, 0)) == before


def test_a_question_asked_again_closes_the_card_its_first_asking_replaced_but_never_closed(
    app_server: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, token = asking_run(alice)
    older = relay(app_server, token, QUESTION, "call-1").json()["question_id"]
    with private_redis.down():
        # Stored, and the older one superseded in the database; neither card hears of it.
        assert relay(app_server, token, OTHER_QUESTION, "call-2").status_code == 503
    assert Question.objects.get(question_id=older).status == QuestionStatus.SUPERSEDED

    newer = relay(app_server, token, OTHER_QUESTION, "call-2").json()["question_id"]

    assert cards(run) == [
        ("ask_user_question", older),
        ("ask_user_question", newer),
        ("ask_user_expired", older),
    ]


def test_a_question_whose_time_ran_out_before_it_was_asked_again_shows_no_card(
    app_server: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, token = asking_run(alice)
    with private_redis.down():
        assert relay(app_server, token, QUESTION, "call-1").status_code == 503
    Question.objects.filter(run=run).update(expires_at=timezone.now() - timedelta(seconds=1))

    again = relay(app_server, token, QUESTION, "call-1")

    # The poll tells the MCP server it expired, as it would any question whose time is up.
    assert again.status_code == 201
    assert cards(run) == []
    poll = poll_answer(app_server, token, again.json()["question_id"])
    assert poll.status_code == 410 and poll.json()["status"] == "expired"
