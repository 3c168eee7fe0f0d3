"""The real ``python -m mcp_server`` process, driven over stdio by the mcp client SDK.

The client uses the initialize handshake (``mode="legacy"``), as Claude Code does, and the server
talks real HTTP to ``FakeRelay``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_server import answers
from tests.mcp_server.fake_relay import RELAY_TOKEN, FakeRelay, answered, decided, waiting

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CALL_TIMEOUT = 30.0


@asynccontextmanager
async def server_process(config_path: Path | None, workdir: Path, errlog: Path) -> AsyncIterator[Client]:
    """Start the server as Claude Code would: the interpreter, ``-m mcp_server``, cwd = workspace."""
    env = {"PYTHONPATH": str(REPO), "ASK_USER_LOG_LEVEL": "DEBUG"}
    if config_path is not None:
        env["ASK_USER_CONFIG"] = str(config_path)
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"], env=env, cwd=workdir)
    with errlog.open("w", encoding="utf-8") as stderr:
        transport = stdio_client(params, errlog=stderr)
        async with Client(transport, mode="legacy", read_timeout_seconds=CALL_TIMEOUT) as client:
            yield client


@pytest.mark.asyncio
async def test_the_server_lists_a_read_only_ask_user_tool(tmp_path: Path) -> None:
    async with server_process(None, tmp_path, tmp_path / "stderr.log") as client:
        assert client.server_info is not None
        assert client.server_info.name == "ask-user"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert set(tools) == {"ask_user", "approve"}
    tool = tools["ask_user"]
    assert tool.description is not None
    assert tool.description.startswith("Ask the user a question and wait for their answer.")
    assert tool.annotations is not None
    assert tool.annotations.read_only_hint is True
    assert tool.annotations.destructive_hint is False
    assert tool.annotations.title
    assert tool.output_schema is None
    schema = tool.input_schema
    assert schema["required"] == ["question"]
    assert set(schema["properties"]) == {"question", "options", "multiSelect", "header"}
    assert schema["properties"]["question"]["type"] == "string"
    assert schema["properties"]["multiSelect"] == {
        "type": "boolean",
        "default": False,
        "description": "Let the user pick more than one option",
        "title": "Multiselect",
    }
    options = schema["properties"]["options"]
    assert options["type"] == "array"
    assert options["items"]["required"] == ["label"]
    assert set(options["items"]["properties"]) == {"label", "description"}
    assert schema["properties"]["header"]["type"] == "string"


@pytest.mark.asyncio
async def test_a_call_returns_the_users_choice_as_text_content(
    tmp_path: Path, relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.poll_replies = [waiting(), waiting(), answered(["Postgres"])]
    arguments = {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [{"label": "Postgres", "description": "Already in staging"}, {"label": "SQLite"}],
    }

    errlog = tmp_path / "stderr.log"
    async with server_process(write_config(relay.url), tmp_path, errlog) as client:
        result = await client.call_tool("ask_user", arguments)

    assert result.is_error is False
    assert [(block.type, getattr(block, "text", None)) for block in result.content] == [
        ("text", "User selected: Postgres")
    ]
    assert result.structured_content is None
    assert relay.requests_to("/relay-question")[0].json() == {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [
            {"label": "Postgres", "description": "Already in staging"},
            {"label": "SQLite", "description": ""},
        ],
        "multiSelect": False,
    }
    # Even at DEBUG the server's stderr (kept by Claude Code) never shows the relay token.
    assert "poll-answer" in errlog.read_text(encoding="utf-8")
    assert RELAY_TOKEN not in errlog.read_text(encoding="utf-8")


@pytest.mark.asyncio
async def test_a_bad_config_gives_an_error_result_and_the_server_keeps_running(
    tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    config = write_config("http://127.0.0.1:8000", timeout=5)

    async with server_process(config, tmp_path, tmp_path / "stderr.log") as client:
        first = await client.call_tool("ask_user", {"question": "Proceed?"})
        second = await client.call_tool("ask_user", {"question": "Proceed?"})

    assert first.is_error is True
    [block] = first.content
    assert block.type == "text"
    assert block.text == answers.not_configured("timeout must be between 30 and 900 seconds, not 5")
    assert second == first


@pytest.mark.asyncio
async def test_the_approve_tool_is_listed_and_hands_the_decision_to_the_cli_as_json_text(
    tmp_path: Path, relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    allow = {
        "behavior": "allow",
        "updatedInput": {"command": "make test", "description": "Run the tests"},
        "updatedPermissions": [
            {
                "type": "addRules",
                "rules": [{"toolName": "Bash"}],
                "behavior": "allow",
                "destination": "session",
            }
        ],
    }
    relay.decision_replies = [waiting(), decided(allow)]
    # The arguments exactly as the CLI sends them to its permission prompt tool.
    arguments = {
        "tool_name": "Bash",
        "input": {"command": "make test", "description": "Run the tests"},
        "tool_use_id": "toolu_01StdioApprove",
    }

    errlog = tmp_path / "stderr.log"
    async with server_process(write_config(relay.url), tmp_path, errlog) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("approve", arguments)

    approve = tools["approve"]
    assert approve.description is not None
    assert approve.description.startswith("PromptManager's permission prompt tool.")
    assert "do not call it yourself" in approve.description
    assert approve.annotations is not None
    assert approve.annotations.read_only_hint is False
    assert approve.input_schema["required"] == ["tool_name", "input"]
    assert approve.input_schema["properties"]["input"]["type"] == "object"
    assert result.is_error is False
    assert result.structured_content is None
    [block] = result.content
    assert block.type == "text"
    assert json.loads(block.text) == allow
    assert [r.json() for r in relay.requests_to("/relay-permission")] == [arguments]
    assert len(relay.requests_to("/poll-decision")) == 2
    assert "poll-decision" in errlog.read_text(encoding="utf-8")
    assert RELAY_TOKEN not in errlog.read_text(encoding="utf-8")


@pytest.mark.asyncio
async def test_a_permission_request_of_megabytes_reaches_the_relay_whole(
    tmp_path: Path, relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    # A Write's whole file comes in one line of stdin: the loop's reader must take it.
    allow = {"behavior": "allow", "updatedInput": {"file_path": "/w/big.txt"}}
    relay.decision_replies = [decided(allow)]
    content = "x" * (3 * 1024 * 1024)
    arguments = {"tool_name": "Write", "input": {"file_path": "/w/big.txt", "content": content}}

    async with server_process(write_config(relay.url), tmp_path, tmp_path / "stderr.log") as client:
        result = await client.call_tool("approve", arguments)
        again = await client.call_tool("approve", {**arguments, "input": {"file_path": "/w/b"}})

    [block] = result.content
    assert block.type == "text" and json.loads(block.text) == allow
    assert again.is_error is False
    [first, second] = relay.requests_to("/relay-permission")
    assert first.json()["input"]["content"] == content
    assert second.json()["input"] == {"file_path": "/w/b"}


def _proc_status(pid: int, field: str) -> str:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith(field))
    return line.split(":", 1)[1].strip()


def _fd_flags(pid: int, fd: int) -> int:
    line = next(
        ln for ln in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines() if ln.startswith("flags")
    )
    return int(line.split(":", 1)[1], 8)


@pytest.mark.asyncio
@pytest.mark.parametrize("shared", [False, True], ids=["own-pipes", "stdout-is-stderr"])
async def test_stdio_is_served_by_the_event_loop_unless_stdout_shares_stderrs_pipe(
    tmp_path: Path, shared: bool
) -> None:
    # On its own pipes the server reads and writes them on the loop: no worker thread waits on
    # stdin. When stdout is stderr's pipe it keeps the SDK's threads, so stdout stays blocking:
    # the loop would make stderr non-blocking too, and a log line into a full pipe would fail.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mcp_server",
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "ASK_USER_LOG_LEVEL": "DEBUG"},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if shared else asyncio.subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    process.stdin.write(json.dumps(hello).encode() + b"\n")
    await process.stdin.drain()
    reply: dict[str, Any] = {}
    async with asyncio.timeout(CALL_TIMEOUT):
        while reply.get("id") != 1:
            line = await process.stdout.readline()
            assert line, "the server ended without answering"
            with contextlib.suppress(ValueError):
                reply = json.loads(line)
    threads = int(_proc_status(process.pid, "Threads"))
    stderr_flags = _fd_flags(process.pid, 2)
    process.stdin.close()
    await asyncio.wait_for(process.wait(), CALL_TIMEOUT)

    assert reply["result"]["serverInfo"]["name"] == "ask-user"
    assert process.returncode == 0
    if shared:
        assert threads >= 2
        assert not stderr_flags & os.O_NONBLOCK
    else:
        assert threads == 1
