"""Questions and answers: the one store both engines and all three endpoints share.

A question is written to the database (history) and to the Redis question cache (live),
pushed to the run's event stream at once (``asking``), and answered exactly once through
``answer_submit``. The answer is handed to the waiting side (the MCP server's long-poll,
or the SDK engine's callback) through a Redis list that is popped once.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from core import events
from core.after_response import after_response, give_way
from core.errors import MSG_SIGN_IN, Conflict, Gone, Invalid, NotFound, Unauthorized
from core.prepared import PreparedRows
from core.questions import AnswerIn, Card, CardSource, FormAnswer, Handoff
from promptmgr.models import Run, RunStatus
from promptmgr.services import run_state

from . import live, policy
from .answers import AnswerError, normalize_answers
from .models import (
    PermissionRequest,
    PermissionStatus,
    Question,
    QuestionStatus,
    answer_claim,
    question_for_answer,
)

logger = logging.getLogger(__name__)

MSG_RUN_FINISHED = "The run has finished; it cannot ask or receive answers any more."
MSG_NOT_FOUND = "No such question."
MSG_ALREADY_ANSWERED = "This question was already answered."
MSG_EXPIRED = "This question has expired; Claude was told to proceed without an answer."
MSG_CANCELLED = "This question was cancelled because the run ended."
MSG_CONSUMED = "The answer was already collected."
MSG_SUPERSEDED = "This question was replaced by a newer question before anybody answered it."
GONE_MESSAGES = {
    "expired": MSG_EXPIRED,
    "cancelled": MSG_CANCELLED,
    "consumed": MSG_CONSUMED,
    "superseded": MSG_SUPERSEDED,
}
# The ``reason`` of the ask_user_expired event that closes a question a newer one replaced.
REASON_SUPERSEDED = "superseded"
# How long after its commit an answer may still be on its way to Redis; a poll that finds
# it committed for longer and not taken delivers it from the database
# (``_answer_from_database``). Its push follows the commit within milliseconds.
HANDOFF_GRACE_SECONDS = 5
# What keeps a run waiting for a person: its pending questions and permission requests.
PENDING_CARDS = (
    run_state.Pending(Question, QuestionStatus.PENDING),
    run_state.Pending(PermissionRequest, PermissionStatus.PENDING),
)


def card_and_resume(run_id: int, event: str, data: dict[str, Any]) -> events.RunEvents:
    """What goes into an answer's or a decision's hand-off: the card's update, then the run
    running again, so every page hears of both before anything Claude does with it."""
    return (run_id, [(event, data), ("run_status", {"status": RunStatus.RUNNING})])


@dataclass(frozen=True)
class PollResult:
    status: str  # answered | waiting | expired | cancelled | consumed | superseded
    answer: Handoff | None = None


def card(question: Question, timeout: int) -> Card:
    """The normalized question shape both engines share (the card's input)."""
    return Card(
        question_id=str(question.question_id),
        source=cast(CardSource, question.source),
        expires_at=question.expires_at,
        timeout=timeout,
        questions=question.questions,
    )


# --- Expiry and closing -----------------------------------------------------------------

# The run's pending questions (their ids), compiled once (core.prepared): a run's end
# cancels them (a new question reads them with its own query, ``asking.question_calls``).
pending_question_ids: PreparedRows[Question] = PreparedRows(
    lambda: Question.objects.pending().order_by().values_list("question_id"), "run", placeholder=0
)


def resume_if_idle(run_id: int) -> bool:
    """Claude works again once nothing of this run waits for a person (no question and no
    permission request pending), unless the run ended meanwhile; True when it resumed."""
    with contextlib.suppress(run_state.IllegalTransition):
        return run_state.run_resume(run_id, unless=PENDING_CARDS)
    return False


def resume_if_idle_locked(run_id: int) -> bool:
    """``resume_if_idle`` in a transaction of its own, once an answer or a decision has gone
    to Claude. The run's row is the lock a new card of the run takes too
    (``asking._create_question``, ``permission_asking._create``): a card made meanwhile is
    either seen pending here, or marks the run waiting after this."""
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run_id).exists()
        return resume_if_idle(run_id)


def _expire(question_id: str, status: str) -> Question | None:
    with transaction.atomic():
        updated = Question.objects.filter(question_id=question_id, status=QuestionStatus.PENDING).update(
            status=status
        )
        if not updated:
            return None
        question = Question.objects.get(question_id=question_id)
        # A question cancelled because its run ends leaves the run's state to its ending.
        if status != QuestionStatus.CANCELLED:
            resume_if_idle(question.run_id)
    return question


async def question_expire(*, question_id: str, reason: str = "timeout") -> bool:
    """Mark a pending question expired (or cancelled) and tell the browser."""
    status = QuestionStatus.CANCELLED if reason == "cancelled" else QuestionStatus.EXPIRED
    question = await sync_to_async(_expire)(question_id, status)
    if question is None:
        return False
    await live.question_cache_clear(question.run_id, question_id)
    await events.append_event(
        question.run_id, "ask_user_expired", {"question_id": question_id, "reason": reason}
    )
    if reason != "cancelled":
        await events.append_event(question.run_id, "run_status", {"status": RunStatus.RUNNING})
    return True


def _pending_ids(run_id: int) -> list[str]:
    return [str(question_id) for (question_id,) in pending_question_ids.rows(run_id)]


async def questions_close_for_run(*, run_id: int) -> None:
    """The run ended: questions still open are cancelled and their cards closed."""
    for question_id in await sync_to_async(_pending_ids)(run_id):
        await question_expire(question_id=question_id, reason="cancelled")


# --- Answering ----------------------------------------------------------------------------


def require_signed_in(user: Any) -> None:
    """A click's person is loaded here, with the click's own database work, on the request's
    thread (``askuser.api.ClickAuth``): one who is not signed in gets the API's 401."""
    if not user.is_authenticated:
        raise Unauthorized(MSG_SIGN_IN, code="unauthorized")


def _load_for_user(question_id: str, user: Any) -> Question:
    require_signed_in(user)
    try:
        question = question_for_answer.get(question_id)
    except Question.DoesNotExist:
        raise NotFound(MSG_NOT_FOUND) from None
    # Checked on the loaded project: an owner (the usual case) costs no second query.
    if not question.run.conversation.project.is_visible_to(user):
        raise NotFound(MSG_NOT_FOUND)
    return question


def _check_open(question: Question) -> None:
    if question.status in (QuestionStatus.ANSWERED, QuestionStatus.DELIVERED):
        raise Conflict(MSG_ALREADY_ANSWERED, code="already_answered")
    if question.status == QuestionStatus.CANCELLED:
        raise Gone(MSG_CANCELLED, code="cancelled")
    if question.status == QuestionStatus.SUPERSEDED:
        raise Gone(MSG_SUPERSEDED, code="superseded")
    if question.status == QuestionStatus.EXPIRED or question.expires_at <= timezone.now():
        raise Gone(MSG_EXPIRED, code="expired")


def _record_answer(question: Question, user: Any, form: FormAnswer) -> Question:
    """The first answer wins: ``question`` (as loaded, still pending) is updated only if
    it still is, and returned as stored. Nothing else: the run resumes once the waiting
    side has the answer (``answer_submit``)."""
    now = timezone.now()
    fields = {
        "status": QuestionStatus.ANSWERED,
        "answers": form.display,
        "answer_items": [item.model_dump() for item in form.items],
        "notes": form.notes,
        "answered_by": user,
        "answered_at": now,
    }
    updated = answer_claim.update(fields, question.pk, QuestionStatus.PENDING, now)
    if not updated:
        _check_open(Question.objects.get(pk=question.pk))  # 409 or 410: somebody else got there first
        raise Conflict(MSG_ALREADY_ANSWERED, code="already_answered")
    for name, value in fields.items():
        setattr(question, name, value)
    return question


def _prepare_answer(question_id: str, user: Any, body: AnswerIn) -> tuple[Question, FormAnswer]:
    question = _load_for_user(question_id, user)
    _check_open(question)
    # The worker of the question's run died and no sweep has failed the run yet: nobody
    # would read this answer. The run fails now, and the answer is refused, not lost.
    if run_state.run_fail_if_orphaned(question.run):
        raise Gone(MSG_RUN_FINISHED, code="run_finished")
    try:
        form = normalize_answers(question.questions, body)
    except AnswerError as exc:
        raise Invalid(str(exc), code="invalid_answer") from None
    return question, form


def _submit(question_id: str, user: Any, body: AnswerIn) -> tuple[Question, FormAnswer, dict[str, Any]]:
    """The answer validated and recorded; the question as stored, the form, the card's update."""
    question, form = _prepare_answer(question_id, user, body)
    question = _record_answer(question, user, form)
    return question, form, _answered_event(question)


async def answer_submit(*, question_id: str, user: Any, body: AnswerIn) -> dict[str, Any]:
    """Record the first valid answer and hand it to the waiting Claude turn."""
    # One trip to the database thread: validation and the first-answer-wins update.
    try:
        question, form, event = await sync_to_async(_submit)(question_id, user, body)
    except Conflict:
        # An answer the policy gave can be replaced until Claude takes it (else 409 again).
        return await policy.answer_override(question_id=question_id, user=user, body=body)
    remaining = max(1, int((question.expires_at - timezone.now()).total_seconds()))

    async def handoff_and_bookkeeping() -> None:
        # One transaction: the card's update, then the hand-off (the waiting long-poll
        # returns the moment it lands), so every page hears of the answer before Claude's reply.
        await live.answer_push(
            question_id,
            form.handoff().model_dump(),
            ttl=remaining + live.QUESTION_TTL_GRACE,
            run_events=card_and_resume(question.run_id, "ask_user_answered", event),
        )
        await give_way()
        await sync_to_async(resume_if_idle_locked)(question.run_id)
        await live.question_cache_clear(question.run_id, question_id)

    # The person is answered once the answer is committed; Claude is woken right after the
    # response (a hand-off that never comes is taken from the database: answer_wait).
    await after_response(handoff_and_bookkeeping)
    return event


# --- The waiting side ---------------------------------------------------------------------


def _question_for_run(question_id: str, run_id: int) -> Question:
    try:
        return Question.objects.get(question_id=question_id, run_id=run_id)
    except Question.DoesNotExist:
        raise NotFound(MSG_NOT_FOUND) from None


_CLOSED_STATUSES = {
    QuestionStatus.CANCELLED: "cancelled",
    QuestionStatus.EXPIRED: "expired",
    QuestionStatus.SUPERSEDED: "superseded",
}


def _handoff_lost(question: Question) -> bool:
    """An answer committed ``HANDOFF_GRACE_SECONDS`` ago whose hand-off no poll has seen:
    its process died between the commit and the push, or Redis failed the push (which
    follows the response, ``answer_submit``: the person was told it was sent, and a
    second try is 409)."""
    return (
        question.status == QuestionStatus.ANSWERED
        and bool(question.answer_items)
        and question.answered_at is not None
        and timezone.now() - question.answered_at > timedelta(seconds=HANDOFF_GRACE_SECONDS)
    )


def _answered_event(question: Question) -> dict[str, Any]:
    """The card's update (``ask_user_answered``) for an answered question, from its row: the
    submit's, and a lost hand-off's (``_answer_from_database``). Reads ``answered_by``."""
    name = "policy" if question.answered_by_policy else getattr(question.answered_by, "username", "")
    event = {
        "question_id": str(question.question_id),
        "answers": question.answers or {},
        "notes": question.notes,
        "answered_by": name,
        "answered_at": question.answered_at.isoformat() if question.answered_at else None,
    }
    if question.answered_by_policy:
        event["by_policy"] = True
    return event


async def _answer_from_database(question: Question, *, unless_ended: int | None = None) -> PollResult:
    """Deliver an answer whose hand-off was lost (``_handoff_lost``) from the database, once,
    and finish what its submit did not: the card's update, the run's resume, the cache.
    ``unless_ended`` as ``live.answer_take_stored``'s (raises ``live.TurnEnded``)."""
    question_id = str(question.question_id)
    handoff = question.answer_form().handoff()
    event = await sync_to_async(_answered_event)(question)
    taken = await live.answer_take_stored(
        question_id,
        handoff.model_dump(),
        run_events=card_and_resume(question.run_id, "ask_user_answered", event),
        unless_ended=unless_ended,
    )
    if taken is None:
        return PollResult("consumed")
    logger.warning("question %s: its answer never reached Redis; delivered from the database", question_id)
    await sync_to_async(resume_if_idle_locked)(question.run_id)
    await live.question_cache_clear(question.run_id, question_id)
    return PollResult("answered", Handoff.model_validate(taken))


async def answer_wait(
    *, run_id: int, question_id: str, wait_seconds: float, releasable: bool = False
) -> PollResult:
    """The long-poll: the answer the moment it exists, else "waiting" or a final state
    (``releasable``: a relay endpoint's, which this worker's shutdown ends, ``live.answer_pop``,
    and which takes nothing once its run's turn ended: ``Gone``, as its next poll would get)."""
    try:
        return await _answer_wait(run_id, question_id, wait_seconds, releasable=releasable)
    except live.TurnEnded:
        raise Gone(MSG_RUN_FINISHED, code="run_finished") from None


async def _answer_wait(run_id: int, question_id: str, wait_seconds: float, *, releasable: bool) -> PollResult:
    question = await sync_to_async(_question_for_run)(question_id, run_id)
    if question.status in _CLOSED_STATUSES:
        return PollResult(_CLOSED_STATUSES[QuestionStatus(question.status)])
    remaining = (question.expires_at - timezone.now()).total_seconds()
    # A relay poll takes nothing once its run's turn ended: its MCP server would hand the
    # answer to no one, and left where it is, the run's end sends it on (``late``).
    unless_ended = run_id if releasable else None
    answer = await live.answer_pop(
        question_id,
        wait_seconds=max(0.0, min(wait_seconds, remaining)),
        releasable=releasable,
        unless_ended=unless_ended,
    )
    if answer is not None and answer != live.ANSWER_WAKE:
        return PollResult("answered", Handoff.model_validate(answer))
    question = await sync_to_async(_question_for_run)(question_id, run_id)
    if question.status in (QuestionStatus.ANSWERED, QuestionStatus.DELIVERED):
        if await live.answer_taken(question_id):
            return PollResult("consumed")
        if _handoff_lost(question) and not (releasable and live.polls_released()):
            return await _answer_from_database(question, unless_ended=unless_ended)
        # The database commits the answer before Redis gets it: until some poll has taken
        # it, the answer is on its way, not gone.
        return PollResult("waiting")
    if question.status in _CLOSED_STATUSES:
        return PollResult(_CLOSED_STATUSES[QuestionStatus(question.status)])
    if question.expires_at <= timezone.now():
        await question_expire(question_id=question_id)
        return PollResult("expired")
    return PollResult("waiting")
