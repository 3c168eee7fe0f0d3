"""The SDK engine's permission gate through a Redis outage while a person decides.

The gate runs against the test database and a Redis of the test's own (``private_redis``),
stopped while the gate waits; no CLI runs. The CLI engine's MCP server polls again through
the outage (a 503 from poll-decision); the SDK engine's wait does the same.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny, ToolPermissionContext

from askuser import approvals, services
from askuser.models import PermissionRequest, Question, QuestionStatus
from core import events
from core.questions import AnswerIn
from core.tool_names import ASK_USER_QUESTION
from tests.helpers import BASH_CALL, PrivateRedis, owned_run, sdk_gate

pytestmark = pytest.mark.unit


def bash_call_at_the_gate(run: Any) -> asyncio.Task[PermissionResultAllow | PermissionResultDeny]:
    """The SDK turn of ``run`` asking its permission gate for ``BASH_CALL``, as a task."""
    gate = sdk_gate(run.pk)
    return asyncio.create_task(
        gate.can_use_tool("Bash", BASH_CALL, ToolPermissionContext(tool_use_id="toolu_1"))
    )


@pytest.mark.asyncio
async def test_a_decision_made_during_a_redis_outage_reaches_the_waiting_sdk_turn(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run = await owned_run(alice)
    asking = bash_call_at_the_gate(run)
    while not await PermissionRequest.objects.filter(run=run).aexists():
        await asyncio.sleep(0.05)
    request = await PermissionRequest.objects.aget(run=run)

    with private_redis.down():
        # The gate's wait meets the outage before and after the person decides.
        await asyncio.sleep(1.0)
        assert not asking.done(), asking.result()
        await approvals.permission_decide(request_id=str(request.request_id), user=alice, decision="allow")
        result = await asyncio.wait_for(asking, timeout=10)

    assert isinstance(result, PermissionResultAllow), result
    assert result.updated_input == BASH_CALL


@pytest.mark.asyncio
async def test_a_tool_call_that_arrives_during_a_redis_outage_gets_one_card_once_redis_is_back(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run = await owned_run(alice)

    with private_redis.down():
        asking = bash_call_at_the_gate(run)
        # Its request is stored, its card cannot be shown: the gate asks again, not denies.
        await asyncio.sleep(1.5)
        assert not asking.done(), asking.result()
    while not [e for e in await events.read_events(run.pk, 0) if e.event == "permission_request"]:
        await asyncio.sleep(0.05)

    [request] = [r async for r in PermissionRequest.objects.filter(run=run)]
    cards = [e.data for e in await events.read_events(run.pk, 0) if e.event == "permission_request"]
    assert [c["request_id"] for c in cards] == [str(request.request_id)]
    await approvals.permission_decide(request_id=str(request.request_id), user=alice, decision="allow")
    result = await asyncio.wait_for(asking, timeout=10)
    assert isinstance(result, PermissionResultAllow), result


@pytest.mark.asyncio
async def test_a_question_asked_during_a_redis_outage_is_one_question_with_one_card_once_redis_is_back(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    """The gate asks again through the outage with the call's tool_use_id: every try after
    the first gets the question the first stored (``Question.call_key``), not one more."""
    run = await owned_run(alice)
    asked = {
        "questions": [{"question": "Which database?", "header": "DB", "options": [], "multiSelect": False}]
    }
    gate = sdk_gate(run.pk)

    with private_redis.down():
        asking = asyncio.create_task(
            gate.can_use_tool(ASK_USER_QUESTION, asked, ToolPermissionContext(tool_use_id="toolu_q"))
        )
        # Long enough for the gate to ask four times (its pauses start at 0.2 s and double).
        await asyncio.sleep(2.0)
        assert not asking.done(), asking.result()
    while not [e for e in await events.read_events(run.pk, 0) if e.event == "ask_user_question"]:
        await asyncio.sleep(0.05)

    [question] = [q async for q in Question.objects.filter(run=run)]
    assert question.status == QuestionStatus.PENDING
    shown = [
        e.data["question_id"] for e in await events.read_events(run.pk, 0) if e.event.startswith("ask_user")
    ]
    assert shown == [str(question.question_id)]
    await services.answer_submit(
        question_id=str(question.question_id),
        user=alice,
        body=AnswerIn(answer="Postgres", selectedOptions=[]),
    )
    result = await asyncio.wait_for(asking, timeout=10)
    assert isinstance(result, PermissionResultAllow), result
    assert result.updated_input == {**asked, "answers": {"Which database?": "Postgres"}}
