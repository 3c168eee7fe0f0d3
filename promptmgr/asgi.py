"""ASGI entry point: ``uvicorn promptmgr.asgi:application``.

Around Django it adds the ASGI lifespan (so runs are stopped and their process groups
reaped when the server shuts down), static files (uvicorn serves none, and a sync-only
middleware such as whitenoise would push every async view into a thread of its own), and,
when no Anthropic key is set, the offline demo model under ``DEMO_MODEL_PATH``.

Requests borrow a long-lived thread for their synchronous steps
(``promptmgr.request_threads``), so a thread and its database connection serve one
request after another. Run event streams (SSE) take none: a request keeps its thread as
long as it lasts, which for a stream is as long as someone watches. A stream's few
synchronous steps (the session and the run's visibility at the start, a status check
per heartbeat) go to asgiref's one shared thread instead.

What a request leaves for after its response (``core.after_response``: the bookkeeping of
a person's answer or decision) runs in the request's own task once the response is out.

The one WebSocket served is the page's click channel (``askuser.clicks``): a person's
answers and decisions without Django's per-request work, on the same pooled threads.
"""

from __future__ import annotations

import os
import re
from typing import Any

import django
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "promptmgr.settings")
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402  (after Django is set up)
from starlette.staticfiles import StaticFiles  # noqa: E402

from askuser import clicks  # noqa: E402
from core import after_response  # noqa: E402
from core.middleware import InlineViewStepsMixin  # noqa: E402
from promptmgr import internal_url, lifecycle  # noqa: E402
from promptmgr.request_threads import PooledThreadHandler  # noqa: E402

# Every other request: its synchronous steps on a long-lived pooled thread, and what it
# leaves for after its response (core.after_response) done once the response is out.
_pooled = PooledThreadHandler(settings.REQUEST_THREADS)
django_application = after_response.serving(_pooled)

Scope = dict[str, Any]
# The run events endpoint of promptmgr.runs_api.
EVENTS_PATH = re.compile(r"/api/runs/\d+/events")


class SharedThreadHandler(InlineViewStepsMixin, ASGIHandler):
    """Django without a thread of its own per request, for requests that live long."""

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        await self.handle(scope, receive, send)


_streams = SharedThreadHandler()

_demo_model = None
if settings.DEMO_MODEL:
    # Imported only here: Starlette's routing, requests and form parser (python-multipart),
    # 1.3 MiB, serve nothing else, and with an Anthropic key set no worker needs them.
    from promptmgr.scripted_model.server import create_app as create_demo_model

    _demo_model = create_demo_model(pace_ms=15)
# The project's static/ plus the admin's and django-ninja's (the /api/docs page) own
# files, served async with ETags.
_static = StaticFiles(
    directory=settings.STATICFILES_DIRS[0], packages=[("django.contrib.admin", "static"), ("ninja", "static")]
)


async def _lifespan(scope: Scope, receive: Any, send: Any) -> None:
    """The app's lifespan; once start-up is complete, the check of INTERNAL_BASE_URL starts
    (the server listens only from then on)."""

    async def send_and_watch(message: dict[str, Any]) -> None:
        await send(message)
        if message["type"] == "lifespan.startup.complete":
            internal_url.start_check()
        elif message["type"] == "lifespan.shutdown.complete":
            internal_url.stop_check()

    await lifecycle.lifespan(scope, receive, send_and_watch)


async def application(scope: Scope, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(scope, receive, send)
        return
    path = scope.get("path", "")
    if scope["type"] == "websocket":
        # The page's click channel; no other WebSocket is served (Django serves none).
        if path == clicks.PATH:
            await clicks.serve(scope, receive, send, _pooled.borrowed_thread)
        else:
            await receive()  # the handshake's websocket.connect
            await send({"type": "websocket.close", "code": 1008})
        return
    if scope["type"] == "http" and path.startswith(settings.STATIC_URL):
        inner = dict(scope, path=path[len(settings.STATIC_URL) - 1 :], root_path="")
        await _static(inner, receive, send)
        return
    if _demo_model is not None and path.startswith(settings.DEMO_MODEL_PATH + "/"):
        inner = dict(scope, path=path[len(settings.DEMO_MODEL_PATH) :], root_path="")
        await _demo_model(inner, receive, send)
        return
    if scope["type"] == "http" and path == internal_url.PATH:
        await internal_url.serve_identity(scope, receive, send)
        return
    if scope["type"] == "http" and EVENTS_PATH.fullmatch(path):
        await _streams(scope, receive, send)
        return
    await django_application(scope, receive, send)
