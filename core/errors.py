"""Domain errors: what a service refuses, with the HTTP status and a stable code.

Services raise these; the API's exception handlers (``promptmgr.api``) turn every one
into the same JSON body, ``{"detail": "<sentence>", "code": "<code>"}``. The sentences
are module constants of the services (tests assert on them); the codes let a client
branch without parsing sentences.
"""

from __future__ import annotations

from typing import ClassVar


class DomainError(Exception):
    status: ClassVar[int] = 400
    default_code: ClassVar[str] = "bad_request"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code


class Unauthorized(DomainError):
    status = 401
    default_code = "unauthorized"


# What a request from someone who is not signed in is told (the API's 401).
MSG_SIGN_IN = "Sign in first."


class Forbidden(DomainError):
    status = 403
    default_code = "forbidden"


class NotFound(DomainError):
    """Missing, or not the caller's to see: both answer the same, so nothing leaks."""

    status = 404
    default_code = "not_found"


class Conflict(DomainError):
    """The thing is in a state that does not allow it (already answered, still running)."""

    status = 409
    default_code = "conflict"


class Gone(DomainError):
    """It existed but is over (expired, cancelled, the run ended)."""

    status = 410
    default_code = "gone"


class Invalid(DomainError):
    status = 422
    default_code = "invalid"


class TooMany(DomainError):
    status = 429
    default_code = "too_many"


class Unavailable(DomainError):
    status = 503
    default_code = "unavailable"
