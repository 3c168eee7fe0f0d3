"""The HTTP plumbing shared by every relay call: the client, bearer auth, error details, retries.

``relay`` builds the question and permission calls from these pieces. The relay token goes only
in the ``Authorization`` header, never in a URL or a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import httpx

from .config import AskUserConfig
from .errors import RelayAuthRejected, RelayError, RelayUnavailable, RequestRejected, RunFinished

logger = logging.getLogger(__name__)

# Above the ~25 s the server holds a long-poll, so a held poll is never cut short.
POLL_READ_TIMEOUT = 35.0
CONNECT_TIMEOUT = 5.0
BACKOFF_START = 0.2
BACKOFF_MAX = 2.0
USER_AGENT = "promptmanager-ask-user"

# What the tools open a request's client with; a test passes a factory of its own.
ClientFactory = Callable[[], AbstractAsyncContextManager[httpx.AsyncClient]]
T = TypeVar("T")


def default_client() -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment must never see the bearer token.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(POLL_READ_TIMEOUT, connect=CONNECT_TIMEOUT),
        trust_env=False,
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
    )


# The kept client and the event loop it belongs to (a client cannot move between loops).
_shared: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None


@contextlib.asynccontextmanager
async def shared_client() -> AsyncIterator[httpx.AsyncClient]:
    """One client for the server's event loop, kept open between tool calls.

    Building a client costs about 20 ms of CPU (its TLS context), on the path of every
    question and every approval, and the kept-alive connection saves the TCP handshake.
    """
    global _shared
    loop = asyncio.get_running_loop()
    if _shared is None or _shared[0] is not loop or _shared[1].is_closed:
        _shared = (loop, default_client())
    yield _shared[1]


class Transient(Exception):
    """A failure worth retrying: connection trouble, 5xx, 429."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _auth_headers(config: AskUserConfig) -> dict[str, str]:
    return {"Authorization": f"Bearer {config.relay_token}"}


def error_detail(response: httpx.Response) -> str:
    """The server's ``detail`` sentence; for a body that failed validation, its field errors."""
    body = json_object(response)
    detail = body.get("detail")
    if isinstance(body.get("errors"), list):
        detail = "; ".join(_validation_error(item) for item in body["errors"])
    return str(detail) if detail else f"HTTP {response.status_code}"


def unexpected_reply(response: httpx.Response, endpoint: str) -> str:
    detail = error_detail(response)
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


# Statuses that say "not processed, try again"; a plain 500 on a POST may have stored the request.
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
        raise Transient(f"HTTP {status}")


def json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def post_once(
    client: httpx.AsyncClient,
    config: AskUserConfig,
    path: str,
    body: dict[str, Any],
    *,
    endpoint: str,
    idempotency_key: str,
) -> httpx.Response:
    """One POST of a question or a permission request; a 200/201 response, or the error it stands for.

    ``idempotency_key`` (sent as ``Idempotency-Key``) is the same on every try of one tool
    call, and the server answers a repeat with what it stored the first time: so a
    connection lost mid-request (a web process restarting) is retried like a refused one."""
    headers = {**_auth_headers(config), "Idempotency-Key": idempotency_key}
    try:
        response = await client.post(config.api_url + path, json=body, headers=headers)
    except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        # Refused, or broken mid-request (the request may have been stored: the key makes
        # posting it again safe). A timeout is not retried: it outlasts the retry window.
        raise Transient(_transport_reason(exc)) from exc
    except httpx.TransportError as exc:
        raise RelayUnavailable(_transport_reason(exc)) from exc
    _raise_for_common_status(response, retry=lambda status: status in RETRY_POST_STATUSES)
    if response.status_code == 410:
        raise RunFinished(error_detail(response))
    # 413: the request is larger than the app accepts (a Write of a big file); its sentence says so.
    if response.status_code in (400, 413, 422):
        raise RequestRejected(error_detail(response))
    if response.status_code not in (200, 201):
        raise RelayUnavailable(unexpected_reply(response, endpoint))
    return response


def created_fields(
    response: httpx.Response, config: AskUserConfig, *, id_key: str, endpoint: str
) -> tuple[str, str | None, int]:
    """The new id, ``expires_at`` and ``timeout`` (the config's when the server sent none) of a 201."""
    try:
        body = response.json()
        new_id = body[id_key]
        timeout = body.get("timeout")
        expires_at = body.get("expires_at")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RelayUnavailable(f"{endpoint} returned an unexpected body") from None
    if not isinstance(new_id, str) or not new_id:
        raise RelayUnavailable(f"{endpoint} returned no {id_key}")
    valid_timeout = isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0
    return (
        new_id,
        expires_at if isinstance(expires_at, str) else None,
        timeout if valid_timeout else config.timeout,
    )


async def post_with_retry(post: Callable[[], Awaitable[T]], *, endpoint: str, retry_window: float) -> T:
    """Run ``post``, retrying what it raises as ``Transient`` (refused or broken connections,
    429/502/503/504) for ``retry_window`` seconds."""
    deadline = time.monotonic() + retry_window
    backoff = BACKOFF_START
    while True:
        try:
            return await post()
        except Transient as exc:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RelayUnavailable(exc.reason) from exc
            logger.warning("%s failed (%s); retrying", endpoint, exc.reason)
            await asyncio.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, BACKOFF_MAX)


async def get_once(
    client: httpx.AsyncClient, config: AskUserConfig, path: str, params: dict[str, str]
) -> httpx.Response:
    """One long-poll GET; 401/403 raise RelayAuthRejected, 429 and 5xx raise ``Transient``."""
    try:
        response = await client.get(config.api_url + path, params=params, headers=_auth_headers(config))
    except httpx.TransportError as exc:
        # A poll only reads, so any transport failure is safe to retry.
        raise Transient(_transport_reason(exc)) from exc
    _raise_for_common_status(response, retry=lambda status: status == 429 or status >= 500)
    return response


async def poll_until(
    poll: Callable[[], Awaitable[T | None]],
    *,
    seconds: float,
    endpoint: str,
    expired: Callable[[], RelayError],
) -> T:
    """Call ``poll`` until it returns a value; after ``seconds`` raise ``expired()``.

    Transient failures are retried with backoff until the deadline; if the last attempt before
    the deadline failed, the result is RelayUnavailable rather than ``expired()``.
    """
    deadline = time.monotonic() + seconds
    backoff = BACKOFF_START
    last_failure: str | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if last_failure is not None:
                raise RelayUnavailable(last_failure)
            raise expired()
        try:
            async with asyncio.timeout(remaining):
                result = await poll()
        except TimeoutError:
            # Our own deadline cut the long-poll short; that is a timeout, not a failure.
            raise expired() from None
        except Transient as exc:
            if last_failure is None:
                logger.warning("%s failed (%s); retrying until the deadline", endpoint, exc.reason)
            last_failure = exc.reason
            await asyncio.sleep(min(backoff, max(deadline - time.monotonic(), 0)))
            backoff = min(backoff * 2, BACKOFF_MAX)
            continue
        last_failure = None
        backoff = BACKOFF_START
        if result is not None:
            return result
