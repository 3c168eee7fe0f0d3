"""core.prepared: a lookup compiled once gives what Django's own ``get`` gives.

Against the test database (SQLite, and PostgreSQL in ``make test-postgres``), through the
card loads the answer and decision paths use: the same field values, the same related
objects loaded with them (one query in all), ``DoesNotExist`` for an unknown key, and the
same results from another thread (the compiled query is kept per thread). ``PreparedRows``
gives the rows Django's ``values_list`` gives. ``PreparedUpdate`` leaves a row as Django's
``filter(...).update(...)`` leaves its twin, and claims only a row its filter matches.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from askuser.models import (
    PermissionRequest,
    Question,
    QuestionSource,
    answer_claim,
    decision_claim,
    question_for_answer,
)
from askuser.services import pending_question_ids
from core.prepared import PreparedGet, PreparedUpdate
from tests.helpers import make_run

pytestmark = pytest.mark.unit

FORM = [{"question": "Which way?", "header": "Way", "options": [{"label": "Left"}], "multiSelect": False}]
RELATED = ("run__status", "run__user_id", "run__conversation__project__owner_id")


def make_question(owner: Any) -> Question:
    run = make_run(owner=owner)
    return Question.objects.create(
        run=run,
        source=QuestionSource.MCP,
        questions=FORM,
        answers={"Which way?": "Left"},
        expires_at=timezone.now() + timedelta(minutes=5),
    )


def related(question: Question) -> tuple[Any, ...]:
    project = question.run.conversation.project
    return (question.run.status, question.run.user_id, project.owner_id, project.ask_user_timeout)


def own_fields(question: Question) -> dict[str, Any]:
    return {field.attname: getattr(question, field.attname) for field in Question._meta.concrete_fields}


def test_it_loads_what_djangos_get_loads_with_its_related_rows_in_one_query(alice: Any) -> None:
    question = make_question(alice)
    theirs = Question.objects.with_run_and_project().get(question_id=question.question_id)

    with CaptureQueriesContext(connection) as queries:
        ours = question_for_answer.get(str(question.question_id))
        ours_related = related(ours)

    assert len(queries.captured_queries) == 1
    assert own_fields(ours) == own_fields(theirs)
    assert ours.questions == FORM  # JSON came back through the field's own converter
    assert ours_related == related(theirs)
    assert ours._state.adding is False and ours._state.db == theirs._state.db


def test_each_call_reads_the_row_as_it_is_now(alice: Any) -> None:
    question = make_question(alice)
    question_for_answer.get(question.question_id)

    Question.objects.filter(pk=question.pk).update(status="answered")

    assert question_for_answer.get(question.question_id).status == "answered"


def test_an_unknown_key_raises_does_not_exist(alice: Any) -> None:
    make_question(alice)

    with pytest.raises(Question.DoesNotExist):
        question_for_answer.get(uuid.uuid4())


def test_another_thread_compiles_its_own_and_loads_the_same(transactional_db: Any, alice: Any) -> None:
    question = make_question(alice)
    here = question_for_answer.get(question.question_id)
    there: list[Any] = []

    def load() -> None:
        try:
            there.append(question_for_answer.get(question.question_id))
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=load)
    thread.start()
    thread.join()

    assert len(there) == 1
    assert own_fields(there[0]) == own_fields(here)
    assert related(there[0]) == related(here)


def test_a_placeholder_that_is_not_one_parameter_of_the_query_is_refused(db: Any) -> None:
    # The key equals another parameter: its place in the SQL cannot be told.
    same = uuid.UUID(int=7)
    prepared = PreparedGet(
        lambda: Question.objects.exclude(question_id=same), "question_id", placeholder=same
    )

    with pytest.raises(ValueError, match="placeholder"):
        prepared.get(uuid.uuid4())


def test_prepared_rows_are_the_rows_djangos_values_list_gives(alice: Any) -> None:
    first, second = make_question(alice), make_question(alice)
    Question.objects.filter(pk=second.pk).update(run=first.run)
    make_question(alice)  # another run's pending question
    theirs = set(Question.objects.filter(run=first.run).pending().values_list("question_id"))

    with CaptureQueriesContext(connection) as queries:
        ours = pending_question_ids.rows(first.run_id)

    assert len(queries.captured_queries) == 1
    assert set(ours) == theirs == {(first.question_id,), (second.question_id,)}
    assert all(isinstance(question_id, uuid.UUID) for (question_id,) in ours)  # the field's converter ran


def test_prepared_rows_read_the_rows_as_they_are_now(alice: Any) -> None:
    question = make_question(alice)
    assert pending_question_ids.rows(question.run_id) == [(question.question_id,)]

    Question.objects.filter(pk=question.pk).update(status="superseded")

    assert pending_question_ids.rows(question.run_id) == []


def answered(by: Any, text: str = "Left") -> dict[str, Any]:
    return {
        "status": "answered",
        "answers": {"Which way?": text},
        "answer_items": [{"question": "Which way?", "selected": [0], "labels": [text], "other": None}],
        "notes": "a note",
        "answered_by": by,
        "answered_at": timezone.now(),
    }


def test_an_update_leaves_the_row_as_djangos_update_leaves_its_twin(alice: Any) -> None:
    ours, theirs = make_question(alice), make_question(alice)
    values = answered(alice, text="Léft")
    now = timezone.now()

    with CaptureQueriesContext(connection) as queries:
        count = answer_claim.update(values, ours.pk, "pending", now)
    Question.objects.filter(pk=theirs.pk, status="pending", expires_at__gt=now).update(**values)

    assert count == 1
    assert len(queries.captured_queries) == 1
    ours.refresh_from_db()
    theirs.refresh_from_db()
    skip = {"id", "question_id", "run_id", "created_at", "expires_at"}  # the twins' own
    assert {k: v for k, v in own_fields(ours).items() if k not in skip} == {
        k: v for k, v in own_fields(theirs).items() if k not in skip
    }
    assert ours.answers == {"Which way?": "Léft"}  # through the JSON field and back
    assert ours.answered_by_id == alice.pk


def test_a_decision_update_leaves_the_row_as_djangos_update_leaves_its_twin(alice: Any) -> None:
    run = make_run(owner=alice)

    def request() -> PermissionRequest:
        return PermissionRequest.objects.create(
            run=run, source="mcp", tool_name="Bash", expires_at=timezone.now() + timedelta(minutes=5)
        )

    ours, theirs = request(), request()
    values = {
        "status": "denied",
        "decision": "deny",
        "rule": "",
        "message": "Not that one.",
        "decided_by": alice,
        "decided_at": timezone.now(),
    }
    now = timezone.now()

    assert decision_claim.update(values, ours.pk, "pending", now) == 1
    PermissionRequest.objects.filter(pk=theirs.pk, status="pending", expires_at__gt=now).update(**values)

    fields = ("status", "decision", "rule", "message", "decided_by_id", "decided_at")
    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert [getattr(ours, name) for name in fields] == [getattr(theirs, name) for name in fields]


def test_an_update_claims_only_a_row_its_filter_matches(alice: Any) -> None:
    question = make_question(alice)
    first = answered(alice, text="Left")

    assert answer_claim.update(first, question.pk, "pending", timezone.now()) == 1
    # Answered now: a second answer finds nothing pending and changes nothing.
    assert answer_claim.update(answered(alice, text="Right"), question.pk, "pending", timezone.now()) == 0
    question.refresh_from_db()
    assert question.answers == {"Which way?": "Left"}

    expired = make_question(alice)
    later = expired.expires_at + timedelta(seconds=1)
    assert answer_claim.update(answered(alice), expired.pk, "pending", later) == 0
    expired.refresh_from_db()
    assert expired.status == "pending"


def test_an_update_refuses_what_it_cannot_write_as_plain_sql(db: Any) -> None:
    with pytest.raises(ValueError, match="not a column"):
        PreparedUpdate(Question, ("policy_answers",), (("pk", "="),))  # a reverse relation
    with pytest.raises(ValueError, match="comparisons"):
        PreparedUpdate(Question, ("status",), (("pk", "LIKE"),))
