"""The one writer of Run.status: the moves the table allows, and an error for the others."""

from __future__ import annotations

from typing import Any

import pytest

from promptmgr.models import Run, RunStatus
from promptmgr.services import run_state
from promptmgr.services.run_state import IllegalTransition, Outcome
from tests.helpers import make_run

pytestmark = pytest.mark.unit


@pytest.fixture
def run(alice: Any) -> Run:
    made: Run = make_run(owner=alice, status=RunStatus.QUEUED)
    return made


def _status(run: Run) -> str:
    run.refresh_from_db()
    return run.status


def test_a_run_goes_queued_running_waiting_running_completed(run: Run) -> None:
    assert run_state.run_mark_started(run.pk)
    assert _status(run) == RunStatus.RUNNING and run.started_at is not None
    assert run_state.run_wait_for_user(run.pk)
    assert _status(run) == RunStatus.WAITING_FOR_USER
    assert run_state.run_resume(run.pk)
    assert _status(run) == RunStatus.RUNNING
    result = {"cost_usd": 0.5, "usage": {"input_tokens": 3}, "duration_ms": 7, "num_turns": 1}
    assert run_state.run_finish(run.pk, Outcome(status=RunStatus.COMPLETED, exit_code=0, result=result))
    run.refresh_from_db()
    assert (run.status, run.exit_code, run.duration_ms, run.num_turns) == (RunStatus.COMPLETED, 0, 7, 1)
    assert run.ended_at is not None and str(run.cost_usd) == "0.500000"


def test_asking_again_while_waiting_changes_nothing(run: Run) -> None:
    run_state.run_mark_started(run.pk)
    run_state.run_wait_for_user(run.pk)
    assert run_state.run_wait_for_user(run.pk) is False
    assert _status(run) == RunStatus.WAITING_FOR_USER


def test_a_run_cannot_be_finished_twice(run: Run) -> None:
    run_state.run_finish(run.pk, Outcome(status=RunStatus.CANCELLED, error="Cancelled by the user."))
    with pytest.raises(IllegalTransition):
        run_state.run_finish(run.pk, Outcome(status=RunStatus.FAILED, error="late"))
    run.refresh_from_db()
    assert (run.status, run.error) == (RunStatus.CANCELLED, "Cancelled by the user.")


@pytest.mark.parametrize(
    ("status", "move"),
    [
        (RunStatus.COMPLETED, run_state.run_resume),
        (RunStatus.FAILED, run_state.run_wait_for_user),
        (RunStatus.CANCELLED, run_state.run_mark_started),
        (RunStatus.QUEUED, run_state.run_resume),
    ],
)
def test_a_move_the_table_does_not_allow_raises_and_writes_nothing(
    alice: Any, status: str, move: Any
) -> None:
    run = make_run(owner=alice, status=status)
    with pytest.raises(IllegalTransition):
        move(run.pk)
    assert _status(run) == status


def test_finishing_needs_an_ending_status(run: Run) -> None:
    with pytest.raises(IllegalTransition):
        run_state.run_finish(run.pk, Outcome(status=RunStatus.RUNNING))


def test_stderr_is_kept_apart_from_the_error(run: Run) -> None:
    run_state.run_finish(run.pk, Outcome(status=RunStatus.FAILED, error="exited with code 3", stderr="oops"))
    run.refresh_from_db()
    assert (run.error, run.stderr_tail) == ("exited with code 3", "oops")


def test_a_nul_in_stderr_or_the_error_is_kept_as_a_replacement_character(run: Run) -> None:
    # PostgreSQL refuses NUL in text; the CLI's stderr may hold one.
    run_state.run_finish(run.pk, Outcome(status=RunStatus.FAILED, error="bad\x00byte", stderr="a\x00b"))
    run.refresh_from_db()
    assert (run.error, run.stderr_tail) == ("bad\ufffdbyte", "a\ufffdb")


def test_every_status_has_a_row_in_the_table() -> None:
    assert set(run_state.TRANSITIONS) == set(RunStatus.values)


def _card(kind: str, run: Run, status: str) -> None:
    """A question or a permission request of ``run`` in ``status``."""
    from askuser.models import PermissionRequest, Question, QuestionSource

    if kind == "question":
        Question.objects.create(
            run=run, source=QuestionSource.MCP, questions=[], expires_at=run.created_at, status=status
        )
    else:
        PermissionRequest.objects.create(
            run=run,
            source=QuestionSource.MCP,
            tool_name="Bash",
            tool_use_id=f"toolu_{kind}_{status}",
            expires_at=run.created_at,
            status=status,
        )


@pytest.mark.parametrize("kind", ["question", "permission"])
def test_a_pending_card_of_the_run_holds_its_resume_and_a_closed_one_or_another_runs_does_not(
    alice: Any, kind: str
) -> None:
    from askuser.services import PENDING_CARDS

    waiting = make_run(owner=alice, status=RunStatus.WAITING_FOR_USER)
    other = make_run(owner=alice, status=RunStatus.WAITING_FOR_USER)
    _card(kind, waiting, "pending")
    _card(kind, other, "answered" if kind == "question" else "allowed")

    assert run_state.run_resume(waiting.pk, unless=PENDING_CARDS) is False
    assert _status(waiting) == RunStatus.WAITING_FOR_USER
    # The other run has only a closed card, and this run's pending one does not hold it.
    assert run_state.run_resume(other.pk, unless=PENDING_CARDS) is True
    assert _status(other) == RunStatus.RUNNING
    # Resumed already: asked again, nothing changes and nothing is raised.
    assert run_state.run_resume(other.pk, unless=PENDING_CARDS) is False


def test_resuming_an_ended_run_with_pending_cards_in_the_way_raises_and_writes_nothing(alice: Any) -> None:
    from askuser.services import PENDING_CARDS

    ended = make_run(owner=alice, status=RunStatus.COMPLETED)
    _card("question", ended, "pending")

    with pytest.raises(IllegalTransition):
        run_state.run_resume(ended.pk, unless=PENDING_CARDS)
    assert _status(ended) == RunStatus.COMPLETED
