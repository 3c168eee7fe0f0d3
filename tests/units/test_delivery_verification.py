"""Delivery verification: only the ask tool's own result is checked against the answer.

The run supervisor's message handler is fed stream-json lines directly, with the test
database and the real Redis behind it; no CLI runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from askuser import asking, delivery, services
from askuser.answers import normalize_answers
from askuser.models import Question, QuestionSource
from core import events as live
from core.questions import AnswerIn, QuestionSpec
from promptmgr import live as promptmgr_live
from promptmgr.engines.base import Item, read_line
from promptmgr.processes import Line
from promptmgr.runner import WORKER_ID, RunContext, RunSupervisor
from tests.helpers import make_run

pytestmark = pytest.mark.unit

QUESTION = {
    "question": "Which database?",
    "header": "DB",
    "options": [{"label": "SQLite", "description": ""}, {"label": "PostgreSQL", "description": ""}],
    "multiSelect": False,
}


def tool_use(tool_use_id: str, name: str) -> Item:
    block = {"type": "tool_use", "id": tool_use_id, "name": name, "input": {}}
    return read_line(Line(json.dumps({"type": "assistant", "message": {"content": [block]}}).encode()))


def tool_result(tool_use_id: str, text: str) -> Item:
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": [{"type": "text", "text": text}]}
    return read_line(Line(json.dumps({"type": "user", "message": {"content": [block]}}).encode()))


def supervisor_with_context(owner: Any) -> tuple[RunSupervisor, RunContext]:
    run = make_run(owner=owner)
    supervisor = RunSupervisor(run.pk)
    supervisor.ask_user = True
    return supervisor, RunContext(run=run, project=run.conversation.project, conversation=run.conversation)


async def answered_question(run_id: int, user: Any, source: QuestionSource = QuestionSource.MCP) -> str:
    # Owned by this process, as a supervised run is: an answer to an unowned run fails it.
    await promptmgr_live.set_owner(run_id, WORKER_ID, ttl=60)
    card = await asking.question_create(
        run_id=run_id, source=source, questions=[QuestionSpec.model_validate(QUESTION)], timeout=300
    )
    question_id = str(card["question_id"])
    await services.answer_submit(question_id=question_id, user=user, body=AnswerIn(selectedOptions=[1]))
    return question_id


async def verdicts(run_id: int) -> list[dict[str, Any]]:
    return [e.data for e in await live.read_events(run_id, 0) if e.event == "ask_user_delivered"]


@pytest.mark.asyncio
async def test_an_unrelated_tool_result_neither_delivers_nor_mismatches_the_answer(
    transactional_db: Any, alice: Any
) -> None:
    supervisor, ctx = await sync_to_async(supervisor_with_context)(alice)
    question_id = await answered_question(ctx.run.pk, alice)

    await supervisor._on_item(ctx, tool_use("toolu_bash", "Bash"))
    await supervisor._on_item(ctx, tool_result("toolu_bash", "total 0\ndrwxr-xr-x 2 root root 40 ."))

    question = await Question.objects.aget(question_id=question_id)
    assert question.status == "answered" and question.delivery_mismatch == ""
    assert await verdicts(ctx.run.pk) == []

    await supervisor._on_item(ctx, tool_use("toolu_ask", delivery.MCP_ASK_TOOL))
    await supervisor._on_item(ctx, tool_result("toolu_ask", "User selected: PostgreSQL"))

    question = await Question.objects.aget(question_id=question_id)
    assert question.status == "delivered" and question.delivered_at is not None
    expected = {"question_id": question_id, "ok": True, "answers": {"Which database?": "PostgreSQL"}}
    assert await verdicts(ctx.run.pk) == [expected]


@pytest.mark.asyncio
async def test_a_mismatch_is_recorded_and_reported_once_and_never_flipped(
    transactional_db: Any, alice: Any
) -> None:
    supervisor, ctx = await sync_to_async(supervisor_with_context)(alice)
    question_id = await answered_question(ctx.run.pk, alice)

    await supervisor._on_item(ctx, tool_use("toolu_ask", delivery.MCP_ASK_TOOL))
    await supervisor._on_item(ctx, tool_result("toolu_ask", "User selected: SQLite"))
    # A later ask result that would match must not turn the recorded mismatch into a delivery.
    await supervisor._on_item(ctx, tool_use("toolu_again", delivery.MCP_ASK_TOOL))
    await supervisor._on_item(ctx, tool_result("toolu_again", "User selected: PostgreSQL"))

    question = await Question.objects.aget(question_id=question_id)
    assert question.status == "answered" and question.delivered_at is None
    assert question.delivery_mismatch == "User selected: SQLite"
    assert [v["ok"] for v in await verdicts(ctx.run.pk)] == [False]


@pytest.mark.asyncio
async def test_the_sdk_tools_result_marks_its_question_delivered(transactional_db: Any, alice: Any) -> None:
    supervisor, ctx = await sync_to_async(supervisor_with_context)(alice)
    question_id = await answered_question(ctx.run.pk, alice, source=QuestionSource.SDK)
    text = 'Your questions have been answered: "Which database?"="PostgreSQL". You can now continue.'

    await supervisor._on_item(ctx, tool_use("toolu_sdk", delivery.SDK_ASK_TOOL))
    await supervisor._on_item(ctx, tool_result("toolu_sdk", text))

    assert (await Question.objects.aget(question_id=question_id)).status == "delivered"
    assert [v["ok"] for v in await verdicts(ctx.run.pk)] == [True]


def unsaved(source: str, selected: list[int], other: str = "", notes: str = "") -> Question:
    """A question answered with these options and typed text, validated as a submit is."""
    questions = [{**QUESTION, "multiSelect": True}]
    body = {"answers": {QUESTION["question"]: {"selected": selected, "other": other}}, "notes": notes}
    form = normalize_answers(questions, body)
    return Question(
        source=source,
        questions=questions,
        answers=form.display,
        answer_items=[item.model_dump() for item in form.items],
        notes=form.notes,
    )


@pytest.mark.parametrize(
    ("result_text", "ok"),
    [
        ("User selected: SQLite, PostgreSQL. User also wrote: DuckDB\nNotes: for tests", True),
        ("User selected: SQLite, PostgreSQL. User also wrote: DuckDB", False),
        ("User selected: SQLite, PostgreSQL. User also wrote: DuckDB too\nNotes: for tests", False),
        ("User selected: SQLite\nNotes: for tests", False),
    ],
)
def test_an_mcp_answer_must_arrive_whole(result_text: str, ok: bool) -> None:
    question = unsaved(QuestionSource.MCP, [0, 1], "DuckDB", "for tests")
    assert question.answers == {"Which database?": "SQLite, PostgreSQL, DuckDB"}
    assert delivery.answer_reached_claude(question, result_text) is ok


@pytest.mark.parametrize(
    ("result_text", "ok"),
    [
        ('Your questions have been answered: "Which database?"="SQLite". You can now continue.', True),
        ('Your questions have been answered: "Which database?"="SQLite, PostgreSQL".', False),
        ("Your questions have been answered: SQLite.", False),
    ],
)
def test_an_sdk_answer_must_arrive_as_its_own_value(result_text: str, ok: bool) -> None:
    question = unsaved(QuestionSource.SDK, [0])
    assert question.answers == {"Which database?": "SQLite"}
    assert delivery.answer_reached_claude(question, result_text) is ok
