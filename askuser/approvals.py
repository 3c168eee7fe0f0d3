"""Tool approvals: Claude asks to use a tool, a person allows it once, always, or denies it.

One store for both engines. The CLI engine's ``approve`` MCP tool (``--permission-prompt-tool``)
reaches it through relay-permission and poll-decision; the SDK engine's ``can_use_tool`` calls
it directly. Either way the request becomes a ``permission_request`` card (made in
``permission_asking``), a member decides through submit-decision, and the waiting side gets
the permission result the CLI expects: ``{"behavior": "allow", "updatedInput",
"updatedPermissions"?}`` or ``{"behavior": "deny", "message"}``. A request nobody decides in
time, or whose run ends, is denied with a sentence Claude can act on.

AskUserQuestion reaches the prompt tool too: it becomes a question card (``asking``) and its
answers go back as ``updatedInput.answers``, so the CLI engine gets the same multi-question
forms as the SDK engine.

The result is rebuilt from the stored decision every time it is asked for, so a poll that is
retried (a dropped connection) gets the same answer; Redis only wakes the waiting side.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.utils import timezone
from redis import RedisError

from core import events
from core.after_response import after_response, give_way
from core.errors import Conflict, Gone, Invalid, NotFound
from core.questions import Handoff
from core.redis import outage_seen
from mcp_server.answers import CANCELLED, SUPERSEDED, TIMED_OUT
from promptmgr.models import (
    PermissionRule,
    Project,
    RunStatus,
)
from promptmgr.services import run_state

from . import live, policy, services
from .models import (
    Decision,
    PermissionRequest,
    PermissionStatus,
    Question,
    decision_claim,
    request_for_decision,
)

logger = logging.getLogger(__name__)

DECIDED_STATUSES = (PermissionStatus.ALLOWED, PermissionStatus.DENIED)

MSG_NOT_FOUND = "No such permission request."
MSG_ALREADY_DECIDED = "This request was already decided."
MSG_EXPIRED = "This request has expired; Claude was told it was denied."
MSG_CANCELLED = "This request was cancelled because the run ended."
MSG_NO_RULE = "There is no safe rule to always allow this tool call; allow it once instead."

DENIED = (
    "The user denied this {tool} call. Do not retry it; carry on without it or ask the user how to proceed."
)
DENIED_WITH = "The user denied this {tool} call: {message}"
DENIED_TIMEOUT = (
    "Nobody approved this {tool} call within {seconds} seconds, so it was not run. "
    "Do not retry it; carry on without it or ask the user how to proceed."
)
DENIED_RUN_ENDED = "The run is ending, so this {tool} call was not run. Do not retry it."
QUESTION_NOT_ANSWERED = "Could not ask the user ({reason}). Proceed with your best judgment."


def _rule_update(rule: str) -> dict[str, Any]:
    """``Bash(npm test:*)`` as the CLI's permission update for the running turn."""
    name, _, content = rule.partition("(")
    entry: dict[str, Any] = {"toolName": name}
    if content:
        entry["ruleContent"] = content[:-1] if content.endswith(")") else content
    return {"type": "addRules", "rules": [entry], "behavior": "allow", "destination": "session"}


def result_for(request: PermissionRequest) -> dict[str, Any] | None:
    """The permission result for a request that is over; None while it is pending.

    ``request`` comes with its run's project (``_load_for_run``): an expiry names its timeout.
    """
    if request.status == PermissionStatus.ALLOWED:
        result: dict[str, Any] = {"behavior": "allow", "updatedInput": request.tool_input}
        if request.decision == Decision.ALWAYS and request.rule:
            result["updatedPermissions"] = [_rule_update(request.rule)]
        return result
    if request.status == PermissionStatus.DENIED:
        return {"behavior": "deny", "message": request.message}
    if request.status == PermissionStatus.EXPIRED:
        seconds = request.run.conversation.project.ask_user_timeout
        return {"behavior": "deny", "message": DENIED_TIMEOUT.format(tool=request.tool_name, seconds=seconds)}
    if request.status == PermissionStatus.CANCELLED:
        return {"behavior": "deny", "message": DENIED_RUN_ENDED.format(tool=request.tool_name)}
    return None


def answered_input(tool_input: dict[str, Any], answer: Handoff) -> dict[str, Any] | None:
    """AskUserQuestion's input with the user's answers, or None when the hand-off holds none.

    The card's notes go in ``annotations`` under the first question, which the CLI
    appends to that answer ("… notes: …").
    """
    answers = {question: text for question, text in answer.answers.items() if text}
    if not answers:
        return None
    updated = {**tool_input, "answers": answers}
    if answer.notes:
        first = str(tool_input["questions"][0]["question"])
        updated["annotations"] = {first: {"notes": answer.notes}}
    return updated


# --- Waiting ------------------------------------------------------------------------------


def _load_for_run(run_id: int, request_id: str) -> PermissionRequest | None:
    # One query for the request and the project whose timeout an expiry names.
    try:
        return PermissionRequest.objects.with_run_and_project().get(request_id=request_id, run_id=run_id)
    except PermissionRequest.DoesNotExist:
        return None


def _question_for_run(run_id: int, request_id: str) -> Question | None:
    try:
        return Question.objects.with_run_and_project().get(question_id=request_id, run_id=run_id)
    except Question.DoesNotExist:
        return None


def _stored_answer(question: Question) -> Handoff | None:
    """The answer the database keeps, as the waiting side received it."""
    if not question.answer_items:
        return None
    return question.answer_form().handoff()


def _question_result(question: Question, poll: services.PollResult) -> dict[str, Any] | None:
    """AskUserQuestion through the prompt tool: the answers as its updated input, or a deny.

    A poll retried after the answer was taken (a dropped response) gets the same answer,
    rebuilt from the database.
    """
    tool_input = {"questions": question.questions}
    answer = poll.answer if poll.status == "answered" else None
    if poll.status == "consumed":
        answer = _stored_answer(question)
    if answer is not None:
        updated = answered_input(tool_input, answer)
        if updated is not None:
            return {"behavior": "allow", "updatedInput": updated}
        return {"behavior": "deny", "message": QUESTION_NOT_ANSWERED.format(reason="the answer was empty")}
    messages = {
        "expired": TIMED_OUT.format(seconds=question.run.conversation.project.ask_user_timeout),
        "cancelled": CANCELLED,
        "superseded": SUPERSEDED,
        "consumed": QUESTION_NOT_ANSWERED.format(reason="the answer was collected by an earlier request"),
    }
    if poll.status in messages:
        return {"behavior": "deny", "message": messages[poll.status]}
    return None


async def _question_wait(
    question: Question, wait_seconds: float, *, releasable: bool
) -> dict[str, Any] | None:
    poll = await services.answer_wait(
        run_id=question.run_id,
        question_id=str(question.question_id),
        wait_seconds=wait_seconds,
        releasable=releasable,
    )
    if poll.status == "consumed":
        # A retried poll after the answer was taken: the stored answer is what it gets.
        await question.arefresh_from_db(fields=["answer_items", "notes"])
    return _question_result(question, poll)


async def permission_wait(
    *, run_id: int, request_id: str, wait_seconds: float, releasable: bool = False
) -> dict[str, Any] | None:
    """The long-poll of the waiting side: the permission result once there is one, else None
    (``releasable``: a relay endpoint's, which this worker's shutdown ends, ``live.answer_pop``)."""
    request = await sync_to_async(_load_for_run)(run_id, request_id)
    if request is None:
        question = await sync_to_async(_question_for_run)(run_id, request_id)
        if question is None:
            raise NotFound(MSG_NOT_FOUND)
        return await _question_wait(question, wait_seconds, releasable=releasable)
    remaining = (request.expires_at - timezone.now()).total_seconds()
    woken: dict[str, Any] | None = None
    if request.status == PermissionStatus.PENDING and remaining > 0:
        woken = await live.answer_pop(
            request_id, wait_seconds=min(wait_seconds, remaining), releasable=releasable
        )
        if woken is not None and isinstance(woken.get("result"), dict):
            # A decision brings its result along: the tool starts without a database trip.
            return dict(woken["result"])
        request = await sync_to_async(_load_for_run)(run_id, request_id)
    assert request is not None
    if request.status == PermissionStatus.PENDING and request.expires_at <= timezone.now():
        await permission_close(request_id=request_id, status=PermissionStatus.EXPIRED)
        request = await sync_to_async(_load_for_run)(run_id, request_id)
    assert request is not None
    result = result_for(request)
    # Decided, and no wake taken on the way here: the decision's hand-off may never have
    # reached Redis (it failed after the commit), so this poll takes it from the database.
    if result is not None and woken is None and request.status in DECIDED_STATUSES:
        await _decision_from_database(request, result)
    return result


# --- Deciding -----------------------------------------------------------------------------


def _load_for_user(request_id: str, user: Any) -> PermissionRequest:
    services.require_signed_in(user)
    try:
        request = request_for_decision.get(request_id)
    except PermissionRequest.DoesNotExist:
        raise NotFound(MSG_NOT_FOUND) from None
    # Checked on the loaded project: an owner (the usual case) costs no second query.
    if not request.run.conversation.project.is_visible_to(user):
        raise NotFound(MSG_NOT_FOUND)
    return request


def _check_open(request: PermissionRequest) -> None:
    if request.status in (PermissionStatus.ALLOWED, PermissionStatus.DENIED):
        raise Conflict(MSG_ALREADY_DECIDED, code="already_decided")
    if request.status == PermissionStatus.CANCELLED:
        raise Gone(MSG_CANCELLED, code="cancelled")
    if request.status == PermissionStatus.EXPIRED or request.expires_at <= timezone.now():
        raise Gone(MSG_EXPIRED, code="expired")


def _add_rule(project: Project, rule: str, user: Any) -> None:
    try:
        with transaction.atomic():
            PermissionRule.objects.create(project=project, rule=rule, added_by=user)
    except IntegrityError:
        pass  # a teammate always-allowed the same call first


def _decide(request_id: str, user: Any, decision: str, message: str) -> PermissionRequest:
    """Record the first decision (compare-and-set on the pending status); nothing else.

    What is not needed for the waiting tool call to go on (the always-allow rule, the run's
    status) is done by ``_after_decision``, once the waiting side has been woken.
    """
    request = _load_for_user(request_id, user)
    _check_open(request)
    # The worker of the request's run died and no sweep has failed the run yet: nobody
    # would read this decision. The run fails now, and the decision is refused, not lost.
    if run_state.run_fail_if_orphaned(request.run):
        raise Gone(services.MSG_RUN_FINISHED, code="run_finished")
    if decision == Decision.ALWAYS and not request.suggested_rule:
        raise Invalid(MSG_NO_RULE, code="no_rule")
    allowed = decision in (Decision.ALLOW, Decision.ALWAYS)
    tool = request.tool_name
    told = DENIED_WITH.format(tool=tool, message=message) if message else DENIED.format(tool=tool)
    fields = {
        "status": PermissionStatus.ALLOWED if allowed else PermissionStatus.DENIED,
        "decision": decision,
        "rule": request.suggested_rule if decision == Decision.ALWAYS else "",
        "message": "" if allowed else told,
        "decided_by": user,
        "decided_at": timezone.now(),
    }
    updated = decision_claim.update(fields, request.pk, PermissionStatus.PENDING, timezone.now())
    if not updated:
        request.refresh_from_db()
        _check_open(request)  # somebody else got there first: 409 or 410
        raise Conflict(MSG_ALREADY_DECIDED, code="already_decided")
    for name, value in fields.items():
        setattr(request, name, value)
    return request


def _after_decision(request: PermissionRequest) -> None:
    if request.decision == Decision.ALWAYS:
        _add_rule(request.run.conversation.project, request.rule, request.decided_by)
    services.resume_if_idle_locked(request.run_id)


async def permission_decide(
    *, request_id: str, user: Any, decision: str, message: str = ""
) -> dict[str, Any]:
    """Record the first decision and wake the waiting Claude turn.

    The wake carries the permission result, so the waiting side answers the CLI at once;
    a poll retried later rebuilds the same result from the database. Once the decision is
    committed it stands: the person is told it was recorded as soon as its hand-off is sent,
    without waiting for Redis's reply. If Redis then fails the hand-off (a second try would
    only be 409), the waiting side takes the decision from the database when it polls again
    (``_decision_from_database``).
    """
    request = await sync_to_async(_decide)(request_id, user, decision, message.strip())
    remaining = max(1, int((request.expires_at - timezone.now()).total_seconds()))
    decided_at = request.decided_at or timezone.now()
    event = _decided_event(request, by=getattr(user, "username", ""), message=message.strip())
    # One transaction: the card's update, then the wake, so every page hears of the decision
    # before anything the tool call does. Not if a poll already took the decision from the
    # database: its card's update went with that. Sent before the acknowledgement, which
    # does not wait for Redis's reply (design notes, "The decision's hand-off beside its
    # acknowledgement").
    handoff = asyncio.ensure_future(
        live.answer_replace_unless_taken(
            request_id,
            {"result": result_for(request)},
            ttl=remaining + live.QUESTION_TTL_GRACE,
            run_events=services.card_and_resume(request.run_id, "permission_decided", event),
        )
    )
    # One turn of the loop: the hand-off's command goes out before the acknowledgement.
    await asyncio.sleep(0)

    async def bookkeeping() -> None:
        try:
            await handoff
        except RedisError as exc:
            outage_seen(exc)
            logger.warning(
                "permission request %s: the decision is stored but Redis failed its hand-off; "
                "Claude gets it from the database when it polls again",
                request_id,
            )
            # Database only, so an "Always allow" rule is not lost with the hand-off; the
            # pending mark goes when the waiting side takes the decision.
            await sync_to_async(_after_decision)(request)
            return
        await give_way()
        await sync_to_async(_after_decision)(request)
        await live.permission_pending_remove(request.run_id, request_id)

    # The person is answered once the decision is stored and Claude's wake is on its way;
    # the rest follows.
    await after_response(bookkeeping)
    return {
        "request_id": request_id,
        "decision": request.decision,
        "rule": request.rule or None,
        "decided_at": decided_at,
    }


def _decided_event(request: PermissionRequest, *, by: str, message: str) -> dict[str, Any]:
    """The card's update (``permission_decided``) for a person's decision."""
    decided_at = request.decided_at or timezone.now()
    return {
        "request_id": str(request.request_id),
        "decision": request.decision,
        "by": by,
        "rule": request.rule or None,
        "message": message,
        "decided_at": decided_at.isoformat(),
    }


def _stored_decided_event(request: PermissionRequest) -> dict[str, Any]:
    """The card's update rebuilt from the stored row, as its hand-off would have carried it:
    a person's (``_decided_event``; it reads ``decided_by``), whose own words are what
    follows the deny sentence's prefix, or the policy's (``policy.decided_event``)."""
    if request.decided_by_policy:
        return policy.decided_event(request, policy.applied_reasoning(request))
    prefix = DENIED_WITH.format(tool=request.tool_name, message="")
    words = request.message[len(prefix) :] if request.message.startswith(prefix) else ""
    return _decided_event(request, by=getattr(request.decided_by, "username", ""), message=words)


async def _decision_from_database(request: PermissionRequest, result: dict[str, Any]) -> None:
    """Take a decision the waiting side found in the database once, as its hand-off would
    have been (``live.answer_take_stored``). If that hand-off never reached Redis, the card's
    update goes to every page now; one that came, or an earlier poll's take, leaves the
    events as they are. The run's status and the pending mark are set again either way
    (both are idempotent), as the decision's own bookkeeping may have failed with Redis.

    Redis still down does not hold Claude back: the decision is returned all the same, and
    only the pages miss its card's update."""
    await sync_to_async(services.resume_if_idle_locked)(request.run_id)
    event = await sync_to_async(_stored_decided_event)(request)
    request_id = str(request.request_id)
    try:
        await live.answer_take_stored(
            request_id,
            {"result": result},
            run_events=services.card_and_resume(request.run_id, "permission_decided", event),
        )
        await live.permission_pending_remove(request.run_id, request_id)
    except RedisError as exc:
        outage_seen(exc)
        logger.warning(
            "permission request %s: Claude gets its decision from the database; with Redis "
            "unreachable its card's update reaches no page",
            request_id,
        )


# --- Closing ------------------------------------------------------------------------------


def _close(request_id: str, status: str) -> PermissionRequest | None:
    with transaction.atomic():
        if not PermissionRequest.objects.filter(
            request_id=request_id, status=PermissionStatus.PENDING
        ).update(status=status):
            return None
        request = PermissionRequest.objects.get(request_id=request_id)
        # A request cancelled because its run ends leaves the run's state to its ending.
        if status != PermissionStatus.CANCELLED:
            services.resume_if_idle(request.run_id)
    return request


async def permission_close(*, request_id: str, status: str) -> bool:
    """Expire (or cancel) a pending request: the card turns neutral, Claude is told no."""
    request = await sync_to_async(_close)(request_id, status)
    if request is None:
        return False
    await live.answer_wake(request_id, ttl=live.QUESTION_TTL_GRACE)
    await live.permission_pending_remove(request.run_id, request_id)
    reason = "cancelled" if status == PermissionStatus.CANCELLED else "timeout"
    closing: list[tuple[str, dict[str, Any]]] = [
        ("permission_expired", {"request_id": request_id, "reason": reason})
    ]
    if status != PermissionStatus.CANCELLED:
        closing.append(("run_status", {"status": RunStatus.RUNNING}))
    await events.append_events(request.run_id, closing)
    return True


async def request_withdraw(*, run_id: int, request_id: str) -> None:
    """The waiting side gave up (the CLI withdrew the call, or the run is stopping): the
    card closes as cancelled, whichever kind it is."""
    if await sync_to_async(_load_for_run)(run_id, request_id) is not None:
        await permission_close(request_id=request_id, status=PermissionStatus.CANCELLED)
    else:
        await services.question_expire(question_id=request_id, reason="cancelled")


def _pending_ids(run_id: int) -> list[str]:
    return [
        str(r)
        for r in PermissionRequest.objects.filter(run_id=run_id)
        .pending()
        .values_list("request_id", flat=True)
    ]


async def permissions_close_for_run(*, run_id: int) -> None:
    """The run ended: requests still open are cancelled and their cards closed."""
    for request_id in await sync_to_async(_pending_ids)(run_id):
        await permission_close(request_id=request_id, status=PermissionStatus.CANCELLED)


def permissions_cancel_for_dead_run(run_id: int) -> int:
    """A run whose worker died: its open requests are cancelled (sync, for the sweep)."""
    return PermissionRequest.objects.filter(run_id=run_id, status=PermissionStatus.PENDING).update(
        status=PermissionStatus.CANCELLED
    )
