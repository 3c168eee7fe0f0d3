"""The error body every API operation declares for its 4xx answers."""

from __future__ import annotations

from typing import Any

from ninja import Schema


class ErrorOut(Schema):
    detail: str
    code: str
    errors: list[dict[str, Any]] | None = None


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """The error answers an operation declares, each with the one error body."""
    return dict.fromkeys(statuses, ErrorOut)
