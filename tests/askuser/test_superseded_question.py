"""A newer question of the same run replaces the pending one: closed visibly and accurately.

The question store against the test database and the real Redis; the endpoints through
Django's async test client, with a real relay token.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from askuser import asking, live, runtime, services
from askuser.models import Question, QuestionSource
from core import events as run_events
from core.questions import QuestionSpec
from promptmgr.models import Run
from tests.helpers import make_run

pytestmark = pytest.mark.unit


def card(text: str) -> dict[str, Any]:
    return {"question": text, "header": "", "options": [], "multiSelect": False}


async def ask(run: Run, text: str) -> str:
    created = await asking.question_create(
        run_id=run.pk,
        source=QuestionSource.MCP,
        questions=[QuestionSpec.model_validate(card(text))],
        timeout=300,
    )
    return str(created["question_id"])


@pytest.mark.asyncio
async def test_a_newer_question_closes_the_older_card_with_reason_superseded(
    transactional_db: Any, alice: Any
) -> None:
    run = await sync_to_async(make_run)(owner=alice)
    older = await ask(run, "Which database?")
    newer = await ask(run, "Which database, now that staging is gone?")

    assert (await Question.objects.aget(question_id=older)).status == "superseded"
    assert (await Question.objects.aget(question_id=newer)).status == "pending"
    assert (await Run.objects.aget(pk=run.pk)).status == "waiting_for_user"
    events = [(e.event, e.data) for e in await run_events.read_events(run.pk, 0)]
    closing = ("ask_user_expired", {"question_id": older, "reason": services.REASON_SUPERSEDED})
    assert [e for e in events if e[0] == "ask_user_expired"] == [closing]
    cards = [data["question_id"] for event, data in events if event == "ask_user_question"]
    assert cards == [older, newer]
    # The old card closes before the new one opens.
    assert events.index(closing) < [e[1].get("question_id") for e in events].index(newer)
    cached = await live.question_cache_get(run.pk)
    assert cached is not None and cached["question_id"] == newer


@pytest.mark.asyncio
async def test_a_poll_waiting_on_the_older_question_ends_at_once_as_superseded(
    transactional_db: Any, alice: Any
) -> None:
    run = await sync_to_async(make_run)(owner=alice)
    older = await ask(run, "Which database?")
    waiting = asyncio.create_task(services.answer_wait(run_id=run.pk, question_id=older, wait_seconds=20))
    await asyncio.sleep(0.3)

    await ask(run, "Which database, really?")

    result = await asyncio.wait_for(waiting, timeout=5)
    assert result.status == "superseded"
    again = await services.answer_wait(run_id=run.pk, question_id=older, wait_seconds=0.1)
    assert again.status == "superseded"


@pytest.mark.asyncio
async def test_poll_answer_and_submit_answer_say_410_superseded(transactional_db: Any, alice: Any) -> None:
    run = await sync_to_async(make_run)(owner=alice)
    session = await runtime.relay_session_open(
        run_id=run.pk, project_id=run.conversation.project_id, stream_token="s", timeout=300
    )
    token = json.loads(session.config_path.read_text())["relayToken"]
    older = await ask(run, "Which database?")
    await ask(run, "Which database, really?")
    client = AsyncClient()

    polled = await client.get(
        "/api/askuser/poll-answer", {"question_id": older}, headers={"Authorization": f"Bearer {token}"}
    )
    assert polled.status_code == 410
    assert polled.json()["status"] == "superseded"
    assert polled.json()["detail"] == services.MSG_SUPERSEDED

    await client.aforce_login(alice)
    submitted = await client.post(
        "/api/askuser/submit-answer",
        {"question_id": older, "answer": "SQLite"},
        content_type="application/json",
    )
    assert submitted.status_code == 410
    assert submitted.json()["detail"] == services.MSG_SUPERSEDED
    await runtime.relay_session_close(session)
