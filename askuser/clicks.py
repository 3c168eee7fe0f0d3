"""The page's click channel: a person's answers and decisions over one WebSocket.

``POST /api/askuser/submit-answer`` and ``/submit-decision`` pay Django's per-request work
on every click: the hand-over for ``request_started``, the middleware, the routing, the
session's and the user's load, ninja's response. Most of a click's acknowledgement was that
(bench/askuser_latency.py, target 3 ms p50; docs/design-notes.md, "The click channel").
The chat page keeps this socket open instead and sends each click as one message; the
reply carries the same status and body the endpoint would have answered. The endpoints
stay, and the page falls back to them whenever the socket is not open.

Who may connect: a page of this site (the ``Origin`` header checked as Django's CSRF
check does for a POST: this host, or ``CSRF_TRUSTED_ORIGINS``) with a signed-in session.
Who may click: every message loads the session and its user again, with the click's own
database work (``services.require_signed_in``), so a sign-out, an expired session or a
changed password ends the socket's rights at the next click exactly as it does the
endpoints': 401.

Messages, each a JSON object of at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes::

    → {"id": 7, "kind": "answer", "body": {<submit-answer's body>}}
    → {"id": 8, "kind": "decision", "body": {<submit-decision's body>}}
    ← {"id": 7, "status": 200, "body": {<submit-answer's 200 body>}}
    ← {"id": 8, "status": 409, "body": {"detail": "…", "code": "already_decided"}}

Clicks of one socket run side by side (``MAX_IN_FLIGHT`` at once; more are refused with
429), each on a pooled request thread, and what a click leaves for after its
acknowledgement (``core.after_response``) runs once its reply has gone out.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any

import pydantic
import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import auth
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from django.http.cookie import parse_cookie
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.functional import SimpleLazyObject
from ninja.responses import NinjaJSONEncoder

from core import after_response
from core.errors import MSG_SIGN_IN, DomainError
from core.schemas import (
    MSG_NOT_JSON,
    MSG_NOT_OBJECT,
    MSG_NUL,
    MSG_TOO_LARGE,
    has_nul,
    invalid_body,
    refusal_reply,
)

from . import approvals, services
from .api import DecisionIn, DecisionOut, SubmitIn, SubmitOut

logger = logging.getLogger(__name__)

PATH = "/api/askuser/clicks"
# A page sends one click at a time, a person with several tabs a few; a socket that has
# more under way than this is not a page.
MAX_IN_FLIGHT = 8
# A close code of the application's (4000-4999): the page does not reconnect after it and
# uses the endpoints (which say why) until it is loaded again.
CLOSE_NOT_SIGNED_IN = 4401

MSG_NO_KIND = "Unknown kind {kind!r}: a click is an 'answer' or a 'decision'."
MSG_NO_ID = "A click needs an integer 'id' for its reply."
MSG_BUSY = f"More than {MAX_IN_FLIGHT} clicks are under way on this connection; wait for their replies."
MSG_FAILED = "The server failed on this click. Reload the page to see whether it was recorded."

Send = Callable[[dict[str, Any]], Awaitable[None]]
ThreadScope = Callable[[], Any]  # an async context manager: the click's synchronous steps on one thread

_session_store = import_module(settings.SESSION_ENGINE).SessionStore


class Refused(Exception):
    """A message the channel answers itself (not JSON, no id, an unknown kind…), with the
    message's id when it has a usable one."""

    def __init__(self, status: int, detail: str, code: str, click_id: int | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.body = {"detail": detail, "code": code}
        self.click_id = click_id


def _as_request(scope: dict[str, Any]) -> ASGIRequest:
    """The handshake as the Django request it is (a GET), for Django's host and origin checks."""
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    return ASGIRequest({**scope, "type": "http", "method": "GET", "scheme": scheme}, io.BytesIO())


def origin_allowed(scope: dict[str, Any]) -> bool:
    """The handshake's ``Origin`` is this site's, by the rule Django's CSRF check applies to a
    POST's: a browser always sends it on a WebSocket handshake, so a missing one is refused."""
    request = _as_request(scope)
    if "HTTP_ORIGIN" not in request.META:
        return False
    # A new middleware each time (once per page): it reads CSRF_TRUSTED_ORIGINS when first asked.
    csrf = CsrfViewMiddleware(lambda request: None)  # type: ignore[arg-type]  # only its origin check is used
    return bool(csrf._origin_verified(request))  # type: ignore[attr-defined]  # Django 5.2, pinned


def session_key(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            return parse_cookie(value.decode("latin1")).get(settings.SESSION_COOKIE_NAME) or None
    return None


class _SessionOnly:
    """What ``django.contrib.auth.get_user`` reads of a request: its session."""

    def __init__(self, key: str) -> None:
        self.session = _session_store(key)


def person(key: str) -> Any:
    """The session's user, loaded afresh by the click's first synchronous step."""

    def load() -> Any:
        # What Django's request_started does before a request's first query: drop a
        # connection that broke or outlived CONN_MAX_AGE.
        close_old_connections()
        return auth.get_user(_SessionOnly(key))  # type: ignore[arg-type]

    return SimpleLazyObject(load)


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, cls=NinjaJSONEncoder)


def _schema_errors(exc: pydantic.ValidationError) -> list[dict[str, Any]]:
    return [
        {"type": e["type"], "loc": ["body", "payload", *e["loc"]], "msg": e["msg"]}
        for e in exc.errors(include_url=False, include_context=False, include_input=False)
    ]


def parse(text: str | None) -> tuple[int, str, dict[str, Any]]:
    """A message's id, kind and body; ``Refused`` (with the id, when it has one) otherwise."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if text is None:
        raise Refused(422, MSG_NOT_JSON, "invalid_json")
    if limit is not None and len(text) > limit:
        raise Refused(413, MSG_TOO_LARGE.format(limit=limit), "too_large")
    try:
        message = json.loads(text)
    except ValueError:
        raise Refused(422, MSG_NOT_JSON, "invalid_json") from None
    if not isinstance(message, dict):
        raise Refused(422, MSG_NOT_OBJECT, "invalid_json")
    click_id = message.get("id")
    if not isinstance(click_id, int) or isinstance(click_id, bool):
        raise Refused(422, MSG_NO_ID, "invalid")
    kind, body = message.get("kind"), message.get("body")
    if kind not in ("answer", "decision"):
        raise Refused(422, MSG_NO_KIND.format(kind=kind), "invalid", click_id)
    if not isinstance(body, dict):
        raise Refused(422, MSG_NOT_OBJECT, "invalid_json", click_id)
    if has_nul(body):
        raise Refused(422, MSG_NUL, "nul_character", click_id)
    return click_id, kind, body


async def click(kind: str, body: dict[str, Any], user: Any) -> tuple[int, dict[str, Any]]:
    """What ``POST /api/askuser/submit-<kind>`` answers for ``body`` from ``user``:
    the status and the JSON body, errors included."""
    try:
        if kind == "answer":
            answer = SubmitIn.model_validate(body)
            event = await services.answer_submit(question_id=str(answer.question_id), user=user, body=answer)
            return 200, SubmitOut.model_validate(event).model_dump()
        decision = DecisionIn.model_validate(body)
        decided = await approvals.permission_decide(
            request_id=str(decision.request_id),
            user=user,
            decision=decision.decision,
            message=decision.message,
        )
        return 200, DecisionOut.model_validate(decided).model_dump()
    except pydantic.ValidationError as exc:
        return 422, invalid_body(_schema_errors(exc))
    except (DomainError, DjangoValidationError, redis.RedisError) as exc:
        return refusal_reply(exc)


class Channel:
    """One page's socket: its session, its clicks under way, and its replies in order of sending."""

    def __init__(self, key: str, send: Send, thread: ThreadScope) -> None:
        self.key = key
        self._send = send
        self._thread = thread
        self._sending = asyncio.Lock()
        self.under_way: set[asyncio.Task[None]] = set()
        self.open = True

    async def reply(self, click_id: int | None, status: int, body: dict[str, Any]) -> None:
        if not self.open:
            return
        text = _dumps({"id": click_id, "status": status, "body": body})
        try:
            async with self._sending:  # one frame at a time, whichever click finished first
                await self._send({"type": "websocket.send", "text": text})
        except OSError:  # the page went away meanwhile (uvicorn's ClientDisconnected)
            self.open = False

    def received(self, text: str | None) -> None:
        try:
            click_id, kind, body = parse(text)
        except Refused as refused:
            self._start(self.reply(refused.click_id, refused.status, refused.body))
            return
        if len(self.under_way) >= MAX_IN_FLIGHT:
            self._start(self.reply(click_id, 429, {"detail": MSG_BUSY, "code": "too_many"}))
            return
        self._start(after_response.then_deferred(lambda: self._click(click_id, kind, body)))

    async def _click(self, click_id: int, kind: str, body: dict[str, Any]) -> None:
        try:
            async with self._thread():
                status, reply = await click(kind, body, person(self.key))
        except Exception:
            logger.exception("A click on the click channel failed")
            status, reply = 500, {"detail": MSG_FAILED, "code": "error"}
        # If the page went away meanwhile, what was recorded stays recorded: its card shows
        # the answer when the page comes back.
        await self.reply(click_id, status, reply)

    def _start(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self.under_way.add(task)
        task.add_done_callback(self.under_way.discard)

    async def closed(self) -> None:
        """The socket has closed: no more replies, but the clicks under way (and what they
        left for after their reply) finish, since they may have been committed already."""
        self.open = False
        if self.under_way:
            await asyncio.gather(*self.under_way, return_exceptions=True)


async def _signed_in(key: str, thread: ThreadScope) -> bool:
    async with thread():
        return bool(await sync_to_async(lambda: person(key).is_authenticated)())


async def serve(scope: dict[str, Any], receive: Any, send: Any, thread: ThreadScope) -> None:
    """The ASGI WebSocket application at ``PATH`` (``promptmgr.asgi``)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if not origin_allowed(scope):
        await send({"type": "websocket.close"})  # before the accept: uvicorn answers HTTP 403
        return
    key = session_key(scope)
    await send({"type": "websocket.accept"})
    if key is None or not await _signed_in(key, thread):
        # Accepted only to say why, in a close code the page can read (a refused handshake
        # reaches a page as 1006 whatever the reason): it stops retrying and uses the endpoints.
        await send({"type": "websocket.close", "code": CLOSE_NOT_SIGNED_IN, "reason": MSG_SIGN_IN})
        return
    channel = Channel(key, send, thread)
    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.receive":
                text = message.get("text")
                if text is None and message.get("bytes") is not None:
                    text = message["bytes"].decode("utf-8", "replace")
                channel.received(text)
            elif message["type"] == "websocket.disconnect":
                break
    finally:
        await channel.closed()
