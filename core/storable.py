"""Text the database can keep whichever database it is.

PostgreSQL's text and jsonb refuse the NUL character (SQLite keeps it), and what Claude
and its tools print may hold one (``cat`` of a binary file, ``printf '\\0'``). The API
refuses NUL in what people send (``promptmgr.api``); what a run produces is kept with
U+FFFD in its place, on both databases, rather than lost with the rest of the record.
"""

from __future__ import annotations

from typing import Any

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
