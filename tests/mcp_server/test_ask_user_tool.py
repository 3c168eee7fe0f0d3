"""``ask_user`` (the function behind the tool): config file in, text result out, real HTTP between."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mcp_types import CallToolResult

from mcp_server import answers
from mcp_server.server import OptionArgument as Option
from mcp_server.server import ask_user
from tests.mcp_server.fake_relay import FakeRelay, Reply, answered, relayed, waiting

pytestmark = pytest.mark.unit

OPTIONS = [Option("Postgres", "Already used in staging"), Option("SQLite"), Option("DuckDB")]


def text_of(result: CallToolResult) -> str:
    [block] = result.content
    assert block.type == "text"
    return block.text


@pytest.mark.asyncio
async def test_the_users_choice_comes_back_as_plain_text(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.poll_replies = [waiting(), answered(["Postgres"])]

    result = await ask_user(str(write_config(relay.url)), "Which database?", OPTIONS, False, "Database")

    assert not result.is_error
    assert text_of(result) == "User selected: Postgres"
    assert result.structured_content is None


@pytest.mark.asyncio
async def test_a_multi_select_answer_lists_every_label(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.poll_replies = [answered(["Postgres", "DuckDB"], notes="DuckDB for analytics only")]

    result = await ask_user(str(write_config(relay.url)), "Which databases?", OPTIONS, True, None)

    assert text_of(result) == "User selected: Postgres, DuckDB\nNotes: DuckDB for analytics only"
    assert relay.requests_to("/relay-question")[0].json()["multiSelect"] is True


@pytest.mark.asyncio
async def test_a_free_text_question_sends_no_options_and_returns_what_was_written(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.poll_replies = [answered(other="Call it pm-relay")]

    result = await ask_user(
        str(write_config(relay.url)), "  What should the service be called? ", None, True, " "
    )

    assert text_of(result) == "User answered: Call it pm-relay"
    assert relay.requests_to("/relay-question")[0].json() == {
        "question": "What should the service be called?",
        "header": "",
        "options": [],
        "multiSelect": False,
    }


@pytest.mark.asyncio
async def test_an_expired_question_is_an_error_naming_the_timeout(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.question_replies = [relayed(timeout=180)]
    relay.poll_replies = [Reply(410, {"status": "expired", "detail": "No answer in time."})]

    result = await ask_user(str(write_config(relay.url)), "Proceed?", None, False, None)

    assert result.is_error
    assert text_of(result) == answers.timed_out(180)


@pytest.mark.asyncio
async def test_a_cancelled_question_tells_claude_not_to_wait(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.poll_replies = [Reply(410, {"status": "cancelled", "detail": "Run cancelled."})]

    result = await ask_user(str(write_config(relay.url)), "Proceed?", None, False, None)

    assert result.is_error
    assert text_of(result) == answers.CANCELLED


@pytest.mark.asyncio
async def test_a_superseded_question_tells_claude_to_rely_on_the_newer_one(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.poll_replies = [Reply(410, {"status": "superseded", "detail": "Replaced by a newer question."})]

    result = await ask_user(str(write_config(relay.url)), "Proceed?", None, False, None)

    assert result.is_error
    assert text_of(result) == answers.SUPERSEDED
    assert "did not respond" not in text_of(result)


@pytest.mark.asyncio
async def test_a_refused_token_is_reported_as_unreachable(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.question_replies = [Reply(403, {"detail": "Invalid relay token."})]

    result = await ask_user(str(write_config(relay.url)), "Proceed?", None, False, None)

    assert result.is_error
    assert text_of(result) == answers.unreachable("the relay token was refused with HTTP 403")


@pytest.mark.asyncio
async def test_a_rejected_question_passes_on_the_servers_reason(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.question_replies = [Reply(422, {"detail": "at most 4 options"})]

    result = await ask_user(
        str(write_config(relay.url)), "Pick", [Option(str(i)) for i in range(6)], False, None
    )

    assert result.is_error
    assert text_of(result) == answers.rejected("at most 4 options")


@pytest.mark.asyncio
async def test_a_missing_config_is_a_tool_error_not_a_crash() -> None:
    result = await ask_user(None, "Proceed?", None, False, None)

    assert result.is_error
    assert text_of(result) == answers.not_configured("the ASK_USER_CONFIG environment variable is not set")


@pytest.mark.asyncio
async def test_a_non_loopback_api_url_is_refused_before_any_request(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    result = await ask_user(str(write_config("http://192.0.2.10:8000")), "Proceed?", None, False, None)

    assert result.is_error
    assert text_of(result).startswith(
        "ask_user is not configured: apiUrl host '192.0.2.10' must resolve only"
    )
    assert relay.received == []


@pytest.mark.asyncio
async def test_an_empty_question_is_refused_without_asking(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    result = await ask_user(str(write_config(relay.url)), "   ", OPTIONS, False, None)

    assert result.is_error
    assert text_of(result) == answers.invalid_arguments("an empty question")
    assert relay.received == []
