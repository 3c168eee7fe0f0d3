"""The ask-user endpoints: questions and tool approvals.

relay-question / poll-answer and relay-permission / poll-decision are called by the MCP
server with the run's relay token as a bearer token (no session, so no CSRF; a browser
cookie is ignored here). submit-answer and submit-decision are called by the browser:
session + CSRF, owner or member only (``ClickAuth``).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.params.functions import Header
from ninja.security import HttpBearer, SessionAuth

from core.errors import Forbidden, Gone, Unauthorized
from core.questions import AnswerIn, QuestionSpec
from core.schemas import errors

from . import approvals, asking, permission_asking, runtime, services
from .models import Decision, QuestionSource

router = Router()

# The tool call a relayed question or permission request belongs to: the MCP server sends
# one key per call, the same on every try, so a retry gets what the first try stored.
CallKey = Annotated[str, Header(alias="Idempotency-Key", max_length=200)]

MSG_NO_TOKEN = "A relay token is required (Authorization: Bearer …)."
MSG_BAD_TOKEN = "The relay token is not valid."


class RelayTokenAuth(HttpBearer):
    """Bearer relay token → the run id it was minted for."""

    async def __call__(self, request: HttpRequest) -> int | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized(MSG_NO_TOKEN, code="no_relay_token")
        try:
            run_id = await runtime.relay_token_run_id(token.strip())
        except runtime.RunEnded:
            raise Gone(services.MSG_RUN_FINISHED, code="run_finished") from None
        if run_id is None:
            raise Forbidden(MSG_BAD_TOKEN, code="bad_relay_token")
        return run_id

    def authenticate(self, request: HttpRequest, token: str) -> Any:  # pragma: no cover - __call__ does it
        raise NotImplementedError


relay_auth = RelayTokenAuth()


class ClickAuth(SessionAuth):
    """ninja's session authentication for a person's click (an answer, a decision), without
    a hand-over to the request's thread of its own.

    ``django_auth`` loads the session and the user on the request's thread before the view.
    The click's service goes to that thread anyway (its card's load and claim), so here the
    CSRF check runs on the event loop and a request without a session cookie is refused;
    the service loads the person with its own database work and refuses one who is not
    signed in (``services.require_signed_in``): 401 with the same body, and one hand-over
    fewer for everyone else: 0.4-0.8 ms of the click's own time in a stamped copy
    (docs/design-notes.md, "The user's load and the card's claim compiled once").

    In a synchronous operation (on a thread, no event loop there) it is ``django_auth``
    itself, so it can never let a request through unchecked.
    """

    def __init__(self) -> None:
        super().__init__()
        self.is_async = True  # ninja's async operations await what __call__ returns (after AuthBase's own)

    def __call__(self, request: HttpRequest) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return super().__call__(request)
        return self._cookie_and_csrf(request)

    async def _cookie_and_csrf(self, request: HttpRequest) -> bool | None:
        # The CSRF check first (403), as django_auth's; then whether there is a session at all.
        return True if self._get_key(request) else None


click_auth = ClickAuth()


def relay_run_id(request: HttpRequest) -> int:
    """The run the request's relay token was minted for (set by ``RelayTokenAuth``)."""
    return int(getattr(request, "auth"))  # noqa: B009 (ninja sets it dynamically)


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


class SubmitIn(AnswerIn):
    """Either answer shape (``core.questions.AnswerIn``) for the card ``question_id``."""

    question_id: uuid.UUID


class SubmitOut(Schema):
    question_id: str
    answers: dict[str, str]
    notes: str
    answered_by: str
    answered_at: datetime


class PermissionIn(Schema):
    """What the CLI hands its permission prompt tool (``approve``)."""

    tool_name: str = Field(..., min_length=1, max_length=200)
    input: dict[str, Any]
    tool_use_id: str = Field("", max_length=200)


class PermissionOut(Schema):
    request_id: str
    kind: str
    expires_at: datetime
    timeout: int


class DecisionPollOut(Schema):
    status: str
    result: dict[str, Any] | None = None


class DecisionIn(Schema):
    request_id: uuid.UUID
    decision: Decision
    message: str = Field("", max_length=2000)


class DecisionOut(Schema):
    request_id: str
    decision: str
    rule: str | None
    decided_at: datetime


@router.post(
    "/relay-question",
    auth=relay_auth,
    response={201: RelayQuestionOut, **errors(401, 403, 410, 422)},
)
async def relay_question(
    request: HttpRequest, payload: QuestionSpec, idempotency_key: CallKey = ""
) -> Status[dict[str, Any]]:
    # The MCP server names each tool call's question with a key of its own and sends it
    # again with every retry: a retry after a 503 or a lost reply gets the question stored.
    created = await asking.question_create(
        run_id=relay_run_id(request),
        source=QuestionSource.MCP,
        questions=[payload],
        call_key=idempotency_key.strip(),
    )
    return Status(201, created)


@router.get(
    "/poll-answer",
    auth=relay_auth,
    response={
        200: PollOut,
        202: PollOut,
        410: PollOut,
        **errors(401, 403, 404, 422),
    },
)
async def poll_answer(request: HttpRequest, question_id: uuid.UUID) -> Status[PollOut]:
    result = await services.answer_wait(
        run_id=relay_run_id(request),
        question_id=str(question_id),
        wait_seconds=settings.ASK_USER_LONG_POLL_SECONDS,
        releasable=True,
    )
    if result.status == "answered" and result.answer is not None:
        return Status(200, PollOut(status="answered", **result.answer.model_dump()))
    if result.status == "waiting":
        return Status(202, PollOut(status="waiting"))
    return Status(410, PollOut(status=result.status, detail=services.GONE_MESSAGES[result.status]))


@router.post(
    "/submit-answer",
    auth=click_auth,
    response={
        200: SubmitOut,
        **errors(401, 403, 404, 409, 410, 422),
    },
)
async def submit_answer(request: HttpRequest, payload: SubmitIn) -> dict[str, Any]:
    return await services.answer_submit(question_id=str(payload.question_id), user=request.user, body=payload)


@router.post(
    "/relay-permission",
    auth=relay_auth,
    response={201: PermissionOut, **errors(401, 403, 410, 422)},
)
async def relay_permission(
    request: HttpRequest, payload: PermissionIn, idempotency_key: CallKey = ""
) -> Status[dict[str, Any]]:
    # As relay-question: one key per tool call, sent again with every retry.
    created = await permission_asking.permission_request_create(
        run_id=relay_run_id(request),
        source=QuestionSource.MCP,
        tool_name=payload.tool_name,
        tool_input=payload.input,
        tool_use_id=payload.tool_use_id,
        call_key=idempotency_key.strip(),
    )
    return Status(201, created)


@router.get(
    "/poll-decision",
    auth=relay_auth,
    response={
        200: DecisionPollOut,
        202: DecisionPollOut,
        **errors(401, 403, 404, 422),
    },
)
async def poll_decision(request: HttpRequest, request_id: uuid.UUID) -> Status[DecisionPollOut]:
    result = await approvals.permission_wait(
        run_id=relay_run_id(request),
        request_id=str(request_id),
        wait_seconds=settings.ASK_USER_LONG_POLL_SECONDS,
        releasable=True,
    )
    if result is None:
        return Status(202, DecisionPollOut(status="waiting"))
    return Status(200, DecisionPollOut(status="decided", result=result))


@router.post(
    "/submit-decision",
    auth=click_auth,
    response={
        200: DecisionOut,
        **errors(401, 403, 404, 409, 410, 422),
    },
)
async def submit_decision(request: HttpRequest, payload: DecisionIn) -> dict[str, Any]:
    return await approvals.permission_decide(
        request_id=str(payload.request_id),
        user=request.user,
        decision=payload.decision,
        message=payload.message,
    )
