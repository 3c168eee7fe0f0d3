"""What a run produces is stored with each NUL as U+FFFD (``core.storable``'s fields), on
SQLite and on PostgreSQL (which refuses NUL): a tool input or a question from Claude may
hold one, and the record must not be lost for it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from askuser.models import PermissionRequest, Question, QuestionSource
from tests.helpers import make_run

pytestmark = pytest.mark.unit


def test_a_permission_request_whose_tool_input_holds_a_nul_is_stored_with_a_replacement(alice: Any) -> None:
    request = PermissionRequest.objects.create(
        run=make_run(owner=alice),
        source=QuestionSource.SDK,
        tool_name="Write",
        tool_input={"file_path": "a.bin", "content": "ELF\x00\x01", "k\x00": ["x\x00"]},
        preview={"kind": "write", "text": "ELF\x00\x01"},
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    request.refresh_from_db()
    assert request.tool_input == {"file_path": "a.bin", "content": "ELF\ufffd\x01", "k\ufffd": ["x\ufffd"]}
    assert request.preview == {"kind": "write", "text": "ELF\ufffd\x01"}


def test_a_question_holding_a_nul_is_stored_with_a_replacement(alice: Any) -> None:
    question = Question.objects.create(
        run=make_run(owner=alice),
        source=QuestionSource.MCP,
        questions=[{"question": "Keep a\x00b?", "header": "", "options": [], "multiSelect": False}],
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    question.refresh_from_db()
    assert question.questions[0]["question"] == "Keep a\ufffdb?"
