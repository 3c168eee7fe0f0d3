"""Making a card, and deciding or answering it, read the run and project in one query each.

The loads take only the run's and project's columns the code reads
(``askuser.models.RUN_AND_PROJECT_FIELDS``, ``permission_asking.CREATE_RUN_FIELDS``): Django
compiling every column of three joined tables cost more than the query. A field left out
and read after all would cost a query of its own every time; these counts catch it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from askuser import approvals, asking, permission_asking, services
from askuser.models import PermissionRequest, PermissionStatus, Question, QuestionSource
from core.questions import AnswerIn, QuestionSpec
from tests.helpers import BASH_CALL, PROCEED, ask_permission, make_project, make_run, open_question, owned_run

pytestmark = pytest.mark.unit


def statements(queries: CaptureQueriesContext) -> list[str]:
    """The statements' verbs, without the savepoints of a test's own transaction."""
    verbs = [query["sql"].split(" ", 1)[0] for query in queries.captured_queries]
    return [verb for verb in verbs if verb not in ("SAVEPOINT", "RELEASE")]


def columns(sql: str, table: str) -> set[str]:
    """The columns of ``table`` that a SELECT reads."""
    selected = sql.split(" FROM ", 1)[0]
    return set(re.findall(rf'"{table}"\."(\w+)"', selected))


def selects(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in queries.captured_queries if query["sql"].startswith("SELECT")]


def decide(request_id: str, user: Any) -> tuple[list[str], dict[str, Any] | None, str]:
    with CaptureQueriesContext(connection) as queries:
        request = approvals._decide(request_id, user, "allow", "")
        result = approvals.result_for(request)
    return statements(queries), result, selects(queries)[0]


def test_a_tool_calls_card_reads_its_run_once_and_writes_the_card_and_the_runs_state(
    db: Any, alice: Any
) -> None:
    project = make_project(owner=alice, permission_mode="default")
    run = make_run(owner=alice, project=project)

    with CaptureQueriesContext(connection) as queries:
        created = permission_asking._create(
            run.pk, QuestionSource.MCP, "Bash", {"command": "ls"}, "toolu_1", "call-1"
        )

    # The second read is the call's key, so that a call asked again (its card
    # failed with Redis, its relay retried) is the request already stored.
    assert statements(queries) == ["SELECT", "SELECT", "INSERT", "UPDATE"]
    assert (created.timeout, created.again) == (project.ask_user_timeout, False)
    assert created.request.preview == {"type": "bash", "command": "ls", "description": ""}
    [load, calls] = selects(queries)
    assert columns(calls, "askuser_permissionrequest") == {"id", "run_id"}
    assert columns(load, "promptmgr_run") == {"id", "conversation_id", "status", "workdir"}
    assert columns(load, "promptmgr_project") == {
        "id",
        "ask_user_timeout",
        "permission_mode",
    }


def test_a_questions_card_reads_only_its_runs_state_and_the_projects_timeout(db: Any, alice: Any) -> None:
    project = make_project(owner=alice, ask_user_timeout=240)
    run = make_run(owner=alice, project=project)

    with CaptureQueriesContext(connection) as queries:
        created = asking._create_question(
            run.pk, QuestionSource.MCP, [QuestionSpec.model_validate(PROCEED)], None, "call-1"
        )

    assert (created.superseded, created.timeout, created.again) == ([], 240, False)
    [load] = [query["sql"] for query in queries.captured_queries if '"promptmgr_project"' in query["sql"]]
    assert columns(load, "promptmgr_run") == {"id", "conversation_id", "status"}
    assert columns(load, "promptmgr_project") == {"id", "ask_user_timeout"}
    # The run; its questions, the ones it would supersede (none: no UPDATE of them) and the
    # ones its call may have asked before, in one read; the card; the run's status.
    assert statements(queries) == ["SELECT", "SELECT", "INSERT", "UPDATE"]


def test_a_new_question_supersedes_the_runs_pending_one_with_one_update(db: Any, alice: Any) -> None:
    run = make_run(owner=alice, project=make_project(owner=alice))
    spec = [QuestionSpec.model_validate(PROCEED)]
    older = asking._create_question(run.pk, QuestionSource.MCP, spec, None, "call-1").question

    with CaptureQueriesContext(connection) as queries:
        created = asking._create_question(run.pk, QuestionSource.MCP, spec, None, "call-2")

    assert created.superseded == [str(older.question_id)]
    # The card, then the supersede naming it; the run waits already: its status move
    # changes nothing and reads why (the last SELECT).
    assert statements(queries) == ["SELECT", "SELECT", "INSERT", "UPDATE", "UPDATE", "SELECT"]
    replaced = Question.objects.get(pk=older.pk)
    assert (replaced.status, replaced.superseded_by_id) == ("superseded", created.question.pk)
    assert Question.objects.get(pk=created.question.pk).status == "pending"


def test_a_call_asked_again_reads_its_question_and_writes_nothing(db: Any, alice: Any) -> None:
    project = make_project(owner=alice, ask_user_timeout=240)
    run = make_run(owner=alice, project=project)
    spec = [QuestionSpec.model_validate(PROCEED)]
    first = asking._create_question(run.pk, QuestionSource.MCP, spec, None, "call-1").question
    project.ask_user_timeout = 600
    project.save(update_fields=["ask_user_timeout"])

    with CaptureQueriesContext(connection) as queries:
        again = asking._create_question(run.pk, QuestionSource.MCP, spec, None, "call-1")

    assert again.again and again.question.question_id == first.question_id and again.superseded == []
    # The run, its questions; the call's question and the ones it replaced (none).
    assert statements(queries) == ["SELECT", "SELECT", "SELECT", "SELECT"]
    # The timeout it was asked with, not the project's now.
    assert (again.timeout, Question.objects.filter(run=run).count()) == (240, 1)


@pytest.mark.asyncio
async def test_an_owners_decision_is_one_read_and_one_write(transactional_db: Any, alice: Any) -> None:
    run = await owned_run(alice)
    request_id = await ask_permission(run)

    done, result, load = await sync_to_async(decide)(request_id, alice)

    assert done == ["SELECT", "UPDATE"]
    assert result == {"behavior": "allow", "updatedInput": BASH_CALL}
    # Only what the checks read of the joined rows, not their every column.
    assert columns(load, "promptmgr_run") == {"id", "conversation_id", "user_id", "status", "created_at"}
    assert columns(load, "promptmgr_project") == {"id", "owner_id", "ask_user_timeout"}


@pytest.mark.asyncio
async def test_a_members_decision_adds_only_the_membership_check(
    transactional_db: Any, alice: Any, bob: Any
) -> None:
    run = await owned_run(alice, members=(bob,))
    request_id = await ask_permission(run)

    done, _result, _load = await sync_to_async(decide)(request_id, bob)

    assert done == ["SELECT", "SELECT", "UPDATE"]


@pytest.mark.asyncio
async def test_an_expired_requests_wording_reads_the_timeout_it_loaded(
    transactional_db: Any, alice: Any
) -> None:
    run = await owned_run(alice, ask_user_timeout=240)
    request_id = await ask_permission(run)
    await PermissionRequest.objects.filter(request_id=request_id).aupdate(status=PermissionStatus.EXPIRED)

    def load_and_word() -> tuple[list[str], dict[str, Any] | None]:
        with CaptureQueriesContext(connection) as queries:
            request = approvals._load_for_run(run.pk, request_id)
            assert request is not None
            result = approvals.result_for(request)
        return statements(queries), result

    done, result = await sync_to_async(load_and_word)()

    assert done == ["SELECT"]
    assert result is not None and result["behavior"] == "deny"
    assert "within 240 seconds" in result["message"]


@pytest.mark.asyncio
async def test_an_answer_is_checked_with_one_read(transactional_db: Any, alice: Any) -> None:
    question_id = await open_question(await owned_run(alice))

    def prepare() -> tuple[list[str], Question]:
        with CaptureQueriesContext(connection) as queries:
            question, _form = services._prepare_answer(
                question_id, alice, AnswerIn.model_validate({"selectedOptions": [0]})
            )
        return statements(queries), question

    done, question = await sync_to_async(prepare)()

    assert done == ["SELECT"]
    assert question.run.conversation.project.owner_id == alice.pk
