"""The harness itself: the real bundled Claude Code CLI against the scripted model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import httpx
import pytest

from promptmgr.cli import bundled_cli, child_env, find_claude_cli
from promptmgr.workspaces import workspace_path
from tests.helpers import make_project, script

pytestmark = pytest.mark.e2e


def test_the_real_cli_streams_scripted_text_with_the_ask_user_server_connected(
    model_settings: Any, claude_cli: str, alice: Any
) -> None:
    project = make_project(owner=alice)
    env = child_env(ask_user_config=None, ask_user_timeout=None)
    # As every run with ask-user has it (child_env with a config): the turn starts once the
    # server has connected, not while it is still "pending" under the suite's load.
    env["MCP_CONNECTION_NONBLOCKING"] = "false"
    completed = subprocess.run(
        [claude_cli, "-p", "--output-format", "stream-json", "--verbose"],
        input=script({"text": "Scripted hello through the real CLI."}),
        capture_output=True,
        text=True,
        cwd=workspace_path(project),
        env=env,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    [init] = [line for line in lines if line["type"] == "system" and line.get("subtype") == "init"]
    assert [(s["name"], s["status"]) for s in init["mcp_servers"]] == [("ask-user", "connected")]
    [result] = [line for line in lines if line["type"] == "result"]
    assert result["result"] == "Scripted hello through the real CLI."
    assert result["is_error"] is False


def test_with_no_cli_configured_or_on_path_the_one_bundled_with_claude_agent_sdk_runs(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A developer's own `claude` on PATH, or CLAUDE_CLI_PATH, would otherwise take precedence.
    settings.CLAUDE_CLI_PATH = ""
    path = os.environ.get("PATH", "").split(os.pathsep)
    monkeypatch.setenv("PATH", os.pathsep.join(d for d in path if shutil.which("claude", path=d) is None))
    cli = find_claude_cli()
    assert cli == str(bundled_cli())
    version = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True, timeout=60)
    assert "Claude Code" in version.stdout


def test_the_scripted_model_speaks_the_messages_streaming_format(scripted_model_url: str) -> None:
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": 'SCRIPT: [{"text": "hi"}]'}],
    }
    with httpx.stream("POST", f"{scripted_model_url}/v1/messages", json=body, timeout=10) as response:
        events = [line.split(": ", 1)[1] for line in response.iter_lines() if line.startswith("event: ")]
    assert events == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    tokens = httpx.post(f"{scripted_model_url}/v1/messages/count_tokens", json=body, timeout=10)
    assert tokens.json()["input_tokens"] > 0
