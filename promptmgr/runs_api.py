"""Runs API: start, status, cancel and the SSE event stream."""

from __future__ import annotations

from ninja import Router

router = Router()
