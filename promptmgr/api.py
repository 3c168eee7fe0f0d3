"""The one NinjaAPI of the project: it gathers each app's router under ``/api/``.

Every error answers one JSON body, ``{"detail": "<sentence>", "code": "<code>"}``
(``ErrorOut``); a request that fails validation adds ``errors``, the fields at fault.
Services raise ``core.errors`` domain errors; the handlers here map them, and so bad
input never becomes a 500: a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` answers 413, a
body that is not JSON and a NUL character in any text (body or query) answer 422.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse
from django.utils.datastructures import MultiValueDict
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from ninja.security import django_auth

from askuser.api import router as askuser_router
from core.errors import MSG_SIGN_IN, DomainError, Invalid
from core.schemas import (
    MSG_NOT_JSON,
    MSG_NOT_OBJECT,
    MSG_NUL,
    MSG_TOO_LARGE,
    Refusal,
    has_nul,
    invalid_body,
    refusal_reply,
)
from promptmgr.changes_api import router as changes_router
from promptmgr.files_api import router as files_router
from promptmgr.messages_api import router as messages_router
from promptmgr.projects_api import router as projects_router
from promptmgr.runs_api import router as runs_router


class StrictParser(Parser):
    """JSON bodies and query strings, refusing NUL characters anywhere in their text:
    PostgreSQL cannot store them, and no field of this API has a use for one."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        try:
            data = super().parse_body(request)
        except ValueError:  # not JSON, or not UTF-8
            raise Invalid(MSG_NOT_JSON, code="invalid_json") from None
        # Every body of this API is an object; ninja would read a list as no fields at all.
        if not isinstance(data, dict):
            raise Invalid(MSG_NOT_OBJECT, code="invalid_json")
        if has_nul(data):
            raise Invalid(MSG_NUL, code="nul_character")
        return data

    def parse_querydict(
        self, data: MultiValueDict[str, Any], list_fields: list[str], request: HttpRequest
    ) -> dict[str, Any]:
        parsed = super().parse_querydict(data, list_fields, request)
        if has_nul(parsed):
            raise Invalid(MSG_NUL, code="nul_character")
        return parsed


# Session auth enforces CSRF on unsafe methods; the relay endpoints override it with
# their bearer-token auth.
api = NinjaAPI(
    title="PromptManager API", version="1", auth=django_auth, urls_namespace="api", parser=StrictParser()
)
api.add_router("/projects", projects_router, tags=["projects"])
api.add_router("/", runs_router, tags=["runs"])
api.add_router("/askuser", askuser_router, tags=["ask-user"])
api.add_router("/", changes_router, tags=["changes"])
api.add_router("/", files_router, tags=["files"])
api.add_router("/", messages_router, tags=["messages"])

logger = logging.getLogger(__name__)
# Codes of ninja's own HttpError statuses (raised by auth classes and ninja itself).
HTTP_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def _error(request: HttpRequest, status: int, detail: str, code: str, **extra: Any) -> HttpResponse:
    return api.create_response(request, {"detail": detail, "code": code, **extra}, status=status)


def _invalid(request: HttpRequest, errors: list[dict[str, Any]]) -> HttpResponse:
    return api.create_response(request, invalid_body(errors), status=422)


def _refused(request: HttpRequest, exc: Refusal) -> HttpResponse:
    status, body = refusal_reply(exc)
    return api.create_response(request, body, status=status)


@api.exception_handler(DomainError)
def domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    return _refused(request, exc)


@api.exception_handler(NinjaValidationError)
def validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    return _invalid(request, [dict(e) for e in exc.errors])


@api.exception_handler(DjangoValidationError)
def model_validation_error(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
    return _refused(request, exc)


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(request, 401, MSG_SIGN_IN, "unauthorized")


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, DomainError):
        # ninja wraps whatever the body parser raises in a 400; ours raises what it means.
        return domain_error(request, exc.__cause__)
    return _error(request, exc.status_code, exc.message, HTTP_CODES.get(exc.status_code, "error"))


@api.exception_handler(RequestDataTooBig)
def body_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Django raises it when the body is first read (ninja's parsing, the CSRF check).
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _error(request, 413, MSG_TOO_LARGE.format(limit=limit), "too_large")


@api.exception_handler(redis.RedisError)
def redis_unavailable(request: HttpRequest, exc: redis.RedisError) -> HttpResponse:
    response = _refused(request, exc)
    response._has_been_logged = True  # type: ignore[attr-defined]  # Django's own log line per 5xx, too
    return response
