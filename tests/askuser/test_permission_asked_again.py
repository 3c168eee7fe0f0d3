"""A tool call's permission request posted again (``Idempotency-Key``) is the request it made.

The MCP server's approve tool sends one key per tool call, the same on every try. A try
the app stored before its reply failed (a Redis outage after the commit: 503; a reply lost
on its way: a proxy's 502, a web process restarting) is posted again, and must get that
request back, decided or not: not a second card for a call the team has seen or decided
already. The app runs under uvicorn on a real port, against the test database and a real
Redis (its own where the test takes it down).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from askuser import approvals
from askuser.models import PermissionRequest, PermissionStatus
from core import events
from promptmgr.models import Run
from tests.askuser.test_question_asked_again import asking_run, relay_poll, relay_post
from tests.helpers import BASH_CALL, PrivateRedis, login_client

pytestmark = pytest.mark.e2e

CALL = {"tool_name": "Bash", "input": BASH_CALL, "tool_use_id": "toolu_01AskedAgain"}


def relay(app_server: Any, token: str, key: str | None) -> httpx.Response:
    return relay_post(app_server, token, "relay-permission", CALL, key)


def poll_decision(app_server: Any, token: str, request_id: str) -> httpx.Response:
    return relay_poll(app_server, token, "poll-decision", {"request_id": request_id})


def run_events(run: Run, *names: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.event, e.data) for e in asyncio.run(events.read_events(run.pk, 0)) if e.event in names]


def cards(run: Run) -> list[str]:
    """The request ids of the run's permission cards, as the page hears them."""
    return [data["request_id"] for _, data in run_events(run, "permission_request")]


def test_a_tool_call_posted_again_after_its_card_failed_is_the_stored_request_with_one_card(
    app_server: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, token = asking_run(alice)

    with private_redis.down():
        # The run's token is checked in this process; the request is stored, its card is not shown.
        refused = relay(app_server, token, "call-1")
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "redis_unavailable"
    [stored] = PermissionRequest.objects.filter(run=run)

    again = relay(app_server, token, "call-1")

    assert again.status_code == 201, again.text
    assert again.json()["request_id"] == str(stored.request_id)
    assert PermissionRequest.objects.filter(run=run).count() == 1
    assert cards(run) == [str(stored.request_id)]
    assert [data["status"] for _, data in run_events(run, "run_status")] == ["waiting_for_user"]


def test_a_tool_call_posted_again_after_it_was_decided_gets_the_decision_and_no_second_card(
    app_server: Any, alice: Any
) -> None:
    """The first reply was lost on its way and a teammate allowed the call meanwhile: the
    retry gets that request, nobody is asked again, and its poll takes the allow."""
    run, token = asking_run(alice)
    request_id = relay(app_server, token, "call-1").json()["request_id"]
    browser = login_client(app_server, "alice", "alice-password")
    decided = browser.post(
        "/api/askuser/submit-decision", json={"request_id": request_id, "decision": "allow"}
    )
    assert decided.status_code == 200, decided.text

    again = relay(app_server, token, "call-1")

    assert again.status_code == 201 and again.json()["request_id"] == request_id
    assert cards(run) == [request_id]
    poll = poll_decision(app_server, token, request_id)
    assert poll.status_code == 200
    assert poll.json()["result"] == {"behavior": "allow", "updatedInput": BASH_CALL}


def test_a_tool_call_shown_and_posted_again_sends_nothing_more(app_server: Any, alice: Any) -> None:
    """Its first reply was lost after the card went out: the retry changes nothing on the
    page, not even the run's status, which may have moved on since."""
    run, token = asking_run(alice)
    first = relay(app_server, token, "call-1").json()["request_id"]
    before = asyncio.run(events.read_events(run.pk, 0))

    again = relay(app_server, token, "call-1")

    assert again.status_code == 201 and again.json()["request_id"] == first
    assert asyncio.run(events.read_events(run.pk, 0)) == before


def test_each_call_is_a_request_of_its_own_and_a_key_is_the_runs_own(
    app_server: Any, alice: Any, bob: Any
) -> None:
    run, token = asking_run(alice)
    bobs_run, bobs_token = asking_run(bob)
    first = relay(app_server, token, "call-1").json()["request_id"]

    second = relay(app_server, token, "call-2").json()["request_id"]
    # Another run's call under the same key makes its own request: keys name calls of one run.
    bobs = relay(app_server, bobs_token, "call-1")
    # No key (an MCP server of an earlier version): every post is a request of its own.
    unkeyed = [relay(app_server, token, None).json()["request_id"] for _ in range(2)]

    assert len({first, second, *unkeyed}) == 4
    assert bobs.status_code == 201 and bobs.json()["request_id"] not in (first, second)
    assert PermissionRequest.objects.get(request_id=bobs.json()["request_id"]).run_id == bobs_run.pk
    assert cards(run) == [first, second, *unkeyed]


def test_an_idempotency_key_longer_than_a_tool_call_id_is_refused_with_nothing_stored(
    app_server: Any, alice: Any
) -> None:
    run, token = asking_run(alice)

    response = relay(app_server, token, "k" * 201)

    assert response.status_code == 422, response.text
    assert "Idempotency-Key" in response.text
    assert not PermissionRequest.objects.filter(run=run).exists()


def test_a_tool_call_whose_time_ran_out_before_it_was_posted_again_shows_no_card(
    app_server: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    run, token = asking_run(alice)
    with private_redis.down():
        assert relay(app_server, token, "call-1").status_code == 503
    PermissionRequest.objects.filter(run=run).update(expires_at=timezone.now() - timedelta(seconds=1))

    again = relay(app_server, token, "call-1")

    # The poll denies it as timed out, as it would any request whose time is up.
    assert again.status_code == 201
    assert cards(run) == []
    poll = poll_decision(app_server, token, again.json()["request_id"])
    assert poll.status_code == 200
    assert poll.json()["result"]["behavior"] == "deny"
    assert PermissionRequest.objects.get(run=run).status == PermissionStatus.EXPIRED
    assert poll.json()["result"]["message"] == approvals.DENIED_TIMEOUT.format(tool="Bash", seconds=300)
