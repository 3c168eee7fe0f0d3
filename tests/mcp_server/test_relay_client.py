"""The relay HTTP client against a real HTTP server on 127.0.0.1 (``FakeRelay``)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from core.questions import Handoff, Option, QuestionSpec
from mcp_server.errors import (
    QuestionCancelled,
    QuestionExpired,
    QuestionSuperseded,
    RelayAuthRejected,
    RelayUnavailable,
    RequestRejected,
    RunFinished,
)
from mcp_server.relay import RelayedQuestion, relay_question, wait_for_answer
from mcp_server.relay_http import default_client, shared_client
from tests.mcp_server.fake_relay import (
    QUESTION_ID,
    RELAY_TOKEN,
    FakeRelay,
    Reply,
    answered,
    free_port,
    make_config,
    relayed,
    waiting,
)

pytestmark = pytest.mark.unit

QUESTION = QuestionSpec(
    question="Which database should the service use?",
    header="Database",
    options=[Option(label="Postgres", description="Already used in staging"), Option(label="SQLite")],
)


async def ask(relay: FakeRelay, *, grace: float = 0.0) -> Handoff:
    """Relay QUESTION and wait for its answer, as the tool does."""
    config = make_config(relay.url)
    async with default_client() as client:
        question = await relay_question(client, config, QUESTION)
        return await wait_for_answer(client, config, question, grace=grace)


@pytest.mark.asyncio
async def test_the_answer_arrives_after_a_few_waiting_polls(relay: FakeRelay) -> None:
    relay.poll_replies = [waiting(), waiting(0.2), waiting(), answered(["Postgres"], notes="staging")]

    answer = await ask(relay)

    assert answer == Handoff(
        answer="Postgres", selectedOptions=[0], selectedLabels=["Postgres"], notes="staging"
    )
    assert len(relay.requests_to("/poll-answer")) == 4


@pytest.mark.asyncio
async def test_the_question_is_posted_in_the_contract_shape(relay: FakeRelay) -> None:
    relay.poll_replies = [answered(["SQLite"])]

    await ask(relay)

    [post] = relay.requests_to("/relay-question")
    assert post.method == "POST"
    assert post.json() == {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [
            {"label": "Postgres", "description": "Already used in staging"},
            {"label": "SQLite", "description": ""},
        ],
        "multiSelect": False,
    }
    [poll] = relay.requests_to("/poll-answer")
    assert poll.query == {"question_id": QUESTION_ID}


@pytest.mark.asyncio
async def test_the_token_travels_only_in_the_authorization_header(
    relay: FakeRelay, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    relay.poll_replies = [waiting(), Reply(503), answered(["Postgres"])]

    await ask(relay)

    assert len(relay.received) == 4
    for request in relay.received:
        assert request.headers["authorization"] == f"Bearer {RELAY_TOKEN}"
        assert RELAY_TOKEN not in request.url
        assert RELAY_TOKEN.encode() not in request.body
    assert caplog.records, "expected httpx and retry log lines to check"
    assert RELAY_TOKEN not in caplog.text


@pytest.mark.asyncio
async def test_a_410_expired_ends_the_wait_with_the_relay_timeout(relay: FakeRelay) -> None:
    relay.question_replies = [relayed(timeout=120)]
    relay.poll_replies = [waiting(), Reply(410, {"status": "expired", "detail": "No answer in time."})]

    with pytest.raises(QuestionExpired) as caught:
        await ask(relay)

    assert caught.value.timeout == 120


@pytest.mark.asyncio
async def test_a_410_cancelled_ends_the_wait_as_cancelled(relay: FakeRelay) -> None:
    relay.poll_replies = [Reply(410, {"status": "cancelled", "detail": "The run was cancelled."})]

    with pytest.raises(QuestionCancelled):
        await ask(relay)


@pytest.mark.asyncio
async def test_a_410_superseded_ends_the_wait_as_superseded_not_as_a_timeout(relay: FakeRelay) -> None:
    relay.poll_replies = [waiting(), Reply(410, {"status": "superseded", "detail": "Replaced."})]

    with pytest.raises(QuestionSuperseded):
        await ask(relay)

    assert len(relay.requests_to("/poll-answer")) == 2


@pytest.mark.asyncio
async def test_a_refused_connection_is_retried_until_the_relay_comes_back() -> None:
    relay = FakeRelay(poll_replies=[answered(["SQLite"])])
    relay.port = free_port()

    async def start_late() -> None:
        await asyncio.sleep(0.7)
        await asyncio.to_thread(relay.start, relay.port)

    starter = asyncio.create_task(start_late())
    try:
        answer = await ask(relay)
    finally:
        await starter
        relay.stop()

    assert answer.selectedLabels == ["SQLite"]
    assert len(relay.requests_to("/relay-question")) == 1


@pytest.mark.asyncio
async def test_poll_failures_are_retried_until_the_answer(relay: FakeRelay) -> None:
    relay.poll_replies = [Reply(500), Reply(502, {"detail": "bad gateway"}), Reply(429), answered(other="x")]

    answer = await ask(relay)

    assert answer.otherText == "x"
    assert len(relay.requests_to("/poll-answer")) == 4


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.asyncio
async def test_a_refused_token_on_relay_question_is_not_retried(relay: FakeRelay, status: int) -> None:
    relay.question_replies = [Reply(status, {"detail": "Invalid relay token."})]

    with pytest.raises(RelayAuthRejected, match=f"HTTP {status}"):
        await ask(relay)

    assert len(relay.received) == 1


@pytest.mark.asyncio
async def test_a_refused_token_on_poll_is_not_retried(relay: FakeRelay) -> None:
    relay.poll_replies = [waiting(), Reply(401, {"detail": "Invalid relay token."})]

    with pytest.raises(RelayAuthRejected):
        await ask(relay)

    assert len(relay.requests_to("/poll-answer")) == 2


@pytest.mark.asyncio
async def test_a_422_reports_the_servers_detail_and_is_not_retried(relay: FakeRelay) -> None:
    relay.question_replies = [Reply(422, {"detail": "header is longer than 12 characters"})]

    with pytest.raises(RequestRejected, match="header is longer than 12 characters"):
        await ask(relay)

    assert len(relay.received) == 1


@pytest.mark.asyncio
async def test_a_410_on_relay_question_means_the_run_has_finished(relay: FakeRelay) -> None:
    relay.question_replies = [Reply(410, {"detail": "The run has finished."})]

    with pytest.raises(RunFinished):
        await ask(relay)


@pytest.mark.asyncio
async def test_a_500_on_relay_question_is_not_retried_because_it_may_have_been_stored(
    relay: FakeRelay,
) -> None:
    relay.question_replies = [Reply(500)]

    with pytest.raises(RelayUnavailable, match="HTTP 500"):
        await ask(relay)

    assert len(relay.received) == 1


@pytest.mark.asyncio
async def test_a_503_on_relay_question_is_retried(relay: FakeRelay) -> None:
    relay.question_replies = [Reply(503), relayed()]
    relay.poll_replies = [answered(["Postgres"])]

    assert (await ask(relay)).selectedLabels == ["Postgres"]
    assert len(relay.requests_to("/relay-question")) == 2


@pytest.mark.asyncio
async def test_the_relay_timeout_falls_back_to_the_config_timeout() -> None:
    relay = FakeRelay(question_replies=[Reply(201, {"question_id": QUESTION_ID})])
    relay.start()
    try:
        async with default_client() as client:
            question = await relay_question(client, make_config(relay.url, timeout=240), QUESTION)
    finally:
        relay.stop()

    assert question == RelayedQuestion(question_id=QUESTION_ID, expires_at=None, timeout=240)


@pytest.mark.asyncio
async def test_our_own_deadline_ends_a_wait_the_server_never_decides(relay: FakeRelay) -> None:
    relay.poll_replies = [waiting(0.2)]
    question = RelayedQuestion(question_id=QUESTION_ID, expires_at=None, timeout=1)

    started = time.monotonic()
    with pytest.raises(QuestionExpired):
        async with default_client() as client:
            await wait_for_answer(client, make_config(relay.url), question, grace=0.0)

    assert 0.9 < time.monotonic() - started < 3


@pytest.mark.asyncio
async def test_the_deadline_cuts_a_held_long_poll_short(relay: FakeRelay) -> None:
    relay.poll_replies = [waiting(delay=20)]
    question = RelayedQuestion(question_id=QUESTION_ID, expires_at=None, timeout=1)

    started = time.monotonic()
    with pytest.raises(QuestionExpired):
        async with default_client() as client:
            await wait_for_answer(client, make_config(relay.url), question, grace=0.5)

    assert 1.4 < time.monotonic() - started < 3


@pytest.mark.asyncio
async def test_a_relay_down_until_the_deadline_is_reported_unreachable() -> None:
    question = RelayedQuestion(question_id=QUESTION_ID, expires_at=None, timeout=1)

    with pytest.raises(RelayUnavailable, match="connection refused"):
        async with default_client() as client:
            await wait_for_answer(client, make_config(f"http://127.0.0.1:{free_port()}"), question, grace=0.0)


@pytest.mark.asyncio
async def test_a_410_without_a_status_means_the_run_finished_so_it_counts_as_cancelled(
    relay: FakeRelay,
) -> None:
    relay.poll_replies = [
        Reply(410, {"detail": "The run has finished; it cannot ask or receive answers any more."})
    ]

    with pytest.raises(QuestionCancelled):
        await ask(relay)


@pytest.mark.asyncio
async def test_a_410_consumed_is_not_mistaken_for_a_timeout(relay: FakeRelay) -> None:
    relay.poll_replies = [Reply(410, {"status": "consumed", "detail": "The answer was already delivered."})]

    with pytest.raises(RelayUnavailable, match="already collected"):
        await ask(relay)


@pytest.mark.asyncio
async def test_validation_errors_from_django_ninja_are_made_readable(relay: FakeRelay) -> None:
    errors = [
        {
            "type": "string_too_long",
            "loc": ["body", "payload", "header"],
            "msg": "String should have at most 60",
        },
        {"type": "missing", "loc": ["body", "payload", "question"], "msg": "Field required"},
    ]
    relay.question_replies = [
        Reply(422, {"detail": "The request is not valid", "code": "invalid", "errors": errors})
    ]

    with pytest.raises(RequestRejected) as caught:
        await ask(relay)

    assert caught.value.detail == "header: String should have at most 60; question: Field required"


@pytest.mark.asyncio
async def test_the_server_keeps_one_http_client_open_between_tool_calls() -> None:
    async with shared_client() as first:
        pass
    async with shared_client() as second:
        pass

    assert second is first
    assert not first.is_closed


@pytest.mark.asyncio
async def test_every_try_of_one_question_carries_one_idempotency_key(relay: FakeRelay) -> None:
    """The server hands a try it has seen the question it stored (``Question.call_key``)."""
    relay.question_replies = [Reply(503), Reply(502), relayed()]
    relay.poll_replies = [answered(["Postgres"])]

    await ask(relay)
    await ask(relay)

    keys = [r.headers.get("idempotency-key") for r in relay.requests_to("/relay-question")]
    assert len(keys) == 4 and all(keys)
    assert keys[0] == keys[1] == keys[2] != keys[3]


@pytest.mark.asyncio
async def test_a_question_whose_reply_is_cut_off_is_posted_again_under_the_same_key(
    relay: FakeRelay, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection lost mid-reply (the web process restarting) may have stored the
    question: the same key makes the next try get that one back, so it is safe to post."""
    relay.question_replies = [Reply(201, cut=True), relayed()]
    relay.poll_replies = [answered(["SQLite"])]

    assert (await ask(relay)).selectedLabels == ["SQLite"]
    tries = relay.requests_to("/relay-question")
    assert len(tries) == 2
    assert tries[0].headers["idempotency-key"] == tries[1].headers["idempotency-key"]
    assert tries[0].json() == tries[1].json() == QUESTION.wire()
    assert "relay-question failed" in caplog.text
