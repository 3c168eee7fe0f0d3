"""The one NinjaAPI of the project: it gathers each app's router under ``/api/``.

Every error answers one JSON body, ``{"detail": "<sentence>", "code": "<code>"}``
(``ErrorOut``); a request that fails validation adds ``errors``, the fields at fault.
Services raise ``core.errors`` domain errors; the handlers here map them.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.security import django_auth

from askuser.api import router as askuser_router
from core.errors import DomainError
from promptmgr.changes_api import router as changes_router
from promptmgr.files_api import router as files_router
from promptmgr.messages_api import router as messages_router
from promptmgr.projects_api import router as projects_router
from promptmgr.runs_api import router as runs_router

# Session auth enforces CSRF on unsafe methods; the relay endpoints override it with
# their bearer-token auth.
api = NinjaAPI(title="PromptManager API", version="1", auth=django_auth, urls_namespace="api")
api.add_router("/projects", projects_router, tags=["projects"])
api.add_router("/", runs_router, tags=["runs"])
api.add_router("/askuser", askuser_router, tags=["ask-user"])
api.add_router("/", messages_router, tags=["messages"])
api.add_router("/", changes_router, tags=["changes"])
api.add_router("/", files_router, tags=["files"])

logger = logging.getLogger(__name__)
MSG_REDIS_DOWN = "The live service (Redis) is unreachable; nothing was changed. Try again shortly."
MSG_UNAUTHORIZED = "Sign in first."
MSG_INVALID = "The request is not valid: {fields}"
# Codes of ninja's own HttpError statuses (raised by auth classes and ninja itself).
HTTP_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def _error(request: HttpRequest, status: int, detail: str, code: str, **extra: Any) -> HttpResponse:
    return api.create_response(request, {"detail": detail, "code": code, **extra}, status=status)


def _invalid(request: HttpRequest, errors: list[dict[str, Any]]) -> HttpResponse:
    fields = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', [])[2:]) or 'body'}: {e.get('msg')}" for e in errors
    )
    return _error(request, 422, MSG_INVALID.format(fields=fields), "invalid", errors=errors)


@api.exception_handler(DomainError)
def domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    return _error(request, exc.status, exc.detail, exc.code)


@api.exception_handler(NinjaValidationError)
def validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    return _invalid(request, [dict(e) for e in exc.errors])


@api.exception_handler(DjangoValidationError)
def model_validation_error(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
    # The service's field errors in the same shape as the schema's.
    errors = [
        {"loc": ["body", "payload", field], "msg": message, "type": "value_error"}
        for field, messages in exc.message_dict.items()
        for message in messages
    ]
    return _invalid(request, errors)


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(request, 401, MSG_UNAUTHORIZED, "unauthorized")


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return _error(request, exc.status_code, exc.message, HTTP_CODES.get(exc.status_code, "error"))


@api.exception_handler(redis.RedisError)
def redis_unavailable(request: HttpRequest, exc: redis.RedisError) -> HttpResponse:
    # A clear 503 instead of a 500: the request can simply be retried once Redis is back.
    logger.error("Redis unavailable during %s %s: %s", request.method, request.path, exc)
    return _error(request, 503, MSG_REDIS_DOWN, "redis_unavailable")
