"""Django's stock middleware, run on the event loop instead of a thread per step.

Under ASGI, Django's ``MiddlewareMixin`` runs every ``process_request`` and
``process_response`` through ``sync_to_async``: for the seven middlewares of this app
that is up to fourteen hand-overs to a thread and back per request, each a wake-up of
that thread and of the loop. None of those steps does I/O, except a session that must be
saved, so here they run inline; a session save still goes to a thread.

bench/decision_path.py, submit-decision in-process, the same run on 2 busy cores (load ~1):
the view reached in 2.0 ms p50 with these and 2.8 ms with Django's classes; CPU per request
6.2 ms and 8.0 ms. On an idle machine the latency is alike (a hand-over is cheap then).

The view step is the handler's: Django also hands every synchronous ``process_view`` to a
thread, so the app's ASGI handlers take ``InlineViewStepsMixin``, which calls one marked
``runs_inline`` (the CSRF check's) on the loop.

Only the thread changes; the logic is Django's own, so these are drop-in replacements.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware import clickjacking, common, csrf, security


class InlineMixin:
    """``MiddlewareMixin.__acall__`` without the threads: for steps that do no I/O."""

    get_response: Any

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = None
        process_request = getattr(self, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        response = response or await self.get_response(request)
        process_response = getattr(self, "process_response", None)
        if process_response is not None:
            response = process_response(request, response)
        return response  # type: ignore[no-any-return]


class SecurityMiddleware(InlineMixin, security.SecurityMiddleware):
    pass


class CommonMiddleware(InlineMixin, common.CommonMiddleware):
    pass


def runs_inline(method: Any) -> Any:
    """Marks a middleware's ``process_view`` that does no I/O: handlers with
    ``InlineViewStepsMixin`` call it on the event loop, where Django would hand it to a
    thread and back."""
    method.runs_inline = True
    return method


class InlineViewStepsMixin:
    """For the app's ASGI handlers: a middleware's ``process_view`` marked ``runs_inline``
    is called on the event loop. Django hands every synchronous ``process_view`` to a
    thread and back (the CSRF check: one more wake-up of a thread and of the loop before
    every view)."""

    def adapt_method_mode(
        self,
        is_async: bool,
        method: Any,
        method_is_async: bool | None = None,
        debug: bool = False,
        name: str | None = None,
    ) -> Any:
        if is_async and getattr(method, "runs_inline", False):

            async def inline(*args: Any, **kwargs: Any) -> Any:
                return method(*args, **kwargs)

            return inline
        return super().adapt_method_mode(is_async, method, method_is_async, debug, name)  # type: ignore[misc]


class CsrfViewMiddleware(InlineMixin, csrf.CsrfViewMiddleware):
    # The check compares the header's (or the form's, read from the body Django has
    # already received) token with the cookie's: no I/O, so no thread. A form's body is
    # at most DATA_UPLOAD_MAX_MEMORY_SIZE, and the app takes no file uploads, so parsing
    # it on the loop writes nothing to disk.
    @runs_inline
    def process_view(
        self, request: HttpRequest, callback: Any, callback_args: Any, callback_kwargs: Any
    ) -> Any:
        return super().process_view(request, callback, callback_args, callback_kwargs)


class AuthenticationMiddleware(InlineMixin, auth.AuthenticationMiddleware):
    """Sets the lazy ``request.user``/``request.auser``; the user is loaded when asked for."""


class MessageMiddleware(InlineMixin, messages.MessageMiddleware):
    """Messages live in the cookie or the session; the session is saved by SessionMiddleware."""


class XFrameOptionsMiddleware(InlineMixin, clickjacking.XFrameOptionsMiddleware):
    pass


class SessionMiddleware(sessions.SessionMiddleware):
    """The session store is lazy; only a save (a database write) needs a thread."""

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        self.process_request(request)
        response: HttpResponse = await self.get_response(request)  # type: ignore[misc]
        session = request.session
        if session.modified or settings.SESSION_SAVE_EVERY_REQUEST:
            return await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
        return self.process_response(request, response)
