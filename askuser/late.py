"""Late answers: a question that expired still takes an answer, which reaches Claude as a message.

When a question times out, Claude is told to go on without an answer. A person who answers
afterwards is not turned away: the answer is recorded on the question (status ``late``)
and worded as a user message for Claude (``late_answer_record``); promptmgr then delivers
it into the running turn or as the conversation's next prompt, and reports back how
(``late_answer_delivered``), which the card shows.

An answer given in time can still miss its turn: the turn ended (its CLI died, the run was
cancelled) after the answer was recorded and before a waiting poll took it. When the run
ends, such answers go the same way (``unread_answers_take``), worded for what happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict, Gone, Invalid
from core.questions import AnswerIn, FormAnswer

from . import live, services
from .answers import AnswerError, normalize_answers
from .models import LateDelivery, Question, QuestionStatus

MSG_STILL_OPEN = "This question is still open: answer it on its card."
MSG_ALREADY_ANSWERED_LATE = "This question already has a late answer."
ONE = "Late answer to your question “{question}” (it timed out and you went on without it): {answer}"
SEVERAL = "Late answers to your questions (they timed out and you went on without them):"
NOTES = "Notes: {notes}"
UNREAD_ONE = "Answer to your question “{question}” (your turn ended before you read it): {answer}"
UNREAD_SEVERAL = "Answers to your questions (your turn ended before you read them):"


@dataclass(frozen=True)
class LateAnswer:
    """An answer on its way to Claude as a message: to an expired question
    (``late_answer_record``), or one the run's turn never read (``unread_answers_take``)."""

    question_id: str
    run_id: int
    answers: dict[str, str]
    text: str  # what Claude reads
    user: Any  # who answered: the message's author


def late_message(form: FormAnswer, *, one: str = ONE, several: str = SEVERAL) -> str:
    """The answer worded for Claude, who was told the question had timed out (or, with the
    ``UNREAD_`` wordings, whose turn ended before it read the answer)."""
    if len(form.items) == 1:
        item = form.items[0]
        text = one.format(question=item.question, answer=item.display)
    else:
        text = "\n".join([several, *(f"- “{item.question}”: {item.display}" for item in form.items)])
    return f"{text}\n{NOTES.format(notes=form.notes)}" if form.notes else text


def _expired(question: Question) -> bool:
    return question.status == QuestionStatus.EXPIRED or (
        question.status == QuestionStatus.PENDING and question.expires_at <= timezone.now()
    )


def _check_late(question: Question) -> None:
    """Only an expired question takes a late answer (409 while open or answered, 410 when
    it was cancelled or replaced)."""
    if _expired(question):
        return
    if question.status == QuestionStatus.LATE:
        raise Conflict(MSG_ALREADY_ANSWERED_LATE, code="already_answered")
    if question.status == QuestionStatus.PENDING:
        raise Conflict(MSG_STILL_OPEN, code="still_open")
    services._check_open(question)  # answered: 409; cancelled or superseded: 410
    raise Gone(services.MSG_EXPIRED, code="expired")  # pragma: no cover - _check_open raised


def _record(question_id: str, user: Any, body: AnswerIn) -> tuple[Question, FormAnswer]:
    question = services._load_for_user(question_id, user)
    _check_late(question)
    try:
        form = normalize_answers(question.questions, body)
    except AnswerError as exc:
        raise Invalid(str(exc), code="invalid_answer") from None
    with transaction.atomic():
        # First late answer wins, as answers do.
        updated = (
            Question.objects.filter(pk=question.pk)
            .filter(
                Q(status=QuestionStatus.EXPIRED)
                | Q(status=QuestionStatus.PENDING, expires_at__lte=timezone.now())
            )
            .update(
                status=QuestionStatus.LATE,
                answers=form.display,
                answer_items=[item.model_dump() for item in form.items],
                notes=form.notes,
                answered_by=user,
                answered_at=timezone.now(),
            )
        )
        question.refresh_from_db()
        if not updated:
            _check_late(question)
            raise Conflict(MSG_ALREADY_ANSWERED_LATE, code="already_answered")
    return question, form


async def late_answer_record(*, question_id: str, user: Any, body: AnswerIn) -> LateAnswer:
    """Record the answer to an expired question and word it for Claude.

    A question whose time ran out but that nobody has marked expired yet is expired first,
    so its card and the waiting tool call learn it as they would have anyway."""
    question = await sync_to_async(services._load_for_user)(question_id, user)
    if question.status == QuestionStatus.PENDING and question.expires_at <= timezone.now():
        await services.question_expire(question_id=question_id)
    question, form = await sync_to_async(_record)(question_id, user, body)
    return LateAnswer(
        question_id=str(question.question_id),
        run_id=question.run_id,
        answers=form.display,
        text=late_message(form),
        user=user,
    )


async def late_answer_delivered(*, question_id: str, delivery: str, run_id: int) -> None:
    """Note how the late answer reached Claude (``LateDelivery``) and, for a next prompt, its run."""
    fields: dict[str, Any] = {"late_delivery": LateDelivery(delivery)}
    if delivery == LateDelivery.NEXT_PROMPT:
        fields["late_run_id"] = run_id
    await Question.objects.filter(question_id=question_id, status=QuestionStatus.LATE).aupdate(**fields)


def _answered_in_run(run_id: int) -> list[Question]:
    # A policy's answers stay where they are: nobody asked for them to go on.
    return list(
        Question.objects.filter(
            run_id=run_id, status=QuestionStatus.ANSWERED, delivery_mismatch="", answered_by__isnull=False
        )
        .select_related("answered_by")
        .order_by("answered_at")
    )


def _mark_unread(pk: int) -> bool:
    return bool(
        Question.objects.filter(pk=pk, status=QuestionStatus.ANSWERED).update(status=QuestionStatus.LATE)
    )


async def unread_answers_take(run_id: int) -> list[LateAnswer]:
    """The run ended (its cards are closed, so no answer can join these): the answers people
    gave that no waiting poll took, so Claude never read them. Each is taken from its
    hand-off, so nothing else delivers it, and its question becomes ``late``: the caller
    sends it on as a message and reports how (``late_answer_delivered``). An answer a poll
    did take is left alone: Claude's side had it, whatever became of the turn after."""
    unread = []
    for question in await sync_to_async(_answered_in_run)(run_id):
        form = question.answer_form()
        question_id = str(question.question_id)
        if await live.answer_take_stored(question_id, form.handoff().model_dump()) is None:
            continue
        if not await sync_to_async(_mark_unread)(question.pk):
            continue
        unread.append(
            LateAnswer(
                question_id=question_id,
                run_id=run_id,
                answers=form.display,
                text=late_message(form, one=UNREAD_ONE, several=UNREAD_SEVERAL),
                user=question.answered_by,
            )
        )
    return unread
