"""``INTERNAL_BASE_URL`` must reach this app: checked as soon as the server listens.

The MCP server of every run, and with no API key the CLI itself (the offline demo model
is mounted in this app), call the app at ``INTERNAL_BASE_URL``. A wrong value used to
show only as a run that hung for minutes while the CLI retried. Now the worker asks
``INTERNAL_BASE_URL`` for its identity right after start-up (the server binds its port
only once the ASGI lifespan start-up is over, so the check runs beside it): an HMAC of
this database's instance id under ``SECRET_KEY``, which only a worker of this deployment
can give. If nothing answers in ``DEADLINE`` seconds, or another server answers, the
log says so at once in one error line, and every new run is refused with that sentence
(503) instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import http.client
import logging
import time
import urllib.parse
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

PATH = "/_internal/identity"
DEADLINE = 30.0
MSG_UNREACHABLE = (
    "INTERNAL_BASE_URL={url} does not reach this server ({reason}); runs are refused until it "
    "does. Set it to where this server listens on loopback, e.g. http://127.0.0.1:<port>."
)
MSG_OTHER_SERVER = (
    "INTERNAL_BASE_URL={url} reaches another server, not this one; runs are refused until it "
    "points here. Set it to where this server listens on loopback, e.g. http://127.0.0.1:<port>."
)

_problem: str | None = None
_task: asyncio.Task[None] | None = None


def identity() -> str:
    """What this deployment answers at ``PATH`` (the instance id is loaded at start-up)."""
    from core.redis import key_prefix

    return hmac.new(settings.SECRET_KEY.encode(), key_prefix().encode(), hashlib.sha256).hexdigest()


async def serve_identity(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI answer at ``PATH``."""
    body = identity().encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


def problem() -> str | None:
    """Why runs cannot work here (``INTERNAL_BASE_URL`` does not reach this app), or None."""
    return _problem


def _get(url: str) -> tuple[int, str]:
    """One GET of ``url``: its status, and its text when that is 200.

    Through ``http.client``, which uses no proxy (the app is on loopback) and follows no
    redirect (a redirect is another server's answer). Not httpx, whose import (with the
    rich and click of its command line) cost the idle worker 6 MiB, nor urllib.request,
    which nothing else in a worker imports (0.3 MiB; bench/scale.py, idle RSS)."""
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=2.0)
    try:
        connection.request("GET", parts.path or "/")
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace") if response.status == 200 else ""
        return response.status, text
    finally:
        connection.close()


async def check(deadline: float) -> None:
    """Ask ``INTERNAL_BASE_URL`` for its identity until it answers or ``deadline`` passes."""
    global _problem
    url = settings.INTERNAL_BASE_URL.rstrip("/")
    expected = identity()
    reason = "no answer"
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        try:
            status, text = await asyncio.to_thread(_get, url + PATH)
        except (OSError, http.client.HTTPException) as exc:
            reason = type(exc).__name__  # not listening yet, or never: try again shortly
            await asyncio.sleep(0.2)
            continue
        if status == 200 and hmac.compare_digest(text, expected):
            _problem = None
            return
        _problem = MSG_OTHER_SERVER.format(url=url)
        logger.error(_problem)
        return
    _problem = MSG_UNREACHABLE.format(url=url, reason=reason)
    logger.error(_problem)


def start_check() -> None:
    """Run ``check`` beside the server (call once the lifespan start-up is complete)."""
    global _task, _problem
    _problem = None
    # A fresh context: the check outlives the lifespan message that started it.
    _task = asyncio.get_running_loop().create_task(
        check(DEADLINE), name="internal-url-check", context=contextvars.Context()
    )


def stop_check() -> None:
    """The server stops: so does the check, and what it found no longer holds."""
    global _problem
    if _task is not None:
        _task.cancel()
    _problem = None
