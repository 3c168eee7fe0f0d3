"""A run waiting for a person works again once nothing of it is pending, and not before;
a run that is not waiting is left as it is (``askuser.services.resume_if_idle``)."""

from __future__ import annotations

from typing import Any

import pytest

from askuser import services
from askuser.models import Question, QuestionSource, QuestionStatus
from promptmgr.models import Run, RunStatus
from tests.helpers import make_run

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
