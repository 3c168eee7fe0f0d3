"""A run waiting for a person works again once nothing of it is pending, and not before;
a run that is not waiting is left as it is (``askuser.services.resume_if_idle``); an
answer resumes its run after handing itself to the waiting side."""

from __future__ import annotations

from typing import Any

import pytest

from askuser import services
from askuser.models import Question, QuestionSource, QuestionStatus
from core.questions import AnswerIn
from promptmgr.models import Run, RunStatus
from tests.helpers import make_run, open_question, owned_run

pytestmark = pytest.mark.unit


def _status(run: Run) -> str:
    run.refresh_from_db()
    return run.status


def test_a_waiting_run_resumes_once_nothing_of_it_is_pending_and_not_before(alice: Any) -> None:
    run = make_run(owner=alice, status=RunStatus.WAITING_FOR_USER)
    form = [{"question": "Which?", "header": "", "options": [], "multiSelect": False}]
    question = Question.objects.create(
        run=run, source=QuestionSource.MCP, questions=form, expires_at=run.created_at
    )

    assert services.resume_if_idle(run.pk) is False
    assert _status(run) == RunStatus.WAITING_FOR_USER

    Question.objects.filter(pk=question.pk).update(status=QuestionStatus.ANSWERED)

    assert services.resume_if_idle(run.pk) is True
    assert _status(run) == RunStatus.RUNNING


@pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.COMPLETED, RunStatus.CANCELLED])
def test_resuming_a_run_that_is_not_waiting_leaves_it_as_it_is(alice: Any, status: str) -> None:
    run = make_run(owner=alice, status=status)

    assert services.resume_if_idle(run.pk) is False
    assert _status(run) == status


@pytest.mark.asyncio
async def test_an_answer_resumes_its_run_once_the_waiting_side_can_take_it(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice)
    question_id = await open_question(run)
    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.WAITING_FOR_USER

    await services.answer_submit(question_id=question_id, user=alice, body=AnswerIn(selectedOptions=[0]))

    assert (await Run.objects.aget(pk=run.pk)).status == RunStatus.RUNNING
    taken = await services.answer_wait(run_id=run.pk, question_id=question_id, wait_seconds=0)
    assert taken.status == "answered" and taken.answer is not None and taken.answer.answer == "Yes"
