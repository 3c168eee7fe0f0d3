"""HTTP client for PromptManager's ask-user relay: post a question, long-poll for its answer.

Contract (Django side: ``askuser/api.py``), both calls authenticated with
``Authorization: Bearer <relay token>``; the token never goes in a URL or a log line:

- ``POST /api/askuser/relay-question`` → 201 ``{question_id, expires_at, timeout}``;
  401/403 bad token, 410 run finished, 422 bad body ``{detail, code, errors}``.
- ``GET /api/askuser/poll-answer?question_id=…`` → held by the server up to ~25 s, then
  200 answered, 202 still waiting (poll again at once),
  410 ``{status: expired|cancelled|superseded|consumed}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from core.questions import Handoff, QuestionSpec

from .config import AskUserConfig
from .errors import (
    QuestionCancelled,
    QuestionExpired,
    QuestionRejected,
    QuestionSuperseded,
    RelayAuthRejected,
    RelayUnavailable,
    RunFinished,
)

logger = logging.getLogger(__name__)

RELAY_QUESTION_PATH = "/api/askuser/relay-question"
POLL_ANSWER_PATH = "/api/askuser/poll-answer"
# Above the ~25 s the server holds a long-poll, so a held poll is never cut short.
POLL_READ_TIMEOUT = 35.0
CONNECT_TIMEOUT = 5.0
# The server decides expiry; waiting a little longer lets its 410 arrive first.
EXPIRY_GRACE = 5.0
# How long a question that cannot be delivered is retried before giving up.
RELAY_RETRY_WINDOW = 30.0
BACKOFF_START = 0.2
BACKOFF_MAX = 2.0
USER_AGENT = "promptmanager-ask-user"

ClientFactory = Callable[[], httpx.AsyncClient]


def default_client() -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment must never see the bearer token.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(POLL_READ_TIMEOUT, connect=CONNECT_TIMEOUT),
        trust_env=False,
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
    )


@dataclass(frozen=True)
class RelayedQuestion:
    question_id: str
    expires_at: str | None
    timeout: int


class _Transient(Exception):
    """A failure worth retrying: connection trouble, 5xx, 429."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _auth_headers(config: AskUserConfig) -> dict[str, str]:
    return {"Authorization": f"Bearer {config.relay_token}"}


def _detail(response: httpx.Response) -> str:
    """The server's ``detail`` sentence; for a body that failed validation, its field errors."""
    body = _json_object(response)
    detail = body.get("detail")
    if isinstance(body.get("errors"), list):
        detail = "; ".join(_validation_error(item) for item in body["errors"])
    return str(detail) if detail else f"HTTP {response.status_code}"


def _unexpected(response: httpx.Response, endpoint: str) -> str:
    detail = _detail(response)
    reason = f"unexpected HTTP {response.status_code} from {endpoint}"
    return reason if detail == f"HTTP {response.status_code}" else f"{reason}: {detail}"


def _validation_error(item: object) -> str:
    if not isinstance(item, dict):
        return str(item)
    # ninja reports loc as ["body", "payload", "header"]: the field is the part the model can fix.
    loc = [str(part) for part in item.get("loc") or [] if part not in ("body", "payload", "query")]
    message = str(item.get("msg") or item)
    return f"{'.'.join(loc)}: {message}" if loc else message


def _transport_reason(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused" if _caused_by(exc, ConnectionRefusedError) else "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return "the request timed out"
    return type(exc).__name__


# Statuses that say "not processed, try again"; a plain 500 on a POST may have stored the question.
RETRY_POST_STATUSES = frozenset({429, 502, 503, 504})


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``kind`` is anywhere in the chain (httpx wraps httpcore wraps anyio wraps the OSError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _raise_for_common_status(response: httpx.Response, *, retry: Callable[[int], bool]) -> None:
    status = response.status_code
    if status in (401, 403):
        raise RelayAuthRejected(status)
    if retry(status):
        raise _Transient(f"HTTP {status}")


async def _post_question_once(
    client: httpx.AsyncClient, config: AskUserConfig, question: QuestionSpec
) -> RelayedQuestion:
    try:
        response = await client.post(
            config.api_url + RELAY_QUESTION_PATH, json=question.wire(), headers=_auth_headers(config)
        )
    except httpx.ConnectError as exc:
        raise _Transient(_transport_reason(exc)) from exc
    except httpx.TransportError as exc:
        # The question may have been stored already; re-posting could show it twice.
        raise RelayUnavailable(_transport_reason(exc)) from exc
    _raise_for_common_status(response, retry=lambda status: status in RETRY_POST_STATUSES)
    if response.status_code == 410:
        raise RunFinished(_detail(response))
    if response.status_code in (400, 422):
        raise QuestionRejected(_detail(response))
    if response.status_code not in (200, 201):
        raise RelayUnavailable(_unexpected(response, "relay-question"))
    try:
        body = response.json()
        question_id = body["question_id"]
        timeout = body.get("timeout")
        expires_at = body.get("expires_at")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RelayUnavailable("relay-question returned an unexpected body") from None
    if not isinstance(question_id, str) or not question_id:
        raise RelayUnavailable("relay-question returned no question_id")
    valid_timeout = isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0
    return RelayedQuestion(
        question_id=question_id,
        expires_at=expires_at if isinstance(expires_at, str) else None,
        timeout=timeout if valid_timeout else config.timeout,
    )


async def relay_question(
    client: httpx.AsyncClient,
    config: AskUserConfig,
    question: QuestionSpec,
    *,
    retry_window: float = RELAY_RETRY_WINDOW,
) -> RelayedQuestion:
    """Post the question; retries refused connections and 429/502/503/504 for ``retry_window`` seconds."""
    deadline = time.monotonic() + retry_window
    backoff = BACKOFF_START
    while True:
        try:
            return await _post_question_once(client, config, question)
        except _Transient as exc:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RelayUnavailable(exc.reason) from exc
            logger.warning("relay-question failed (%s); retrying", exc.reason)
            await asyncio.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, BACKOFF_MAX)


async def poll_answer(
    client: httpx.AsyncClient, config: AskUserConfig, question_id: str, *, timeout: int
) -> Handoff | None:
    """One long-poll: the answer, or None while the user has not answered yet.

    Raises QuestionExpired / QuestionSuperseded / QuestionCancelled on 410, RelayAuthRejected on 401/403,
    RelayUnavailable on an unexpected reply, and ``_Transient`` for failures worth retrying.
    """
    try:
        response = await client.get(
            config.api_url + POLL_ANSWER_PATH,
            params={"question_id": question_id},
            headers=_auth_headers(config),
        )
    except httpx.TransportError as exc:
        # A poll only reads, so any transport failure is safe to retry.
        raise _Transient(_transport_reason(exc)) from exc
    _raise_for_common_status(response, retry=lambda status: status == 429 or status >= 500)
    if response.status_code == 202:
        return None
    if response.status_code == 410:
        status = _json_object(response).get("status")
        if status == "expired":
            raise QuestionExpired(timeout)
        if status == "consumed":
            raise RelayUnavailable("the answer was already collected by an earlier request")
        if status == "superseded":
            raise QuestionSuperseded(_detail(response))
        # "cancelled", or no status at all: the run itself has finished.
        raise QuestionCancelled(_detail(response))
    if response.status_code != 200:
        raise RelayUnavailable(_unexpected(response, "poll-answer"))
    body = _json_object(response)
    if body.get("status") == "waiting":
        return None
    try:
        return Handoff.model_validate(body)
    except ValidationError as exc:
        raise RelayUnavailable(f"poll-answer returned a malformed answer: {exc}") from None


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


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
    deadline = time.monotonic() + relayed.timeout + grace
    backoff = BACKOFF_START
    last_failure: str | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if last_failure is not None:
                raise RelayUnavailable(last_failure)
            raise QuestionExpired(relayed.timeout)
        try:
            async with asyncio.timeout(remaining):
                answer = await poll_answer(client, config, relayed.question_id, timeout=relayed.timeout)
        except TimeoutError:
            # Our own deadline cut the long-poll short; that is a timeout, not a failure.
            raise QuestionExpired(relayed.timeout) from None
        except _Transient as exc:
            if last_failure is None:
                logger.warning("poll-answer failed (%s); retrying until the deadline", exc.reason)
            last_failure = exc.reason
            await asyncio.sleep(min(backoff, max(deadline - time.monotonic(), 0)))
            backoff = min(backoff * 2, BACKOFF_MAX)
            continue
        last_failure = None
        backoff = BACKOFF_START
        if answer is not None:
            return answer
