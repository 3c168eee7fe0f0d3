"""Late answers: a question that expired still takes an answer, which reaches Claude as a message.

When a question times out, Claude is told to go on without an answer. A person who answers
afterwards is not turned away: the answer is recorded on the question (status ``late``)
and worded as a user message for Claude (``late_answer_record``); promptmgr then delivers
it into the running turn or as the conversation's next prompt, and reports back how
(``late_answer_delivered``), which the card shows.
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

from . import services
from .answers import AnswerError, normalize_answers
from .models import LateDelivery, Question, QuestionStatus

MSG_STILL_OPEN = "This question is still open: answer it on its card."
MSG_ALREADY_ANSWERED_LATE = "This question already has a late answer."
ONE = "Late answer to your question “{question}” (it timed out and you went on without it): {answer}"
SEVERAL = "Late answers to your questions (they timed out and you went on without them):"
NOTES = "Notes: {notes}"


@dataclass(frozen=True)
class LateAnswer:
    question_id: str
    run_id: int
    answers: dict[str, str]
    text: str  # what Claude reads


def late_message(form: FormAnswer) -> str:
    """The answer worded for Claude, who was told the question had timed out."""
    if len(form.items) == 1:
        item = form.items[0]
        text = ONE.format(question=item.question, answer=item.display)
    else:
        text = "\n".join([SEVERAL, *(f"- “{item.question}”: {item.display}" for item in form.items)])
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
    )


async def late_answer_delivered(*, question_id: str, delivery: str, run_id: int) -> None:
    """Note how the late answer reached Claude (``LateDelivery``) and, for a next prompt, its run."""
    fields: dict[str, Any] = {"late_delivery": LateDelivery(delivery)}
    if delivery == LateDelivery.NEXT_PROMPT:
        fields["late_run_id"] = run_id
    await Question.objects.filter(question_id=question_id, status=QuestionStatus.LATE).aupdate(**fields)
