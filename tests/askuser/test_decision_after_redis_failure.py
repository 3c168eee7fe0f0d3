"""A decision whose hand-off Redis fails after the decision is stored.

The decision is committed before its hand-off, so it stands: the person is told it was
recorded, an "Always allow" rule is kept, and Claude's next poll, once Redis is back, takes
the decision from the database and puts the card's update on every page, once. The app's
Redis here is the test's own (``private_redis``), stopped between the card and the click.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import AsyncClient
from redis import RedisError

from askuser import approvals, live, policy
from askuser.models import PermissionRequest, PermissionStatus, PolicyAnswer
from core import events
from promptmgr.models import PermissionRule, Run, RunStatus
from tests.helpers import BASH_CALL, BASH_CALL_ALWAYS_RESULT, PrivateRedis, ask_permission, owned_run

pytestmark = pytest.mark.unit


async def decide_as(user: Any, request_id: str, decision: str, **extra: Any) -> Any:
    client = AsyncClient()
    await client.aforce_login(user)
    return await client.post(
        "/api/askuser/submit-decision",
        {"request_id": request_id, "decision": decision, **extra},
        content_type="application/json",
    )


async def decide_while_redis_is_down(
    private_redis: PrivateRedis, user: Any, decision: str, **extra: Any
) -> tuple[Run, str, Any]:
    """A run of ``user``'s with a permission card, decided with the app's Redis stopped (it
    is started again before this returns): the run, the request and the decision's response."""
    run = await owned_run(user)
    request_id = await ask_permission(run)
    with private_redis.down():
        response = await decide_as(user, request_id, decision, **extra)
    return run, request_id, response


async def decided_events(run: Run) -> list[dict[str, Any]]:
    return [e.data for e in await events.read_events(run.pk, 0) if e.event == "permission_decided"]


@pytest.mark.asyncio
async def test_a_decision_made_while_redis_is_down_is_recorded_and_reaches_claude_once_it_is_back(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, request_id, response = await decide_while_redis_is_down(private_redis, alice, "always")

    # Recorded, and said so: a second try would only be 409.
    assert response.status_code == 200, response.content
    assert (response.json()["decision"], response.json()["rule"]) == ("always", "Bash(npm test:*)")
    request = await PermissionRequest.objects.aget(request_id=request_id)
    assert request.status == PermissionStatus.ALLOWED
    rule = await PermissionRule.objects.select_related("added_by").aget()
    assert (rule.rule, rule.added_by) == ("Bash(npm test:*)", alice)
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING
    assert await decided_events(run) == []

    # Claude's next poll takes it from the database, and every page hears of it then.
    result = await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.5)

    assert result == BASH_CALL_ALWAYS_RESULT
    [decided] = await decided_events(run)
    assert (decided["decision"], decided["by"], decided["rule"]) == ("always", "alice", "Bash(npm test:*)")
    assert not await live.permissions_pending(run.pk)
    # A retried poll gets the same result, and the pages hear of it only once.
    again = await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.5)
    assert again == BASH_CALL_ALWAYS_RESULT
    assert len(await decided_events(run)) == 1


@pytest.mark.asyncio
async def test_while_redis_is_still_down_claude_gets_the_decision_from_the_database(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, request_id, response = await decide_while_redis_is_down(private_redis, alice, "always")
    assert response.status_code == 200, response.content

    with private_redis.down():
        result = await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.5)

    assert result == BASH_CALL_ALWAYS_RESULT
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING


@pytest.mark.asyncio
async def test_a_deny_taken_from_the_database_shows_the_persons_own_words_on_the_card(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, request_id, response = await decide_while_redis_is_down(
        private_redis, alice, "deny", message="Use make check instead."
    )

    assert response.status_code == 200, response.content
    result = await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.5)
    assert result == {
        "behavior": "deny",
        "message": approvals.DENIED_WITH.format(tool="Bash", message="Use make check instead."),
    }
    [decided] = await decided_events(run)
    assert (decided["decision"], decided["by"], decided["message"]) == (
        "deny",
        "alice",
        "Use make check instead.",
    )


@pytest.mark.asyncio
async def test_a_poll_that_took_the_decision_from_the_database_keeps_a_late_hand_off_off_the_pages(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    """The poll read the decision between its commit and its hand-off: the hand-off that
    follows neither wakes anyone nor shows the card's update a second time."""
    run, request_id, _ = await decide_while_redis_is_down(private_redis, alice, "allow")
    assert await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.5) == {
        "behavior": "allow",
        "updatedInput": BASH_CALL,
    }

    handed = await live.answer_replace_unless_taken(
        request_id,
        {"result": {"behavior": "allow", "updatedInput": BASH_CALL}},
        ttl=60,
        run_events=(run.pk, [("permission_decided", {"request_id": request_id, "decision": "allow"})]),
    )

    assert handed is False
    assert len(await decided_events(run)) == 1


async def policy_deny(run: Run) -> PolicyAnswer:
    """The answering policy's deny of a new tool call of ``run``, not yet applied."""
    request_id = await ask_permission(run)
    return await PolicyAnswer.objects.acreate(
        run=run,
        permission_request=await PermissionRequest.objects.aget(request_id=request_id),
        mode="auto",
        decision="deny",
        message="Migrations need a person here.",
        reasoning="The instructions reserve schema changes.",
        outcome="waiting",
    )


def card_update(decided: dict[str, Any]) -> dict[str, Any]:
    """What a page shows of a ``permission_decided`` event: all but its ids and time."""
    return {k: v for k, v in decided.items() if k not in ("request_id", "decided_at")}


@pytest.mark.asyncio
async def test_a_policys_deny_taken_from_the_database_shows_the_same_card_as_its_wake(
    transactional_db: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    woken_run = await owned_run(alice)
    woken = await policy_deny(woken_run)
    assert await policy.permission_decision_apply(policy_id=woken.pk)
    [live_update] = await decided_events(woken_run)

    run = await owned_run(alice)
    lost = await policy_deny(run)
    with private_redis.down(), pytest.raises(RedisError):
        # Stored, then its wake fails: the background task that applies it logs this.
        await policy.permission_decision_apply(policy_id=lost.pk)
    assert lost.permission_request is not None
    request_id = str(lost.permission_request.request_id)
    result = await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.5)

    told = policy.DENIED_BY_POLICY.format(tool="Bash", message="Migrations need a person here.")
    assert result == {"behavior": "deny", "message": told}
    [from_database] = await decided_events(run)
    assert card_update(from_database) == card_update(live_update)
    assert (from_database["by_policy"], from_database["reasoning"]) == (
        True,
        "The instructions reserve schema changes.",
    )
