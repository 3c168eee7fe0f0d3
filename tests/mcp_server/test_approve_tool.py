"""``approve`` (the permission prompt tool's function): the CLI's request in, a permission result out.

Real HTTP to ``FakeRelay`` in between. Whatever happens, the result is text content holding a
permission result the CLI accepts, and it is an allow only when PromptManager said allow.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_types import CallToolResult

from mcp_server import answers
from mcp_server.approvals import approve
from tests.mcp_server.fake_relay import (
    RELAY_TOKEN,
    REQUEST_ID,
    FakeRelay,
    Reply,
    decided,
    free_port,
    permission_relayed,
    waiting,
)

pytestmark = pytest.mark.unit

COMMAND = {"command": "npm install left-pad", "description": "Install a dependency"}
TOOL_USE_ID = "toolu_01ApproveThisCall"


def decision_of(result: CallToolResult) -> dict[str, Any]:
    """The permission result the CLI would parse: the one text block, as JSON."""
    assert result.is_error is False
    assert result.structured_content is None
    [block] = result.content
    assert block.type == "text"
    decision = json.loads(block.text)
    assert isinstance(decision, dict)
    return decision


def denied(message: str) -> dict[str, Any]:
    return {"behavior": "deny", "message": message}


async def approve_bash(config: Path | None, **kwargs: Any) -> dict[str, Any]:
    result = await approve(str(config) if config else None, "Bash", COMMAND, TOOL_USE_ID, **kwargs)
    return decision_of(result)


@pytest.mark.asyncio
async def test_an_allow_passes_updated_input_and_updated_permissions_through_verbatim(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    allow = {
        "behavior": "allow",
        "updatedInput": {**COMMAND, "command": "npm install --ignore-scripts left-pad"},
        "updatedPermissions": [
            {
                "type": "addRules",
                "rules": [{"toolName": "Bash", "ruleContent": "npm install:*"}],
                "behavior": "allow",
                "destination": "session",
            }
        ],
    }
    relay.decision_replies = [decided(allow)]

    assert await approve_bash(write_config(relay.url)) == allow
    [post] = relay.requests_to("/relay-permission")
    assert post.method == "POST"
    assert post.json() == {"tool_name": "Bash", "input": COMMAND, "tool_use_id": TOOL_USE_ID}
    [poll] = relay.requests_to("/poll-decision")
    assert poll.method == "GET"
    assert poll.query == {"request_id": REQUEST_ID}


@pytest.mark.asyncio
async def test_a_deny_passes_the_persons_message_through(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    deny = {"behavior": "deny", "message": "Alice denied this: do not install packages.", "interrupt": False}
    relay.decision_replies = [decided(deny)]

    assert await approve_bash(write_config(relay.url)) == deny


@pytest.mark.asyncio
async def test_ask_user_question_is_relayed_like_any_other_call_and_its_answers_come_back(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    questions = [{"question": "Which database?", "header": "DB", "options": [{"label": "Postgres"}]}]
    allow = {
        "behavior": "allow",
        "updatedInput": {"questions": questions, "answers": {"Which database?": "Postgres"}},
    }
    relay.decision_replies = [decided(allow)]

    result = await approve(
        str(write_config(relay.url)), "AskUserQuestion", {"questions": questions}, "toolu_q"
    )

    assert decision_of(result) == allow
    assert relay.requests_to("/relay-permission")[0].json() == {
        "tool_name": "AskUserQuestion",
        "input": {"questions": questions},
        "tool_use_id": "toolu_q",
    }


@pytest.mark.asyncio
async def test_waiting_polls_are_repeated_until_the_decision(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    allow = {"behavior": "allow", "updatedInput": COMMAND}
    relay.decision_replies = [waiting(), waiting(0.2), waiting(), decided(allow)]

    assert await approve_bash(write_config(relay.url)) == allow
    assert len(relay.requests_to("/poll-decision")) == 4
    assert len(relay.requests_to("/relay-permission")) == 1


@pytest.mark.asyncio
async def test_the_servers_expiry_deny_passes_through(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    expired = denied("Nobody decided within 300 seconds, so the call was denied. Carry on without it.")
    relay.decision_replies = [waiting(), decided(expired)]

    assert await approve_bash(write_config(relay.url)) == expired


@pytest.mark.asyncio
async def test_a_410_while_waiting_means_the_run_ended_so_the_call_is_denied(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.decision_replies = [
        waiting(),
        Reply(410, {"detail": "The run has finished.", "code": "run_finished"}),
    ]

    assert await approve_bash(write_config(relay.url)) == denied(answers.approval_run_ended("Bash"))
    assert len(relay.requests_to("/poll-decision")) == 2


@pytest.mark.asyncio
async def test_a_410_on_relay_permission_means_the_run_ended_so_the_call_is_denied(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.permission_replies = [Reply(410, {"detail": "The run has finished.", "code": "run_finished"})]

    assert await approve_bash(write_config(relay.url)) == denied(answers.approval_run_ended("Bash"))
    assert relay.requests_to("/poll-decision") == []


@pytest.mark.asyncio
async def test_a_relay_that_does_not_answer_the_request_denies_the_call(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.permission_replies = [Reply(201, {"request_id": REQUEST_ID}, delay=5)]

    decision = await approve_bash(
        write_config(relay.url), client_factory=lambda: httpx.AsyncClient(timeout=0.5, trust_env=False)
    )

    assert decision == denied(answers.approval_unreachable("Bash", "the request timed out"))
    # The request may have been stored: it is not posted twice.
    assert len(relay.requests_to("/relay-permission")) == 1


@pytest.mark.asyncio
async def test_a_refused_connection_is_retried_until_the_relay_comes_back(
    write_config: Callable[..., Path],
) -> None:
    allow = {"behavior": "allow", "updatedInput": COMMAND}
    relay = FakeRelay(decision_replies=[decided(allow)])
    relay.port = free_port()

    async def start_late() -> None:
        await asyncio.sleep(0.7)
        await asyncio.to_thread(relay.start, relay.port)

    starter = asyncio.create_task(start_late())
    try:
        decision = await approve_bash(write_config(relay.url))
    finally:
        await starter
        relay.stop()

    assert decision == allow
    assert len(relay.requests_to("/relay-permission")) == 1


@pytest.mark.asyncio
async def test_a_503_on_relay_permission_is_retried(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    allow = {"behavior": "allow", "updatedInput": COMMAND}
    relay.permission_replies = [Reply(503), Reply(429), permission_relayed()]
    relay.decision_replies = [decided(allow)]

    assert await approve_bash(write_config(relay.url)) == allow
    assert len(relay.requests_to("/relay-permission")) == 3


@pytest.mark.asyncio
async def test_every_try_of_one_tool_call_carries_one_idempotency_key(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    """The server hands a try it has seen the request it stored (``PermissionRequest.call_key``)."""
    allow = {"behavior": "allow", "updatedInput": COMMAND}
    relay.permission_replies = [Reply(503), Reply(502), permission_relayed(), permission_relayed()]
    relay.decision_replies = [decided(allow), decided(allow)]
    config = write_config(relay.url)

    await approve_bash(config)
    await approve_bash(config)

    keys = [r.headers.get("idempotency-key") for r in relay.requests_to("/relay-permission")]
    assert len(keys) == 4 and all(keys)
    assert keys[0] == keys[1] == keys[2] != keys[3]


@pytest.mark.asyncio
async def test_a_tool_call_whose_reply_is_cut_off_is_posted_again_under_the_same_key(
    relay: FakeRelay, write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A connection lost mid-reply (the web process restarting) may have stored the request
    and shown its card: the same key gets that one back, so the call waits on the card the
    team sees instead of being denied as unreachable while the card stays open."""
    allow = {"behavior": "allow", "updatedInput": COMMAND}
    relay.permission_replies = [Reply(201, cut=True), permission_relayed()]
    relay.decision_replies = [decided(allow)]

    assert await approve_bash(write_config(relay.url)) == allow
    tries = relay.requests_to("/relay-permission")
    assert len(tries) == 2
    assert tries[0].headers["idempotency-key"] == tries[1].headers["idempotency-key"]
    assert tries[0].json() == tries[1].json()
    assert "relay-permission failed" in caplog.text


@pytest.mark.asyncio
async def test_a_500_on_relay_permission_is_not_retried_and_denies_the_call(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.permission_replies = [Reply(500)]

    decision = await approve_bash(write_config(relay.url))

    assert decision == denied(
        answers.approval_unreachable("Bash", "unexpected HTTP 500 from relay-permission")
    )
    assert len(relay.requests_to("/relay-permission")) == 1


@pytest.mark.asyncio
async def test_poll_failures_are_retried_until_the_decision(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    allow = {"behavior": "allow", "updatedInput": COMMAND}
    relay.decision_replies = [Reply(500), Reply(502, {"detail": "bad gateway"}), Reply(429), decided(allow)]

    assert await approve_bash(write_config(relay.url)) == allow
    assert len(relay.requests_to("/poll-decision")) == 4


@pytest.mark.asyncio
async def test_a_relay_failing_until_the_deadline_denies_the_call_as_unreachable(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.permission_replies = [permission_relayed(timeout=1)]
    relay.decision_replies = [Reply(503)]

    started = time.monotonic()
    decision = await approve_bash(write_config(relay.url))

    # The deadline is the request's timeout plus the grace for the server's own deny (5 s).
    assert 5.5 < time.monotonic() - started < 9
    assert decision == denied(answers.approval_unreachable("Bash", "HTTP 503"))
    assert len(relay.requests_to("/poll-decision")) > 2


@pytest.mark.asyncio
async def test_no_decision_by_our_own_deadline_denies_the_call(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.permission_replies = [permission_relayed(timeout=1)]
    relay.decision_replies = [waiting(0.2)]

    started = time.monotonic()
    decision = await approve_bash(write_config(relay.url))

    assert 5.5 < time.monotonic() - started < 9
    assert decision == denied(answers.approval_timed_out("Bash", 1))


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.asyncio
async def test_a_refused_token_denies_the_call_without_retrying(
    relay: FakeRelay, write_config: Callable[..., Path], status: int
) -> None:
    relay.permission_replies = [Reply(status, {"detail": "Invalid relay token.", "code": "bad_token"})]

    decision = await approve_bash(write_config(relay.url))

    assert decision == denied(
        answers.approval_unreachable("Bash", f"the relay token was refused with HTTP {status}")
    )
    assert len(relay.received) == 1


@pytest.mark.asyncio
async def test_an_unknown_request_on_poll_denies_the_call(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.decision_replies = [Reply(404, {"detail": "No such permission request.", "code": "not_found"})]

    decision = await approve_bash(write_config(relay.url))

    assert decision == denied(
        answers.approval_unreachable("Bash", "HTTP 404 from poll-decision: the permission request is unknown")
    )
    assert len(relay.requests_to("/poll-decision")) == 1


@pytest.mark.asyncio
async def test_a_rejected_request_denies_the_call_with_the_servers_reasons(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    errors = [{"type": "missing", "loc": ["body", "payload", "tool_use_id"], "msg": "Field required"}]
    relay.permission_replies = [
        Reply(422, {"detail": "The request is not valid", "code": "invalid", "errors": errors})
    ]

    decision = await approve_bash(write_config(relay.url))

    assert decision == denied(answers.approval_rejected("Bash", "tool_use_id: Field required"))


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (decided({"behavior": "allow"}), "an allow without an updatedInput object"),
        (decided({"behavior": "allow", "updatedInput": ["npm"]}), "an allow without an updatedInput object"),
        (
            decided(
                {"behavior": "allow", "updatedInput": COMMAND, "updatedPermissions": {"type": "addRules"}}
            ),
            "updatedPermissions is not a list",
        ),
        (decided({"behavior": "deny"}), "a deny without a message"),
        (decided({"behavior": "deny", "message": "   "}), "a deny without a message"),
        (
            decided({"behavior": "ask", "updatedInput": COMMAND}),
            'a behavior that is neither "allow" nor "deny"',
        ),
        (decided({}), 'a behavior that is neither "allow" nor "deny"'),
        (Reply(200, {"status": "decided", "result": "allow"}), "the decision's result is not a JSON object"),
        (Reply(200, {"status": "decided"}), "the decision's result is not a JSON object"),
        (Reply(200, {"status": "done", "result": {}}), "poll-decision answered 200 with status 'done'"),
    ],
)
@pytest.mark.asyncio
async def test_a_malformed_decision_denies_the_call(
    relay: FakeRelay, write_config: Callable[..., Path], reply: Reply, problem: str
) -> None:
    relay.decision_replies = [reply]

    assert await approve_bash(write_config(relay.url)) == denied(answers.approval_malformed("Bash", problem))


@pytest.mark.asyncio
async def test_a_missing_config_denies_the_call_without_any_request(relay: FakeRelay) -> None:
    decision = await approve_bash(None)

    assert decision == denied(
        answers.approval_not_configured("Bash", "the ASK_USER_CONFIG environment variable is not set")
    )
    assert relay.received == []


@pytest.mark.asyncio
async def test_an_invalid_config_denies_the_call_without_any_request(
    relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    decision = await approve_bash(write_config(relay.url, relayToken=""))

    assert decision == denied(
        answers.approval_not_configured("Bash", "relayToken must be a non-empty string")
    )
    assert relay.received == []


@pytest.mark.asyncio
async def test_the_token_travels_only_in_the_authorization_header(
    relay: FakeRelay, write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    relay.permission_replies = [Reply(503), permission_relayed()]
    relay.decision_replies = [waiting(), Reply(503), decided({"behavior": "allow", "updatedInput": COMMAND})]

    await approve_bash(write_config(relay.url))

    assert len(relay.received) == 5
    for request in relay.received:
        assert request.headers["authorization"] == f"Bearer {RELAY_TOKEN}"
        assert RELAY_TOKEN not in request.url
        assert RELAY_TOKEN.encode() not in request.body
    assert caplog.records, "expected httpx and retry log lines to check"
    assert RELAY_TOKEN not in caplog.text


@pytest.mark.asyncio
async def test_an_unexpected_error_inside_the_tool_is_a_deny_not_an_exception(
    write_config: Callable[..., Path],
) -> None:
    def broken_client() -> httpx.AsyncClient:
        raise RuntimeError("no client today")

    decision = await approve_bash(write_config("http://127.0.0.1:8000"), client_factory=broken_client)

    assert decision == denied(answers.approval_unreachable("Bash", "an internal error in the approve tool"))
