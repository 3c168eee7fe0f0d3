"""Talking to Claude while it works: ``POST /api/runs/{run_id}/messages`` and late answers.

Session auth with CSRF; owner and members of the run's project only (404 for anyone else).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from core.questions import AnswerIn
from core.schemas import errors

from .services import messages

router = Router()


class MessageIn(Schema):
    text: str = Field(..., max_length=messages.MAX_MESSAGE_CHARS)


class MessageOut(Schema):
    message_id: str
    run_id: int
    status: str


class LateAnswerOut(Schema):
    question_id: str
    answers: dict[str, str]
    delivery: str  # pending | forwarded | next_prompt
    run_id: int
    events_url: str


@router.post("/runs/{run_id}/messages", response={202: MessageOut, **errors(401, 403, 404, 410, 422, 503)})
async def send_message(request: HttpRequest, run_id: int, payload: MessageIn) -> Status[dict[str, Any]]:
    """A message into the running turn; it appears in the run's stream at once."""
    sent = await messages.run_message_send(user=request.user, run_id=run_id, text=payload.text)
    return Status(202, sent)


@router.post(
    "/questions/{question_id}/late-answer",
    response={200: LateAnswerOut, **errors(401, 403, 404, 409, 410, 422, 429, 503)},
)
async def late_answer(request: HttpRequest, question_id: uuid.UUID, payload: AnswerIn) -> dict[str, Any]:
    """The answer to a question that expired, as a user message to Claude."""
    return await messages.late_answer_submit(user=request.user, question_id=str(question_id), body=payload)
