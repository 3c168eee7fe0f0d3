"""Text the database can keep whichever database it is.

PostgreSQL's text and jsonb refuse the NUL character (SQLite keeps it), and what Claude
and its tools print may hold one (``cat`` of a binary file, ``printf '\\0'``). The API
refuses NUL in what people send (``promptmgr.api``); what a run produces is kept with
U+FFFD in its place, on both databases, rather than lost with the rest of the record.

The model fields that hold what a run produces are ``StorableTextField`` and
``StorableJSONField``: every save, ``update()`` and ``bulk_create`` goes through them, so
no caller has to remember.
"""

from __future__ import annotations

from typing import Any

from django.db import models

NUL = "\x00"
REPLACEMENT = "\ufffd"


def storable_text(text: str) -> str:
    return text.replace(NUL, REPLACEMENT) if NUL in text else text


def storable(value: Any) -> Any:
    """``value`` (JSON: dicts, lists, strings…) with every NUL in its strings and keys replaced."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(k) if isinstance(k, str) else k: storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


class StorableTextField(models.TextField):  # type: ignore[type-arg]
    """A ``TextField`` that stores each NUL as U+FFFD."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return storable_text(value) if isinstance(value, str) else value

    def deconstruct(self) -> Any:
        # The column is Django's own: to migrations this is a TextField (on SQLite a
        # changed field class would rebuild the table, every run event copied).
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.TextField", args, kwargs


class StorableJSONField(models.JSONField):
    """A ``JSONField`` that stores each NUL in its strings and keys as U+FFFD."""

    def get_prep_value(self, value: Any) -> Any:
        return super().get_prep_value(storable(value))

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()  # as StorableTextField's
        return name, "django.db.models.JSONField", args, kwargs
