"""Asking: a question stored, its card shown, and the same tool call asked again.

Both engines ask here: the MCP server's relay-question (``askuser.api``) and the SDK
engine's AskUserQuestion (``permission_asking.permission_request_create``). A question is written to
the database and shown through Redis in one script (``live.question_show``); a newer one
supersedes the run's pending one, and a call asked again (``Question.call_key``) gets the
question it asked. Answering and waiting are ``services``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core import events
from core.errors import Gone
from core.prepared import PreparedGet, PreparedRows
from core.questions import QuestionSpec
from promptmgr.models import ACTIVE_RUN_STATUSES, Run, RunStatus
from promptmgr.services import run_state

from . import live, policy, services
from .models import Question, QuestionSource, QuestionStatus

# Compiled once (core.prepared): on the way from Claude's question to its card, compiling
# these took longer than running them (1.1 and 0.7 ms against 0.1 each, stamped).
# The run's row lock, with only the columns read: its status and the project's timeout.
run_for_new_question: PreparedGet[Run] = PreparedGet(
    lambda: (
        Run.objects.select_for_update()
        .select_related("conversation__project")
        .only("status", "conversation__project__ask_user_timeout")
    ),
    "id",
    placeholder=0,
)
# A new question's look at its run's questions, in one query: the pending ones (which it
# supersedes) and every one asked by a known tool call (which it may be again). The keyed
# ones are most of a run's questions, a few dozen rows in a long turn: still one query.
question_calls: PreparedRows[Question] = PreparedRows(
    lambda: (
        Question.objects.filter(Q(status=QuestionStatus.PENDING) | ~Q(call_key=""))
        .order_by()
        .values_list("pk", "question_id", "status", "call_key")
    ),
    "run",
    placeholder=0,
)


@dataclass(frozen=True)
class _Created:
    question: Question
    superseded: list[str]
    timeout: int
    # The same tool call asked again: this is the question it asked before.
    again: bool = False


def _create_question(
    run_id: int, source: str, questions: list[QuestionSpec], timeout: int | None, call_key: str
) -> _Created:
    """The new question, the ids of the pending ones it supersedes, and its timeout
    (the project's unless given); or the question ``call_key``'s tool call asked before."""
    with transaction.atomic():
        run = run_for_new_question.get(run_id)
        if timeout is None:
            timeout = int(run.conversation.project.ask_user_timeout)
        if run.status not in ACTIVE_RUN_STATUSES:
            raise Gone(services.MSG_RUN_FINISHED, code="run_finished")
        rows = question_calls.rows(run_id)
        # The call asked again: its question was stored, but its relay was answered 503
        # (Redis failed to show the card) or its reply was lost on the way (a proxy's 502),
        # so it posted again; the SDK engine asks again the same way through an outage. It
        # gets the question it asked, whatever became of it, not a second that supersedes it.
        again = next((pk for pk, _, _, key in rows if call_key and key == call_key), None)
        if again is not None:
            return _asked_again(again)
        question = Question.objects.create(
            run=run,
            source=source,
            questions=[spec.wire() for spec in questions],
            expires_at=timezone.now() + timedelta(seconds=timeout),
            call_key=call_key,
        )
        # One pending question per run: a newer one supersedes the old.
        superseded = [str(qid) for _, qid, status, _ in rows if status == QuestionStatus.PENDING]
        if superseded:
            Question.objects.filter(question_id__in=superseded, status=QuestionStatus.PENDING).update(
                status=QuestionStatus.SUPERSEDED, superseded_by=question
            )
        run_state.run_wait_for_user(run_id)
    return _Created(question, superseded, timeout)


def _asked_again(pk: int) -> _Created:
    """The question a call asked before, with the ones it superseded then (their cards are
    closed again if its own was never shown) and the timeout it was asked with."""
    question = Question.objects.get(pk=pk)
    superseded = [
        str(qid)
        for qid in Question.objects.filter(superseded_by=question).values_list("question_id", flat=True)
    ]
    timeout = round((question.expires_at - question.created_at).total_seconds())
    return _Created(question, superseded, timeout, again=True)


async def question_create(
    *,
    run_id: int,
    source: QuestionSource,
    questions: list[QuestionSpec],
    timeout: int | None = None,
    call_key: str = "",
) -> dict[str, Any]:
    """Store a question, mark the run waiting and push the card to the browser at once.

    ``call_key`` names the tool call that asks (see ``Question.call_key``): asked again, the
    call gets the question it asked before, its card shown now if it never was, and
    ``questions`` are not looked at."""
    created = await sync_to_async(_create_question)(run_id, source, questions, timeout, call_key)
    question, timeout = created.question, created.timeout
    payload = services.card(question, timeout).wire()
    if created.again:
        await _show_again(run_id, question, payload, created.superseded)
        return payload
    for old_id in created.superseded:
        await _announce_superseded(run_id, old_id)
    await _show(run_id, payload, ttl=timeout + live.QUESTION_TTL_GRACE)
    return payload


async def _show(run_id: int, payload: dict[str, Any], *, ttl: int, only_if_new: bool = False) -> bool:
    """The card cached, marked shown and on the page with the run's new status in one round
    trip (the runner's read timeout, ``question_push_if_unshown``, is only the safety net),
    then the policy's look at it; whether it was shown now."""
    shown = await live.question_show(
        run_id,
        payload,
        ttl=ttl,
        then=[("run_status", {"status": RunStatus.WAITING_FOR_USER})],
        only_if_new=only_if_new,
    )
    if shown:
        policy.question_consider(
            run_id=run_id, question_id=payload["question_id"], questions=payload["questions"]
        )
    return shown


async def _show_again(
    run_id: int, question: Question, payload: dict[str, Any], superseded: list[str]
) -> None:
    """A question asked again: its card, with what its first asking would have sent, if it
    is still open and was never shown (Redis failed that asking after its commit).

    Shown already, nothing is sent again (``only_if_new``): not the card, not the run's
    status, which may have moved on since. One case stays open: a first asking whose show
    reached Redis but whose reply was lost leaves the policy unasked (it runs after the
    show); the person still answers the card."""
    left = (question.expires_at - timezone.now()).total_seconds()
    if question.status != QuestionStatus.PENDING or left <= 0:
        return  # the poll says what became of it (and expires it, when its time is up)
    if not await _show(run_id, payload, ttl=int(left) + live.QUESTION_TTL_GRACE, only_if_new=True):
        return
    # Its first asking closed the cards it replaced before its own card, and may have
    # stopped before either (Redis failed it): they are closed again now, after the card,
    # since only a card never shown says so. A card closed twice stays as it was closed.
    for old_id in superseded:
        await _announce_superseded(run_id, old_id)


async def _announce_superseded(run_id: int, question_id: str) -> None:
    """Close a replaced question's card and end its wait now, not at the next long-poll turn."""
    await live.question_cache_clear(run_id, question_id)
    await live.answer_wake(question_id, ttl=live.QUESTION_TTL_GRACE)
    await events.append_event(
        run_id, "ask_user_expired", {"question_id": question_id, "reason": services.REASON_SUPERSEDED}
    )


async def question_push_if_unshown(*, run_id: int) -> bool:
    """Push the cached question to the event stream unless it was pushed already.

    The runner's 2-second read timeout calls it: the design's check of the question
    cache. A relay's question is cached and shown in one step (``live.question_show``),
    so this finds it shown and pushes nothing; it is the safety net for a question cached
    on its own. Whoever marks a question shown first pushes it; nobody twice.
    """
    cached = await live.question_cache_get(run_id)
    if cached is None:
        return False
    if datetime.fromisoformat(cached["expires_at"]) <= timezone.now():
        await services.question_expire(question_id=cached["question_id"])
        return False
    ttl = int(cached.get("timeout", settings.ASK_USER_DEFAULT_TIMEOUT)) + live.QUESTION_TTL_GRACE
    return await live.question_show(run_id, cached, ttl=ttl, then=[], cache=False)
