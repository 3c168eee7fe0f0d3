"""The policy's answers in the question store: applied first-wins, overridden until Claude takes
them, checked on delivery like a person's. Real Redis and database; no CLI (the waiting side's
long-poll is ``services.answer_wait``, called as poll-answer calls it).
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from askuser import asking, delivery, policy, services
from askuser.models import PolicyAnswer, Question, QuestionSource, QuestionStatus
from core import events
from core.errors import Conflict
from core.questions import AnswerIn, QuestionSpec
from promptmgr import live as promptmgr_live
from promptmgr.runner import WORKER_ID
from tests.helpers import make_project, make_run

pytestmark = pytest.mark.unit

QUESTION = {
    "question": "Which database?",
    "header": "DB",
    "options": [{"label": "SQLite", "description": ""}, {"label": "Postgres", "description": ""}],
    "multiSelect": False,
}


async def ask(alice: Any, bob: Any) -> tuple[Any, str, PolicyAnswer]:
    """A pending question and the policy's (not yet applied) answer to it: Postgres."""
    project = await sync_to_async(make_project)(owner=alice, members=(bob,), sync=False)
    run = await sync_to_async(make_run)(owner=alice, project=project)
    # Owned by this process, as a run supervised here is: an answer to an unowned run fails it.
    await promptmgr_live.set_owner(run.pk, WORKER_ID, ttl=60)
    card = await asking.question_create(
        run_id=run.pk,
        source=QuestionSource.MCP,
        questions=[QuestionSpec.model_validate(QUESTION)],
        timeout=300,
    )
    question = await Question.objects.aget(question_id=card["question_id"])
    answer = await PolicyAnswer.objects.acreate(
        run=run,
        question=question,
        mode="auto",
        decision="answer",
        answers={"Which database?": "Postgres"},
        answer_body={"answers": {"Which database?": {"selected": [1], "other": ""}}},
        reasoning="The team always uses Postgres.",
        outcome="waiting",
    )
    return run, card["question_id"], answer


async def answered_by_the_policy(alice: Any, bob: Any) -> tuple[Any, str, PolicyAnswer]:
    """``ask``, and the policy's answer applied: handed over, not yet taken by Claude."""
    run, question_id, answer = await ask(alice, bob)
    assert await policy.question_answer_apply(policy_id=answer.pk)
    return run, question_id, answer


@pytest.mark.asyncio
async def test_a_member_overrides_the_policys_answer_until_claude_takes_it(
    transactional_db: Any, alice: Any, bob: Any
) -> None:
    run, question_id, answer = await answered_by_the_policy(alice, bob)

    replaced = await services.answer_submit(
        question_id=question_id, user=bob, body=AnswerIn(answer="", selectedOptions=[0])
    )
    assert (replaced["answered_by"], replaced["overrides_policy"]) == ("bob", True)
    # The waiting side takes bob's answer, not the policy's.
    taken = await services.answer_wait(run_id=run.pk, question_id=question_id, wait_seconds=1)
    assert taken.answer is not None and taken.answer.answers == {"Which database?": "SQLite"}
    question = await Question.objects.aget(question_id=question_id)
    assert (question.answered_by_policy, question.answers) == (False, {"Which database?": "SQLite"})
    await answer.arefresh_from_db()
    assert (answer.outcome, answer.overridden_by_id) == ("overridden", bob.pk)

    with pytest.raises(Conflict) as again:
        await services.answer_submit(
            question_id=question_id, user=alice, body=AnswerIn.model_validate({"answer": "Postgres"})
        )
    assert again.value.code == "already_answered"
    names = [e.event for e in await events.read_events(run.pk, 0)]
    assert names.count("ask_user_answered") == 2


@pytest.mark.asyncio
async def test_an_override_is_on_every_page_before_claude_can_take_it_and_the_database_follows(
    transactional_db: Any, alice: Any, bob: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, question_id, _answer = await answered_by_the_policy(alice, bob)
    at_the_database_write: dict[str, Any] = {}
    record = policy._record_override

    def look_then_record(*args: Any) -> None:
        # By now Claude's waiting side can take bob's answer: the page must know of it.
        answered = [e.data for e in events.read_all_events_sync(run.pk) if e.event == "ask_user_answered"]
        at_the_database_write["answered"] = answered
        record(*args)

    monkeypatch.setattr(policy, "_record_override", look_then_record)
    replaced = await services.answer_submit(
        question_id=question_id, user=bob, body=AnswerIn(answer="", selectedOptions=[0])
    )

    *_policys, overriding = at_the_database_write["answered"]
    assert overriding == replaced
    assert (overriding["answered_by"], overriding["answers"]) == ("bob", {"Which database?": "SQLite"})
    question = await Question.objects.aget(question_id=question_id)
    assert question.answered_at is not None
    assert question.answered_at.isoformat() == overriding["answered_at"]


@pytest.mark.asyncio
async def test_a_refused_override_leaves_nothing_on_the_page(
    transactional_db: Any, alice: Any, bob: Any
) -> None:
    run, question_id, _answer = await answered_by_the_policy(alice, bob)
    await services.answer_wait(run_id=run.pk, question_id=question_id, wait_seconds=1)
    before = await events.read_events(run.pk, 0)

    with pytest.raises(Conflict):
        await services.answer_submit(
            question_id=question_id, user=bob, body=AnswerIn.model_validate({"answer": "SQLite"})
        )

    assert await events.read_events(run.pk, 0) == before


@pytest.mark.asyncio
async def test_once_claude_took_the_policys_answer_an_override_is_refused_with_409(
    transactional_db: Any, alice: Any, bob: Any
) -> None:
    run, question_id, _answer = await answered_by_the_policy(alice, bob)
    taken = await services.answer_wait(run_id=run.pk, question_id=question_id, wait_seconds=1)
    assert taken.answer is not None and taken.answer.answers == {"Which database?": "Postgres"}

    with pytest.raises(Conflict) as refused:
        await services.answer_submit(
            question_id=question_id, user=bob, body=AnswerIn.model_validate({"answer": "SQLite"})
        )
    assert (refused.value.code, refused.value.detail) == ("already_taken", policy.MSG_POLICY_TAKEN)
    question = await Question.objects.aget(question_id=question_id)
    assert question.answered_by_policy is True


@pytest.mark.asyncio
async def test_a_person_who_answers_first_wins_over_the_auto_policy(
    transactional_db: Any, alice: Any, bob: Any
) -> None:
    _run, question_id, answer = await ask(alice, bob)
    await services.answer_submit(
        question_id=question_id, user=bob, body=AnswerIn.model_validate({"answer": "SQLite"})
    )

    assert await policy.question_answer_apply(policy_id=answer.pk) is False
    await answer.arefresh_from_db()
    assert answer.outcome == "person_first"
    question = await Question.objects.aget(question_id=question_id)
    assert (question.answered_by_id, question.answers) == (bob.pk, {"Which database?": "SQLite"})


@pytest.mark.asyncio
async def test_a_policy_answer_that_reaches_claude_altered_is_flagged(
    transactional_db: Any, alice: Any, bob: Any
) -> None:
    run, question_id, answer = await ask(alice, bob)
    await policy.question_answer_apply(policy_id=answer.pk)

    await delivery.question_result_seen(run_id=run.pk, result={"content": "User selected: SQLite"})

    question = await Question.objects.aget(question_id=question_id)
    assert question.status == QuestionStatus.ANSWERED
    assert question.delivery_mismatch == "User selected: SQLite"
    [verdict] = [e.data for e in await events.read_events(run.pk, 0) if e.event == "ask_user_delivered"]
    assert (verdict["question_id"], verdict["ok"]) == (question_id, False)


def test_credentials_and_destructive_choices_are_reserved_for_people() -> None:
    assert policy.reserved_for_question([{"question": "Which API key should I use?"}]) == "credentials"
    assert policy.reserved_for_question([{"question": "Paste the database password"}]) == "credentials"
    reset = [
        {"question": "How should I clean up?", "options": [{"label": "git reset --hard", "description": ""}]}
    ]
    assert policy.reserved_for_question(reset) == "destructive"
    assert policy.reserved_for_question([{"question": "Drop the users table?"}]) == "destructive"
    assert policy.reserved_for_question([{"question": "Which dropdown style?"}]) == ""
    assert policy.reserved_for_question([QUESTION]) == ""
