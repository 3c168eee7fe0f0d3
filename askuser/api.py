"""The three ask-user endpoints.

relay-question and poll-answer are called by the MCP server with the run's relay token
as a bearer token (no session, so no CSRF; a browser cookie is ignored here).
submit-answer is called by the browser: session + CSRF, owner or member only.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from ninja.security import HttpBearer, django_auth

from . import runtime, services
from .models import QuestionSource

router = Router()

MSG_NO_TOKEN = "A relay token is required (Authorization: Bearer …)."
MSG_BAD_TOKEN = "The relay token is not valid."


class RelayTokenAuth(HttpBearer):
    """Bearer relay token → the run id it was minted for."""

    async def __call__(self, request: HttpRequest) -> int | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HttpError(401, MSG_NO_TOKEN)
        try:
            run_id = await runtime.relay_token_run_id(token.strip())
        except runtime.RunEnded:
            raise HttpError(410, services.MSG_RUN_FINISHED) from None
        if run_id is None:
            raise HttpError(403, MSG_BAD_TOKEN)
        return run_id

    def authenticate(self, request: HttpRequest, token: str) -> Any:  # pragma: no cover - __call__ does it
        raise NotImplementedError


relay_auth = RelayTokenAuth()


def relay_run_id(request: HttpRequest) -> int:
    """The run the request's relay token was minted for (set by ``RelayTokenAuth``)."""
    return int(getattr(request, "auth"))  # noqa: B009 (ninja sets it dynamically)


class OptionIn(Schema):
    label: str = Field(..., min_length=1, max_length=200)
    description: str | None = Field(None, max_length=2000)


class RelayQuestionIn(Schema):
    question: str = Field(..., min_length=1, max_length=5000)
    header: str | None = Field(None, max_length=60)
    options: list[OptionIn] | None = Field(None, max_length=20)
    multiSelect: bool | None = False  # noqa: N815 (the tool's wire name)


class RelayQuestionOut(Schema):
    question_id: str
    expires_at: datetime
    timeout: int


class PollOut(Schema):
    status: str
    answer: str | None = None
    selectedOptions: list[int] | None = None  # noqa: N815
    selectedLabels: list[str] | None = None  # noqa: N815
    otherText: str | None = None  # noqa: N815
    notes: str | None = None
    answers: dict[str, str] | None = None
    detail: str | None = None


class SubmitIn(Schema):
    question_id: uuid.UUID
    answer: str | None = Field(None, max_length=10_000)
    selectedOptions: list[int] | None = Field(None, max_length=50)  # noqa: N815
    answers: dict[str, Any] | None = None
    notes: str | None = Field(None, max_length=10_000)


class SubmitOut(Schema):
    question_id: str
    answers: dict[str, str]
    notes: str
    answered_by: str
    answered_at: datetime


class Message(Schema):
    detail: str


@router.post(
    "/relay-question",
    auth=relay_auth,
    response={201: RelayQuestionOut, 401: Message, 403: Message, 410: Message, 422: Message},
)
async def relay_question(request: HttpRequest, payload: RelayQuestionIn) -> Status[dict[str, Any]]:
    options = [{"label": o.label, "description": o.description or ""} for o in payload.options or []]
    question = {
        "question": payload.question,
        "header": payload.header or "",
        "options": options,
        "multiSelect": bool(payload.multiSelect and options),
    }
    try:
        created = await services.question_create(
            run_id=relay_run_id(request), source=QuestionSource.MCP, questions=[question]
        )
    except services.QuestionError as exc:
        raise HttpError(exc.status, exc.message) from None
    return Status(201, created)


@router.get(
    "/poll-answer",
    auth=relay_auth,
    response={200: PollOut, 202: PollOut, 401: Message, 403: Message, 404: Message, 410: PollOut},
)
async def poll_answer(request: HttpRequest, question_id: uuid.UUID) -> Status[PollOut]:
    try:
        result = await services.answer_wait(
            run_id=relay_run_id(request),
            question_id=str(question_id),
            wait_seconds=settings.ASK_USER_LONG_POLL_SECONDS,
        )
    except services.QuestionError as exc:
        raise HttpError(exc.status, exc.message) from None
    if result.status == "answered":
        return Status(200, PollOut(status="answered", **(result.answer or {})))
    if result.status == "waiting":
        return Status(202, PollOut(status="waiting"))
    return Status(410, PollOut(status=result.status, detail=services.GONE_MESSAGES[result.status]))


@router.post(
    "/submit-answer",
    auth=django_auth,
    response={200: SubmitOut, 404: Message, 409: Message, 410: Message, 422: Message},
)
async def submit_answer(request: HttpRequest, payload: SubmitIn) -> dict[str, Any]:
    body = payload.dict(exclude={"question_id"}, exclude_none=True)
    try:
        return await services.answer_submit(
            question_id=str(payload.question_id), user=request.user, body=body
        )
    except services.QuestionError as exc:
        raise HttpError(exc.status, exc.message) from None
