"""Tool approvals through the store and submit-decision: who may decide, what Claude is told.

The waiting side is ``approvals.permission_wait`` itself (what poll-decision and the SDK
engine call), with the real database and Redis; no CLI runs here (see test_approvals_e2e).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.test import AsyncClient, RequestFactory
from django.utils import timezone

from askuser import approvals, live, permission_asking
from askuser.api import click_auth
from askuser.models import PermissionRequest, QuestionSource
from core import events
from core.redis import get_async_redis
from promptmgr.models import PermissionRule, Run, RunStatus
from promptmgr.workspaces import workspace_path
from tests.helpers import (
    BASH_CALL,
    BASH_CALL_ALWAYS_RESULT,
    ask_permission,
    make_project,
    make_run,
    owned_run,
)

pytestmark = pytest.mark.unit


async def signed_in(user: Any) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def decide(client: AsyncClient, request_id: str, decision: str, **extra: Any) -> Any:
    return await client.post(
        "/api/askuser/submit-decision",
        {"request_id": request_id, "decision": decision, **extra},
        content_type="application/json",
    )


async def result_of(run: Run, request_id: str) -> dict[str, Any] | None:
    return await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.5)


@pytest.mark.asyncio
async def test_a_tool_call_becomes_a_card_and_the_run_waits_for_a_person(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)

    request_id = await ask_permission(run, tool_use_id="toolu_1")

    [card] = [e.data for e in await events.read_events(run.pk, 0) if e.event == "permission_request"]
    assert card["request_id"] == request_id
    assert card["tool_name"] == "Bash" and card["tool_use_id"] == "toolu_1"
    assert card["preview"] == {"type": "bash", "command": "npm test", "description": "Run the tests"}
    assert card["suggested_rule"] == "Bash(npm test:*)"
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.WAITING_FOR_USER
    # Still waiting: no permission result yet.
    assert await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.2) is None


@pytest.mark.asyncio
async def test_allow_once_hands_back_the_input_unchanged_and_claude_works_again(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)

    response = await decide(await signed_in(alice), request_id, "allow")

    assert response.status_code == 200, response.content
    assert response.json()["decision"] == "allow" and response.json()["rule"] is None
    assert await result_of(run, request_id) == {"behavior": "allow", "updatedInput": BASH_CALL}
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING
    [decided] = [e.data for e in await events.read_events(run.pk, 0) if e.event == "permission_decided"]
    assert (decided["decision"], decided["by"]) == ("allow", "alice")


@pytest.mark.asyncio
async def test_a_deny_carries_the_users_message_to_claude(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)

    await decide(await signed_in(alice), request_id, "deny", message="Use make check instead.")

    assert await result_of(run, request_id) == {
        "behavior": "deny",
        "message": approvals.DENIED_WITH.format(tool="Bash", message="Use make check instead."),
    }


@pytest.mark.asyncio
async def test_a_deny_without_a_message_still_tells_claude_why(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)

    await decide(await signed_in(alice), request_id, "deny")

    assert await result_of(run, request_id) == {
        "behavior": "deny",
        "message": approvals.DENIED.format(tool="Bash"),
    }


@pytest.mark.asyncio
async def test_always_allow_stores_the_rule_writes_the_workspace_and_applies_it_to_the_turn(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)

    response = await decide(await signed_in(alice), request_id, "always")

    assert response.json()["rule"] == "Bash(npm test:*)"
    assert await result_of(run, request_id) == BASH_CALL_ALWAYS_RESULT
    rule = await PermissionRule.objects.select_related("added_by").aget()
    assert (rule.rule, rule.added_by) == ("Bash(npm test:*)", alice)
    project = await sync_to_async(lambda: run.conversation.project)()
    settings_file = workspace_path(project) / ".claude" / "settings.local.json"
    assert "Bash(npm test:*)" in json.loads(settings_file.read_text())["permissions"]["allow"]


@pytest.mark.asyncio
async def test_removing_a_rule_takes_it_out_of_the_workspace_and_keeps_the_users_own(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    project = await sync_to_async(lambda: run.conversation.project)()
    settings_file = workspace_path(project) / ".claude" / "settings.local.json"
    mine = json.loads(settings_file.read_text())
    mine["permissions"]["allow"].append("Bash(make:*)")
    settings_file.write_text(json.dumps(mine))
    await decide(await signed_in(alice), await ask_permission(run), "always")

    await PermissionRule.objects.filter(project=project).adelete()

    allow = json.loads(settings_file.read_text())["permissions"]["allow"]
    assert "Bash(npm test:*)" not in allow
    assert "Bash(make:*)" in allow


@pytest.mark.asyncio
async def test_always_is_refused_when_there_is_no_safe_rule(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run, "Write", {"file_path": "/etc/passwd", "content": "x"})

    response = await decide(await signed_in(alice), request_id, "always")

    assert response.status_code == 422
    assert response.json() == {"detail": approvals.MSG_NO_RULE, "code": "no_rule"}
    assert await PermissionRequest.objects.filter(request_id=request_id, status="pending").aexists()


@pytest.mark.asyncio
async def test_a_long_compound_command_is_asked_with_nothing_to_always_allow(
    transactional_db: Any, alice: Any
) -> None:
    # Its exact rule would not fit a rule (PostgreSQL refuses to store it; SQLite would not).
    command = "cd build && " + " && ".join(f"make target-{i}" for i in range(60))
    run = await owned_run(alice)
    request_id = await ask_permission(run, "Bash", {"command": command})

    request = await PermissionRequest.objects.aget(request_id=request_id)
    assert request.suggested_rule == ""
    response = await decide(await signed_in(alice), request_id, "always")
    assert (response.status_code, response.json()["code"]) == (422, "no_rule")
    await decide(await signed_in(alice), request_id, "allow")
    assert await result_of(run, request_id) == {"behavior": "allow", "updatedInput": {"command": command}}


@pytest.mark.asyncio
async def test_another_users_decision_is_404_and_changes_nothing(
    transactional_db: Any, alice: Any, bob: Any
) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)

    response = await decide(await signed_in(bob), request_id, "allow")

    assert response.status_code == 404
    assert response.json() == {"detail": approvals.MSG_NOT_FOUND, "code": "not_found"}
    # Still waiting: no permission result yet.
    assert await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.1) is None


@pytest.mark.asyncio
async def test_a_member_may_decide(transactional_db: Any, alice: Any, bob: Any) -> None:
    run = await owned_run(alice, members=(bob,))
    request_id = await ask_permission(run)

    response = await decide(await signed_in(bob), request_id, "allow")

    assert response.status_code == 200


@pytest.mark.asyncio
async def test_a_second_decision_is_409_and_the_first_stands(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)
    client = await signed_in(alice)
    await decide(client, request_id, "allow")

    second = await decide(client, request_id, "deny", message="no")

    assert second.status_code == 409
    assert second.json()["code"] == "already_decided"
    assert (await result_of(run, request_id) or {})["behavior"] == "allow"


@pytest.mark.asyncio
async def test_after_expiry_a_decision_is_410_and_claude_is_told_it_was_not_run(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)
    await PermissionRequest.objects.filter(request_id=request_id).aupdate(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    response = await decide(await signed_in(alice), request_id, "allow")

    assert response.status_code == 410
    assert response.json()["code"] == "expired"
    result = await result_of(run, request_id)
    assert result == {
        "behavior": "deny",
        "message": approvals.DENIED_TIMEOUT.format(tool="Bash", seconds=300),
    }
    assert [e.data for e in await events.read_events(run.pk, 0) if e.event == "permission_expired"] == [
        {"request_id": request_id, "reason": "timeout"}
    ]


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "allow"},
        {"request_id": "not-a-uuid", "decision": "allow"},
        {"request_id": "00000000-0000-0000-0000-000000000000", "decision": "maybe"},
        {"request_id": "00000000-0000-0000-0000-000000000000", "decision": "deny", "message": "x" * 2001},
    ],
    ids=["no-id", "bad-id", "bad-decision", "long-message"],
)
@pytest.mark.asyncio
async def test_a_bad_body_is_422(transactional_db: Any, alice: Any, body: dict[str, Any]) -> None:
    client = await signed_in(alice)
    response = await client.post("/api/askuser/submit-decision", body, content_type="application/json")
    assert response.status_code == 422
    assert response.json()["code"] == "invalid"


@pytest.mark.asyncio
async def test_a_browser_post_without_the_csrf_token_is_refused(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(alice)

    response = await decide(client, request_id, "allow")

    assert response.status_code == 403
    assert await PermissionRequest.objects.filter(request_id=request_id, status="pending").aexists()


@pytest.mark.asyncio
async def test_a_post_from_nobody_signed_in_is_401_and_changes_nothing(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)
    anonymous = AsyncClient()
    client = await signed_in(alice)
    stale = client.cookies[settings.SESSION_COOKIE_NAME].value
    await client.alogout()
    client.cookies[settings.SESSION_COOKIE_NAME] = stale  # a browser that kept the signed-out cookie

    for nobody in (anonymous, client):
        response = await decide(nobody, request_id, "allow")

        assert response.status_code == 401
        assert response.json() == {"detail": "Sign in first.", "code": "unauthorized"}
    assert await PermissionRequest.objects.filter(request_id=request_id, status="pending").aexists()
    assert await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0.2) is None


def test_in_a_synchronous_operation_the_click_check_is_djangos_own(db: Any, alice: Any) -> None:
    # No event loop on this thread, as in a sync operation: the full check, the user or None.
    request = RequestFactory().post("/api/askuser/submit-decision")
    request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
    request.user = AnonymousUser()
    assert click_auth(request) is None
    request.user = alice
    assert click_auth(request) == alice


@pytest.mark.asyncio
async def test_the_runs_end_cancels_open_requests_and_claude_is_told_no(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    first, second = (
        await ask_permission(run),
        await ask_permission(run, "WebFetch", {"url": "https://example.com"}),
    )

    await approvals.permissions_close_for_run(run_id=run.pk)

    for request_id, tool in ((first, "Bash"), (second, "WebFetch")):
        assert await result_of(run, request_id) == {
            "behavior": "deny",
            "message": approvals.DENIED_RUN_ENDED.format(tool=tool),
        }
    response = await decide(await signed_in(alice), first, "allow")
    assert response.status_code == 410 and response.json()["code"] == "cancelled"


@pytest.mark.asyncio
async def test_the_same_tool_call_asked_again_is_the_same_request(transactional_db: Any, alice: Any) -> None:
    """A relay posts a tool call again after a 503 that came once it was stored (Redis
    failed its card): no second request keeps the run waiting on a card nobody sees."""
    run = await owned_run(alice)

    first = await ask_permission(run, call_key="call-again")
    again = await ask_permission(run, call_key="call-again")

    assert again == first
    assert await PermissionRequest.objects.filter(run=run).acount() == 1


@pytest.mark.asyncio
async def test_a_tool_call_asked_again_after_its_decision_gets_that_decision_and_no_card(
    transactional_db: Any, alice: Any
) -> None:
    """Its first reply was lost and a teammate decided meanwhile: the call gets its request
    back with the decision, and no second card asks the team about a call decided already."""
    run = await owned_run(alice)
    first = await ask_permission(run, call_key="call-1")
    await decide(await signed_in(alice), first, "deny", message="not that one")
    before = await events.read_events(run.pk, 0)

    again = await ask_permission(run, call_key="call-1")

    assert again == first
    assert await events.read_events(run.pk, 0) == before
    assert await result_of(run, again) == {
        "behavior": "deny",
        "message": approvals.DENIED_WITH.format(tool="Bash", message="not that one"),
    }


@pytest.mark.asyncio
async def test_a_first_try_delayed_past_its_retrys_card_shows_no_second_card(
    transactional_db: Any, alice: Any
) -> None:
    """The first try stored the request, then stalled before its card (a slow Redis, a
    busy process) while the retry showed it: when the first try gets there, it writes
    nothing, and the other requests' marks keep their time."""
    run = await owned_run(alice)
    other = await ask_permission(run, tool_input={"command": "make lint"})
    first = await sync_to_async(permission_asking._create)(
        run.pk, QuestionSource.MCP, "Bash", BASH_CALL, "toolu_1", "call-1"
    )
    request_id = str(first.request.request_id)
    assert await ask_permission(run, call_key="call-1") == request_id
    before = await events.read_events(run.pk, 0)

    shown = await live.permission_pending_add(
        run.pk, request_id, ttl=5, then=[("permission_request", {"request_id": request_id})]
    )

    assert shown is False
    assert await events.read_events(run.pk, 0) == before
    cards = [e.data["request_id"] for e in before if e.event == "permission_request"]
    assert cards == [other, request_id]
    # A request asked again late, with 5 s left, does not cut the others' marks short.
    assert await live.permission_pending_add(run.pk, "late-request", ttl=5, then=[])
    redis = get_async_redis()
    for key in (live.pending_permissions_key(run.pk), live.permission_shown_key(run.pk)):
        assert await redis.ttl(key) > 60


@pytest.mark.asyncio
async def test_a_plan_mode_refusal_asked_again_is_the_same_refusal(transactional_db: Any, alice: Any) -> None:
    project = await sync_to_async(make_project)(owner=alice, permission_mode="plan")
    run = await sync_to_async(make_run)(owner=alice, project=project)
    write = {"file_path": "/w/notes.txt", "content": "x"}

    first = await ask_permission(run, "Write", write, call_key="call-1")
    again = await ask_permission(run, "Write", write, call_key="call-1")

    assert again == first
    assert await PermissionRequest.objects.filter(run=run).acount() == 1
    assert (await result_of(run, again) or {})["behavior"] == "deny"


@pytest.mark.asyncio
async def test_parallel_requests_are_decided_each_on_its_own(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    first, second = await ask_permission(run), await ask_permission(run, tool_input={"command": "make lint"})
    client = await signed_in(alice)

    await decide(client, second, "deny", message="not now")
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.WAITING_FOR_USER
    await decide(client, first, "allow")

    assert (await result_of(run, first) or {})["behavior"] == "allow"
    assert (await result_of(run, second) or {})["behavior"] == "deny"
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING


@pytest.mark.asyncio
async def test_a_retried_poll_gets_the_same_result(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)
    await decide(await signed_in(alice), request_id, "allow")

    assert await result_of(run, request_id) == await result_of(run, request_id)


@pytest.mark.asyncio
async def test_ask_user_question_through_the_prompt_tool_is_answered_as_updated_input(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    questions = [
        {
            "question": "Which database?",
            "header": "DB",
            "options": [{"label": "Postgres"}, {"label": "SQLite"}],
        },
        {
            "question": "Which extras?",
            "options": [{"label": "Cache"}, {"label": "Search"}],
            "multiSelect": True,
        },
    ]
    request_id = await ask_permission(run, "AskUserQuestion", {"questions": questions})
    [card] = [e.data for e in await events.read_events(run.pk, 0) if e.event == "ask_user_question"]
    assert card["question_id"] == request_id and len(card["questions"]) == 2

    client = await signed_in(alice)
    answers = {"Which database?": "Postgres", "Which extras?": {"selected": [0, 1]}}
    response = await client.post(
        "/api/askuser/submit-answer",
        {"question_id": request_id, "answers": answers},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content

    result = await result_of(run, request_id)
    assert result is not None and result["behavior"] == "allow"
    assert result["updatedInput"]["answers"] == {
        "Which database?": "Postgres",
        "Which extras?": "Cache, Search",
    }
    assert [q["question"] for q in result["updatedInput"]["questions"]] == [
        "Which database?",
        "Which extras?",
    ]


@pytest.mark.asyncio
async def test_plan_mode_refuses_a_write_at_once_without_a_card(transactional_db: Any, alice: Any) -> None:
    project = await sync_to_async(make_project)(owner=alice, permission_mode="plan")
    run = await sync_to_async(make_run)(owner=alice, project=project)

    request_id = await ask_permission(run, "Write", {"file_path": "/w/notes.txt", "content": "x"})

    assert await result_of(run, request_id) == {
        "behavior": "deny",
        "message": permission_asking.PLAN_MODE_WRITE.format(path="/w/notes.txt"),
    }
    assert [e for e in await events.read_events(run.pk, 0) if e.event == "permission_request"] == []
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING
    assert (await PermissionRequest.objects.aget(request_id=request_id)).decision == "deny"
