"""Delivery verification: did Claude receive exactly the answer the user sent?

When the result of an ask tool's call comes back in the stream, the answered question
it delivers is marked ``delivered`` (the card shows "Delivered to Claude ✓"), or its
mismatch is recorded, logged and shown once. The run supervisor calls this only for the
results of the ask tools' own calls (``ASK_TOOL_NAMES``, matched by ``tool_use_id``).
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from core import events
from core.tool_names import ASK_USER_QUESTION, MCP_ASK_USER
from mcp_server.answers import format_answer

from .models import Question, QuestionSource, QuestionStatus

logger = logging.getLogger(__name__)

# The tools whose results carry an answer: the MCP tool (CLI engine), the built-in one (SDK).
MCP_ASK_TOOL = MCP_ASK_USER
SDK_ASK_TOOL = ASK_USER_QUESTION
ASK_TOOL_NAMES = frozenset({MCP_ASK_TOOL, SDK_ASK_TOOL})
# Stored as the mismatch when the ask tool's result had no text at all.
EMPTY_RESULT = "(the tool result was empty)"


def mcp_answer_text(question: Question) -> str:
    """The text the MCP server returns to Claude for this answered question."""
    form = question.answer_form()
    return format_answer(form.handoff())


def answer_reached_claude(question: Question, result_text: str) -> bool:
    """Whether the ask tool's result carries exactly the answer the user sent."""
    if question.source == QuestionSource.SDK:
        # The CLI writes each answer as "question"="answer"; the quotes bound the value.
        return all(f'"{q}"="{a}"' in result_text for q, a in (question.answers or {}).items())
    expected = mcp_answer_text(question)
    # Whole lines: "User selected: A" must not pass for "User selected: A, B".
    return f"\n{expected}\n" in f"\n{result_text}\n"


def _verify_delivery(run_id: int, result_text: str) -> tuple[Question, bool] | None:
    """Match the ask tool's result with the answered question it delivers, once.

    The verdict is final either way: a delivered question is no longer answered, and a
    mismatch is recorded (and reported) once and never checked again.
    """
    waiting = list(
        Question.objects.filter(run_id=run_id, status=QuestionStatus.ANSWERED, delivery_mismatch="").order_by(
            "-answered_at"
        )
    )
    if not waiting:
        return None
    matched = next((q for q in waiting if answer_reached_claude(q, result_text)), None)
    question = matched or waiting[0]
    unverified = Question.objects.filter(pk=question.pk, status=QuestionStatus.ANSWERED, delivery_mismatch="")
    if matched is not None:
        updated = unverified.update(status=QuestionStatus.DELIVERED, delivered_at=timezone.now())
    else:
        updated = unverified.update(delivery_mismatch=result_text[:2000] or EMPTY_RESULT)
    if not updated:
        return None  # another check got there first
    return question, matched is not None


async def question_result_seen(*, run_id: int, result: dict[str, Any]) -> None:
    """The ask tool's result came back: check Claude got what the user sent.

    The runner calls this only for results of the ask tools (``ASK_TOOL_NAMES``).
    """
    if result.get("is_error"):
        return
    verdict = await sync_to_async(_verify_delivery)(run_id, str(result.get("content", "")))
    if verdict is None:
        return
    question, ok = verdict
    if not ok:
        logger.warning("answer to question %s reached Claude altered", question.question_id)
    await events.append_event(
        run_id,
        "ask_user_delivered",
        {"question_id": str(question.question_id), "ok": ok, "answers": question.answers},
    )
