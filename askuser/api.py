"""Ask-user relay endpoints: relay-question, poll-answer, submit-answer."""

from __future__ import annotations

from ninja import Router

router = Router()
