"""The error body every API operation declares for its 4xx answers."""

from __future__ import annotations

from typing import Any

import redis
from django.core.exceptions import ValidationError as DjangoValidationError
from ninja import Schema

from core.errors import DomainError
from core.redis import outage_seen


class ErrorOut(Schema):
    detail: str
    code: str
    errors: list[dict[str, Any]] | None = None


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """The error answers an operation declares, each with the one error body."""
    return dict.fromkeys(statuses, ErrorOut)


# The API's sentences for bodies it cannot take (promptmgr.api's parser and handlers, and
# the page's click channel, askuser.clicks, which answers with the same bodies).
MSG_NOT_JSON = "The request body is not valid JSON."
MSG_NOT_OBJECT = "The request body must be a JSON object."
MSG_NUL = "Text may not contain NUL characters (\\u0000)."
MSG_TOO_LARGE = "The request body is larger than the {limit} bytes the server accepts."
MSG_REDIS_DOWN = "The live service (Redis) is unreachable; nothing was changed. Try again shortly."
MSG_INVALID = "The request is not valid: {fields}"


def has_nul(value: Any) -> bool:
    """Whether a NUL character is anywhere in a parsed JSON value: PostgreSQL cannot store
    one, and no field of this API has a use for one."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(item) for item in value)
    return False


def invalid_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The 422 body for a schema's errors (their ``loc`` as ninja gives it: body, payload, field…)."""
    fields = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', [])[2:]) or 'body'}: {e.get('msg')}" for e in errors
    )
    return {"detail": MSG_INVALID.format(fields=fields), "code": "invalid", "errors": errors}


def field_errors(exc: DjangoValidationError) -> list[dict[str, Any]]:
    """A service's field errors (a model's ``ValidationError``) in the same shape as the schema's."""
    return [
        {"loc": ["body", "payload", field], "msg": message, "type": "value_error"}
        for field, messages in exc.message_dict.items()
        for message in messages
    ]


Refusal = DomainError | DjangoValidationError | redis.RedisError


def refusal_reply(exc: Refusal) -> tuple[int, dict[str, Any]]:
    """The status and body a service's refusal is answered with, by the API's handlers
    (``promptmgr.api``) and the page's click channel (``askuser.clicks``) alike."""
    if isinstance(exc, DomainError):
        return exc.status, {"detail": exc.detail, "code": exc.code}
    if isinstance(exc, DjangoValidationError):
        return 422, invalid_body(field_errors(exc))
    # A clear 503 instead of a 500: the request can simply be retried once Redis is back.
    # One warning per outage (core.redis), not a line per request.
    outage_seen(exc)
    return 503, {"detail": MSG_REDIS_DOWN, "code": "redis_unavailable"}
