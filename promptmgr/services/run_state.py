"""The one writer of ``Run.status``: every change of a run's state goes through here.

The allowed moves are one table (``TRANSITIONS``). Each move is a compare-and-set on the
database row, so two writers racing (the owning worker finishing a run, the sweep failing
it) cannot both win. A move the table forbids raises ``IllegalTransition``; a caller for
whom a lost race is normal says so by catching it.

askuser reaches run state only through this module (``run_wait_for_user``, ``run_resume``).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connection, models
from django.utils import timezone

from promptmgr.models import ACTIVE_RUN_STATUSES, Run, RunStatus

TERMINAL_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)

TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, *TERMINAL_STATUSES}),
    RunStatus.RUNNING: frozenset({RunStatus.WAITING_FOR_USER, *TERMINAL_STATUSES}),
    RunStatus.WAITING_FOR_USER: frozenset({RunStatus.RUNNING, *TERMINAL_STATUSES}),
    **{status: frozenset() for status in TERMINAL_STATUSES},
}

MAX_ERROR_CHARS = 20_000
MAX_STDERR_CHARS = 20_000


class IllegalTransition(Exception):
    """A move the table does not allow, e.g. resuming a run that already ended."""

    def __init__(self, run_id: int, current: str | None, target: str) -> None:
        super().__init__(f"run {run_id}: {current or 'missing'} → {target} is not allowed")
        self.run_id = run_id
        self.current = current
        self.target = target


@dataclass(frozen=True)
class Pending:
    """Rows of ``model`` (a model with a ``run`` foreign key and a ``status`` field) in
    ``status``: while the run has one, it keeps waiting for a person."""

    model: type[models.Model]
    status: str


def _move(run_id: int, target: str, *, sources: Collection[str], **fields: Any) -> bool:
    """Move the run from one of ``sources`` to ``target``; False when it is there already.

    Raises IllegalTransition when the run is in a state the move cannot start from.
    """
    _check_moves(run_id, target, sources)
    if Run.objects.filter(pk=run_id, status__in=list(sources)).update(status=target, **fields):
        return True
    return _not_moved(run_id, target, sources, held=False)


def _check_moves(run_id: int, target: str, sources: Collection[str]) -> None:
    for source in sources:
        if target not in TRANSITIONS[source]:
            raise IllegalTransition(run_id, source, target)


def _not_moved(run_id: int, target: str, sources: Collection[str], *, held: bool) -> bool:
    """After a move's statement changed nothing: False when that is normal, else raises."""
    current = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if current == target and target not in TERMINAL_STATUSES:
        return False  # asked twice (a second question while waiting, a resume after a resume)
    if held and current in sources:
        return False  # a pending row still holds it there
    raise IllegalTransition(run_id, current, target)


def _column(model: type[models.Model], name: str) -> str:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.column:
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field.column


@functools.lru_cache(maxsize=8)
def _move_statement(unless: tuple[Pending, ...], vendor: str) -> str:
    """A move from one status to another as one UPDATE, with a NOT EXISTS per kind of
    pending row in ``unless``, in plain SQL.

    Why not the ORM: every card, answer and decision moves its run. Django compiled the
    resume (two ``~Exists``) in about 1 ms each time, against 0.05 ms for the statement
    itself, and the whole move to waiting took 0.17 ms against 0.02 made once (a test's
    SQLite). ``tests/promptmgr/test_run_state.py`` holds the resume to the ORM's meaning.
    Names come from the models' metadata, values are parameters; the text depends only on
    ``unless`` and the database (``vendor``), so it is made once.
    """
    del vendor  # part of the cache key: the quoting below is the connection's
    quote = connection.ops.quote_name
    run_table = quote(Run._meta.db_table)
    run_pk, status = quote(_column(Run, "id")), quote(_column(Run, "status"))
    held = [
        f"NOT EXISTS (SELECT 1 FROM {quote(p.model._meta.db_table)} AS held "
        f"WHERE held.{quote(_column(p.model, 'run'))} = {run_table}.{run_pk} "
        f"AND held.{quote(_column(p.model, 'status'))} = %s)"
        for p in unless
    ]
    where = " AND ".join([f"{run_table}.{run_pk} = %s", f"{run_table}.{status} = %s", *held])
    return f"UPDATE {run_table} SET {status} = %s WHERE {where}"


def run_mark_started(run_id: int) -> bool:
    """The owning worker starts the turn."""
    return _move(run_id, RunStatus.RUNNING, sources=[RunStatus.QUEUED], started_at=timezone.now())


def run_wait_for_user(run_id: int) -> bool:
    """A question or a permission request is waiting for a person."""
    return _move_from(run_id, RunStatus.WAITING_FOR_USER, source=RunStatus.RUNNING)


def run_resume(run_id: int, *, unless: Sequence[Pending] = ()) -> bool:
    """The person answered (or the question expired): Claude works again, unless the run
    still has a row of ``unless`` (its pending questions and permission requests).

    One statement: nothing shown between a look and the move can be missed."""
    return _move_from(run_id, RunStatus.RUNNING, source=RunStatus.WAITING_FOR_USER, unless=unless)


def _move_from(run_id: int, target: str, *, source: str, unless: Sequence[Pending] = ()) -> bool:
    """``_move`` from one ``source``, with no other fields, as a statement made once
    (``_move_statement``); a pending row of ``unless`` holds the run where it is."""
    _check_moves(run_id, target, [source])
    statement = _move_statement(tuple(unless), connection.vendor)
    with connection.cursor() as cursor:
        # Plain strings: a driver need not know Django's choices (str() gives their value).
        values: list[int | str] = [str(target), run_id, str(source), *(str(p.status) for p in unless)]
        cursor.execute(statement, values)
        if cursor.rowcount:
            return True
    return _not_moved(run_id, target, [source], held=bool(unless))


@dataclass
class Outcome:
    """How a run ended, as the supervisor (or the sweep) records it."""

    status: str
    error: str = ""
    stderr: str = ""
    exit_code: int | None = None
    result: dict[str, Any] | None = None


def run_fail_if_orphaned(run: Run) -> bool:
    """Fail the run now if the worker that owns it is gone (``promptmgr.recovery``);
    True when it did. For askuser, which must not act for a dead run; it passes the run it
    loaded with the question, so the check costs no query of its own."""
    from promptmgr.recovery import run_recover_if_orphaned

    return run_recover_if_orphaned(run)


def run_finish(run_id: int, outcome: Outcome, *, expected: str | None = None) -> bool:
    """Record the run's ending; raises IllegalTransition when it had ended already, or,
    with ``expected``, when it is no longer in the state its caller judged it in."""
    if outcome.status not in TERMINAL_STATUSES:
        raise IllegalTransition(run_id, None, outcome.status)
    result = outcome.result or {}
    cost = result.get("cost_usd")
    return _move(
        run_id,
        outcome.status,
        sources=ACTIVE_RUN_STATUSES if expected is None else [expected],
        ended_at=timezone.now(),
        exit_code=outcome.exit_code,
        # A NUL in either is stored as U+FFFD (their fields: core.storable).
        error=outcome.error[:MAX_ERROR_CHARS],
        stderr_tail=outcome.stderr[-MAX_STDERR_CHARS:],
        cost_usd=Decimal(str(cost)) if isinstance(cost, int | float) else None,
        usage=result.get("usage") or {},
        duration_ms=result.get("duration_ms"),
        num_turns=result.get("num_turns"),
    )
