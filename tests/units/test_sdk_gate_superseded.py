"""The SDK engine's AskUserQuestion gate when a newer question replaces the one it waits on.

The gate runs against the test database and the real Redis; no CLI runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from claude_agent_sdk import PermissionResultDeny, ToolPermissionContext

from askuser.asking import question_create
from askuser.models import Question, QuestionSource
from core.questions import QuestionSpec
from core.tool_names import ASK_USER_QUESTION
from mcp_server.answers import SUPERSEDED
from tests.helpers import make_run, sdk_gate

pytestmark = pytest.mark.unit

ASKED = {"questions": [{"question": "Which database?", "header": "DB", "options": [], "multiSelect": False}]}


@pytest.mark.asyncio
async def test_a_superseded_question_is_denied_with_the_superseded_sentence(
    transactional_db: Any, alice: Any
) -> None:
    run = await sync_to_async(make_run)(owner=alice)
    gate = sdk_gate(run.pk)
    asking = asyncio.create_task(gate.can_use_tool(ASK_USER_QUESTION, ASKED, ToolPermissionContext()))
    while not await Question.objects.filter(run=run).aexists():
        await asyncio.sleep(0.05)

    newer = {"question": "Which database, really?", "header": "", "options": [], "multiSelect": False}
    await question_create(
        run_id=run.pk, source=QuestionSource.SDK, questions=[QuestionSpec.model_validate(newer)], timeout=300
    )

    result = await asyncio.wait_for(asking, timeout=5)
    assert isinstance(result, PermissionResultDeny)
    assert result.message == SUPERSEDED
