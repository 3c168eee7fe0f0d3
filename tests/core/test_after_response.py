"""A person's answer or decision is acknowledged before its bookkeeping (``core.after_response``):
a decision's response goes out once it is stored and its hand-off (with the card's events
in the hand-off's transaction) is sent, without waiting for Redis's reply; an answer's once
it is committed, its hand-off (with the card's events) right after. The rest (the run's resume, the clean-up) follows in the same request,
and is never skipped."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from django.conf import settings
from django.test import AsyncClient

from askuser import approvals, live
from askuser.models import PermissionRequest, PermissionStatus, Question, QuestionStatus
from core import after_response as after_response_module
from core import events
from core.after_response import after_response, give_way, serving
from promptmgr.models import Run, RunStatus
from tests.helpers import (
    BASH_CALL,
    Message,
    asgi_request,
    ask_permission,
    http_scope,
    open_question,
    owned_run,
)

pytestmark = pytest.mark.unit


def replying(log: list[str], *, then: Callable[[], Awaitable[None]] | None = None) -> Any:
    """A bare ASGI app that defers a step, then replies (and then runs ``then``)."""

    async def app(scope: Message, receive: Any, send: Any) -> None:
        async def step() -> None:
            log.append("deferred step")

        await after_response(step)
        log.append("view returned")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})
        log.append("response sent")
        if then is not None:
            await then()

    return app


async def test_deferred_work_runs_once_the_response_has_gone_out() -> None:
    log: list[str] = []

    await asgi_request(serving(replying(log)), http_scope("/"))

    assert log == ["view returned", "response sent", "deferred step"]


async def test_without_a_server_that_defers_the_work_runs_at_once() -> None:
    log: list[str] = []

    await asgi_request(replying(log), http_scope("/"))

    assert log == ["deferred step", "view returned", "response sent"]


async def test_deferred_work_still_runs_when_the_app_fails_and_one_failing_step_stops_no_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []

    async def broken() -> None:
        raise RuntimeError("the app failed after its reply")

    async def app(scope: Message, receive: Any, send: Any) -> None:
        async def failing_step() -> None:
            raise ValueError("this step failed")

        await after_response(failing_step)
        await replying(log, then=broken)(scope, receive, send)

    with (
        caplog.at_level(logging.ERROR, logger="core.after_response"),
        pytest.raises(RuntimeError, match="the app failed"),
    ):
        await asgi_request(serving(app), http_scope("/"))

    assert log == ["view returned", "response sent", "deferred step"]
    assert "this step failed" in caplog.text


async def test_deferred_work_gives_way_to_what_the_wake_set_going_before_its_bookkeeping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(after_response_module, "GIVE_WAY_SECONDS", 0.2)
    log: list[str] = []
    stamps: dict[str, float] = {}

    async def app(scope: Message, receive: Any, send: Any) -> None:
        async def handoff_then_bookkeeping() -> None:
            stamps["woken"] = time.monotonic()
            await give_way()
            stamps["bookkeeping"] = time.monotonic()
            log.append("bookkeeping")

        async def woken_side() -> None:
            # What the hand-off woke: it runs while the bookkeeping gives way.
            await asyncio.sleep(0.05)
            log.append("woken side's next step")

        await after_response(handoff_then_bookkeeping)
        asyncio.get_running_loop().create_task(woken_side())
        await replying(log)(scope, receive, send)

    await asgi_request(serving(app), http_scope("/"))

    assert log == ["view returned", "response sent", "woken side's next step", "bookkeeping", "deferred step"]
    assert stamps["bookkeeping"] - stamps["woken"] >= 0.2


async def test_giving_way_outside_deferred_work_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # Django's test clients and services called directly run the work at once, as before.
    monkeypatch.setattr(after_response_module, "GIVE_WAY_SECONDS", 30.0)
    log: list[str] = []

    async def step() -> None:
        await give_way()
        log.append("bookkeeping")

    async with asyncio.timeout(2):
        await give_way()
        await asgi_request(replying(log), http_scope("/"))
        await after_response(step)

    assert log == ["deferred step", "view returned", "response sent", "bookkeeping"]


# --- Through the app's own ASGI entry point, as uvicorn serves it --------------------------


async def submit_through_the_app(
    user: Any, path: str, payload: dict[str, Any], at_ack: Callable[[], Awaitable[None]]
) -> int:
    """POST ``payload`` as ``user``'s page does (session cookie, CSRF token) through
    ``promptmgr.asgi.application``; ``at_ack`` runs as the response's last body goes out.
    Returns the status."""
    from promptmgr.asgi import application

    client = AsyncClient()
    await client.aforce_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    token = "x" * 32
    headers = [
        (
            b"cookie",
            f"{settings.SESSION_COOKIE_NAME}={session}; {settings.CSRF_COOKIE_NAME}={token}".encode(),
        ),
        (b"x-csrftoken", token.encode()),
        (b"content-type", b"application/json"),
    ]

    async def on_send(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            await at_ack()

    sent = await asgi_request(
        application, http_scope(path, "POST", headers), json.dumps(payload).encode(), on_send
    )
    return int(sent[0]["status"])


async def event_names(run: Run) -> list[str]:
    return [e.event for e in await events.read_events(run.pk, 0)]


@pytest.mark.asyncio
async def test_a_decision_is_acknowledged_with_its_hand_off_sent_and_its_bookkeeping_after(
    transactional_db: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)
    order: list[str] = []
    seen_at_ack: dict[str, Any] = {}
    acknowledged = asyncio.Event()
    hand_off = live.answer_replace_unless_taken

    async def sent(*args: Any, **kwargs: Any) -> bool:
        # A Redis slow to reply: the hand-off lands only once the person has the
        # acknowledgement, which must not wait for it.
        order.append("hand-off sent")
        await acknowledged.wait()
        return await hand_off(*args, **kwargs)

    monkeypatch.setattr(live, "answer_replace_unless_taken", sent)

    async def at_ack() -> None:
        order.append("acknowledged")
        acknowledged.set()
        seen_at_ack["decision"] = (await PermissionRequest.objects.aget(request_id=request_id)).status
        seen_at_ack["status"] = (await Run.objects.aget(pk=run.pk)).status
        seen_at_ack["pending"] = await live.permissions_pending(run.pk)

    async with asyncio.timeout(10):
        status = await submit_through_the_app(
            alice, "/api/askuser/submit-decision", {"request_id": request_id, "decision": "allow"}, at_ack
        )

    assert status == 200
    # Claude's wake went out before the acknowledgement, which did not wait for Redis's reply.
    assert order == ["hand-off sent", "acknowledged"]
    # The decision was the database's; the run's resume and the pending set's clean-up had
    # not happened yet, and did within the same request.
    assert seen_at_ack["decision"] == PermissionStatus.ALLOWED
    assert (seen_at_ack["status"], seen_at_ack["pending"]) == (RunStatus.WAITING_FOR_USER, True)
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING
    assert not await live.permissions_pending(run.pk)
    # The wake landed with the card's update ahead of it, once.
    assert await approvals.permission_wait(run_id=run.pk, request_id=request_id, wait_seconds=0) == {
        "behavior": "allow",
        "updatedInput": BASH_CALL,
    }
    names = await event_names(run)
    assert names.count("permission_decided") == 1
    assert names[-2:] == ["permission_decided", "run_status"]


@pytest.mark.asyncio
async def test_an_answer_is_acknowledged_once_committed_and_handed_to_claude_in_the_same_request(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    question_id = await open_question(run)
    seen_at_ack: dict[str, Any] = {}

    async def at_ack() -> None:
        seen_at_ack["question"] = (await Question.objects.aget(question_id=question_id)).status
        seen_at_ack["events"] = await event_names(run)
        seen_at_ack["status"] = (await Run.objects.aget(pk=run.pk)).status
        # Not yet handed over: nothing to take without waiting.
        seen_at_ack["handoff"] = await live.answer_pop(question_id, wait_seconds=0)

    status = await submit_through_the_app(
        alice, "/api/askuser/submit-answer", {"question_id": question_id, "selectedOptions": [0]}, at_ack
    )

    assert status == 200
    # At the acknowledgement the answer is the database's; Claude's hand-off with the card's
    # events ahead of it, the run's resume and the clean-up follow in the same request.
    assert seen_at_ack["question"] == QuestionStatus.ANSWERED
    assert seen_at_ack["handoff"] is None
    assert "ask_user_answered" not in seen_at_ack["events"]
    assert seen_at_ack["status"] == RunStatus.WAITING_FOR_USER
    assert await live.answer_pop(question_id, wait_seconds=0) is not None
    assert (await event_names(run))[-2:] == ["ask_user_answered", "run_status"]
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING
    answered = [e.data for e in await events.read_events(run.pk, 0) if e.event == "ask_user_answered"]
    assert [a["answered_by"] for a in answered] == ["alice"]
