"""HTTP client for PromptManager's ask-user relay: post a question or a permission request,
long-poll for its answer or decision.

Contract (Django side: ``askuser/api.py``), every call authenticated with
``Authorization: Bearer <relay token>``; the token never goes in a URL or a log line:

- ``POST /api/askuser/relay-question`` (``Idempotency-Key``: one per tool call, the same on
  every try) → 201 ``{question_id, expires_at, timeout}``, the stored question again for a key
  it has seen; 401/403 bad token, 410 run finished, 422 bad body ``{detail, code, errors}``.
- ``GET /api/askuser/poll-answer?question_id=…`` → held by the server up to ~25 s, then
  200 answered, 202 still waiting (poll again at once),
  410 ``{status: expired|cancelled|superseded|consumed}``.
- ``POST /api/askuser/relay-permission`` ``{tool_name, input, tool_use_id}`` (``Idempotency-Key``
  as above) → 201 ``{request_id, expires_at, timeout}``, the stored request again for a key
  it has seen; 401/403, 410 and 422 as above.
- ``GET /api/askuser/poll-decision?request_id=…`` → held up to ~25 s, then 202 ``{status: waiting}``
  or 200 ``{status: decided, result}`` (also on expiry and cancel: a deny); 404 unknown request,
  410 run finished.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from core.questions import Handoff, QuestionSpec

from .config import AskUserConfig
from .errors import (
    DecisionMalformed,
    DecisionTimedOut,
    QuestionCancelled,
    QuestionExpired,
    QuestionSuperseded,
    RelayUnavailable,
    RunFinished,
)
from .relay_http import (
    created_fields,
    error_detail,
    get_once,
    json_object,
    poll_until,
    post_once,
    post_with_retry,
    unexpected_reply,
)

RELAY_QUESTION_PATH = "/api/askuser/relay-question"
POLL_ANSWER_PATH = "/api/askuser/poll-answer"
RELAY_PERMISSION_PATH = "/api/askuser/relay-permission"
POLL_DECISION_PATH = "/api/askuser/poll-decision"
# The server decides expiry; waiting a little longer lets its 410 (or its deny) arrive first.
EXPIRY_GRACE = 5.0
# How long a question or permission request that cannot be delivered is retried before giving up.
RELAY_RETRY_WINDOW = 30.0


@dataclass(frozen=True)
class RelayedQuestion:
    question_id: str
    expires_at: str | None
    timeout: int


@dataclass(frozen=True)
class RelayedPermission:
    request_id: str
    expires_at: str | None
    timeout: int


async def relay_question(
    client: httpx.AsyncClient,
    config: AskUserConfig,
    question: QuestionSpec,
    *,
    retry_window: float = RELAY_RETRY_WINDOW,
) -> RelayedQuestion:
    """Post the question; retries refused or lost connections and 429/502/503/504 for
    ``retry_window`` seconds, every try under one ``Idempotency-Key``, so a try the server
    stored before its reply was lost is the question the next try gets back."""
    key = uuid.uuid4().hex

    async def post() -> RelayedQuestion:
        endpoint = "relay-question"
        response = await post_once(
            client, config, RELAY_QUESTION_PATH, question.wire(), endpoint=endpoint, idempotency_key=key
        )
        return RelayedQuestion(*created_fields(response, config, id_key="question_id", endpoint=endpoint))

    return await post_with_retry(post, endpoint="relay-question", retry_window=retry_window)


async def poll_answer(
    client: httpx.AsyncClient, config: AskUserConfig, question_id: str, *, timeout: int
) -> Handoff | None:
    """One long-poll: the answer, or None while the user has not answered yet.

    Raises QuestionExpired / QuestionSuperseded / QuestionCancelled on 410, RelayAuthRejected on 401/403,
    RelayUnavailable on an unexpected reply, and ``Transient`` for failures worth retrying.
    """
    response = await get_once(client, config, POLL_ANSWER_PATH, {"question_id": question_id})
    if response.status_code == 202:
        return None
    if response.status_code == 410:
        status = json_object(response).get("status")
        if status == "expired":
            raise QuestionExpired(timeout)
        if status == "consumed":
            raise RelayUnavailable("the answer was already collected by an earlier request")
        if status == "superseded":
            raise QuestionSuperseded(error_detail(response))
        # "cancelled", or no status at all: the run itself has finished.
        raise QuestionCancelled(error_detail(response))
    if response.status_code != 200:
        raise RelayUnavailable(unexpected_reply(response, "poll-answer"))
    body = json_object(response)
    if body.get("status") == "waiting":
        return None
    try:
        return Handoff.model_validate(body)
    except ValidationError as exc:
        raise RelayUnavailable(f"poll-answer returned a malformed answer: {exc}") from None


async def wait_for_answer(
    client: httpx.AsyncClient,
    config: AskUserConfig,
    relayed: RelayedQuestion,
    *,
    grace: float = EXPIRY_GRACE,
) -> Handoff:
    """Poll until the answer, a 410, or ``relayed.timeout`` plus ``grace`` seconds have passed.

    Transient failures are retried with backoff until the deadline; if the last attempt before
    the deadline failed, the result is RelayUnavailable rather than QuestionExpired.
    """
    return await poll_until(
        lambda: poll_answer(client, config, relayed.question_id, timeout=relayed.timeout),
        seconds=relayed.timeout + grace,
        endpoint="poll-answer",
        expired=lambda: QuestionExpired(relayed.timeout),
    )


async def relay_permission(
    client: httpx.AsyncClient,
    config: AskUserConfig,
    tool_name: str,
    tool_input: dict[str, Any],
    tool_use_id: str,
    *,
    retry_window: float = RELAY_RETRY_WINDOW,
) -> RelayedPermission:
    """Post the CLI's permission request, with the same retries as ``relay_question`` under
    one ``Idempotency-Key`` of its own: a try the server stored before its reply was lost
    is the request the next try gets back, decided or not."""
    body = {"tool_name": tool_name, "input": tool_input, "tool_use_id": tool_use_id}
    key = uuid.uuid4().hex

    async def post() -> RelayedPermission:
        endpoint = "relay-permission"
        response = await post_once(
            client, config, RELAY_PERMISSION_PATH, body, endpoint=endpoint, idempotency_key=key
        )
        return RelayedPermission(*created_fields(response, config, id_key="request_id", endpoint=endpoint))

    return await post_with_retry(post, endpoint="relay-permission", retry_window=retry_window)


async def poll_decision(
    client: httpx.AsyncClient, config: AskUserConfig, request_id: str
) -> dict[str, Any] | None:
    """One long-poll: the permission result object, or None while nobody has decided yet.

    Raises RunFinished on 410, RelayAuthRejected on 401/403, RelayUnavailable on 404 or another
    unexpected reply, DecisionMalformed on a 200 that is not ``{status: decided, result: {…}}``,
    and ``Transient`` for failures worth retrying. The result itself is checked by the caller.
    """
    response = await get_once(client, config, POLL_DECISION_PATH, {"request_id": request_id})
    if response.status_code == 202:
        return None
    if response.status_code == 410:
        raise RunFinished(error_detail(response))
    if response.status_code == 404:
        raise RelayUnavailable("HTTP 404 from poll-decision: the permission request is unknown")
    if response.status_code != 200:
        raise RelayUnavailable(unexpected_reply(response, "poll-decision"))
    body = json_object(response)
    status = body.get("status")
    if status == "waiting":
        return None
    if status != "decided":
        raise DecisionMalformed(f"poll-decision answered 200 with status {status!r}")
    result = body.get("result")
    if not isinstance(result, dict):
        raise DecisionMalformed("the decision's result is not a JSON object")
    return result


async def wait_for_decision(
    client: httpx.AsyncClient,
    config: AskUserConfig,
    relayed: RelayedPermission,
    *,
    grace: float = EXPIRY_GRACE,
) -> dict[str, Any]:
    """Poll until the decision, a 410, or ``relayed.timeout`` plus ``grace`` seconds have passed.

    The server answers an expired or cancelled request with a deny of its own, so our deadline
    (DecisionTimedOut) only fires when it fails to; transient failures are retried as for answers.
    """
    return await poll_until(
        lambda: poll_decision(client, config, relayed.request_id),
        seconds=relayed.timeout + grace,
        endpoint="poll-decision",
        expired=lambda: DecisionTimedOut(relayed.timeout),
    )
