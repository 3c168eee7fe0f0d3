"""Projects API (filled by the foundation work)."""

from __future__ import annotations

from ninja import Router

router = Router()
