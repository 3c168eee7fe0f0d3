"""A run's events in the database (``promptmgr.event_history``)."""

from __future__ import annotations

from typing import Any

import pytest

from core.events import Event
from promptmgr.event_history import persist_events
from promptmgr.models import RunEvent
from tests.helpers import make_run

pytestmark = pytest.mark.unit


def test_a_nul_in_an_event_is_kept_as_a_replacement_character(alice: Any) -> None:
    """PostgreSQL's jsonb refuses NUL; a tool's output (``cat`` of a binary file) may hold one,
    and one such event must not cost the run its whole history."""
    run = make_run(owner=alice)
    output = {"tool_use_id": "toolu_1", "content": "ELF\x00\x01", "lines": ["a\x00b"], "k\x00": 1}
    persist_events(
        run.pk, [Event(id=1, event="tool_result", data=output), Event(id=2, event="done", data={})]
    )
    stored = {e.seq: (e.event, e.data) for e in RunEvent.objects.filter(run=run)}
    assert stored == {
        1: (
            "tool_result",
            {"tool_use_id": "toolu_1", "content": "ELF\ufffd\x01", "lines": ["a\ufffdb"], "k\ufffd": 1},
        ),
        2: ("done", {}),
    }
