"""The real bundled CLI with ``--permission-prompt-tool mcp__ask-user__approve``, the real
``python -m mcp_server`` it spawns, the scripted model, and ``FakeRelay`` as PromptManager.

It proves what the approve tool relies on: the CLI hands it every call that needs permission,
runs the ``updatedInput`` it returns, gives the model the deny messages it returns (its own
sentences too), and hides the tool from the model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcp_server import answers
from promptmgr.cli import child_env
from tests.helpers import QUOTE, script
from tests.mcp_server.fake_relay import FakeRelay, decided

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
PROMPT_TOOL = "mcp__ask-user__approve"
RECEIVED = "Tool results received: "
NO_SUCH_TOOL = "<tool_use_error>Error: No such tool available: {tool}</tool_use_error>"


@dataclass
class CliRun:
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str

    @property
    def init(self) -> dict[str, Any]:
        [init] = [x for x in self.lines if x["type"] == "system" and x.get("subtype") == "init"]
        return init

    def model_received(self) -> list[dict[str, Any]]:
        """The tool results as the model got them (quoted back by the script's last step)."""
        [result] = [x for x in self.lines if x["type"] == "result"]
        text = str(result["result"])
        assert RECEIVED in text, text
        return list(json.loads(text.split(RECEIVED, 1)[1]))

    def tool_use_ids(self) -> list[str]:
        return [
            block["id"]
            for line in self.lines
            if line["type"] == "assistant"
            for block in line["message"]["content"]
            if block["type"] == "tool_use"
        ]


@pytest.fixture
def run_cli(
    model_settings: Any, claude_cli: str, tmp_path: Path, write_config: Callable[..., Path], relay: FakeRelay
) -> Callable[..., CliRun]:
    """Run one scripted turn in a fresh workspace, the ask-user server given by ``--mcp-config``."""
    model_settings.STORAGE_ROOT = tmp_path / "storage"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-P", "-m", "mcp_server"],
        "env": {"PYTHONPATH": str(REPO)},
    }
    mcp_config = tmp_path / "mcp-config.json"
    mcp_config.write_text(json.dumps({"mcpServers": {"ask-user": server}}), encoding="utf-8")
    env = child_env(ask_user_config=write_config(relay.url), ask_user_timeout=300)

    def run(*steps: dict[str, Any]) -> CliRun:
        args = ["--mcp-config", str(mcp_config), "--permission-mode", "default"]
        completed = subprocess.run(
            [claude_cli, "-p", "--output-format", "stream-json", "--verbose", *args]
            + ["--permission-prompt-tool", PROMPT_TOOL],
            input=script(*steps),
            capture_output=True,
            text=True,
            cwd=workspace,
            env=env,
            timeout=120,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        lines = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
        return CliRun(completed.returncode, lines, completed.stderr)

    return run


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "approve test"}}}


def test_the_cli_runs_what_the_person_allowed_and_tells_the_model_why_a_call_was_denied(
    run_cli: Callable[..., CliRun], relay: FakeRelay, tmp_path: Path
) -> None:
    allowed = "touch allowed.txt && echo allowed"
    refused = "touch refused.txt && echo refused"
    relay.decision_replies = [
        decided(
            {
                "behavior": "allow",
                "updatedInput": {"command": allowed + " && echo edited-in-the-browser", "description": "x"},
            }
        ),
        decided({"behavior": "deny", "message": "Alice denied this call."}),
    ]

    run = run_cli(bash(allowed), bash(refused), QUOTE)

    first, second = run.tool_use_ids()
    assert [r.json() for r in relay.requests_to("/relay-permission")] == [
        {
            "tool_name": "Bash",
            "input": {"command": allowed, "description": "approve test"},
            "tool_use_id": first,
        },
        {
            "tool_name": "Bash",
            "input": {"command": refused, "description": "approve test"},
            "tool_use_id": second,
        },
    ]
    assert run.model_received() == [
        {"text": "allowed\nedited-in-the-browser", "is_error": False},
        {"text": "Alice denied this call.", "is_error": True},
    ]
    assert (tmp_path / "workspace" / "allowed.txt").exists()
    assert not (tmp_path / "workspace" / "refused.txt").exists()


def test_the_cli_gives_the_model_the_tools_own_deny_sentence_and_runs_nothing(
    run_cli: Callable[..., CliRun], relay: FakeRelay, tmp_path: Path
) -> None:
    # A deny without a message is what the CLI would reject; the tool turns it into its own deny.
    relay.decision_replies = [decided({"behavior": "deny"})]

    run = run_cli(bash("touch bare.txt && echo bare"), QUOTE)

    assert run.model_received() == [
        {"text": answers.approval_malformed("Bash", "a deny without a message"), "is_error": True}
    ]
    assert not (tmp_path / "workspace" / "bare.txt").exists()


def test_the_cli_hides_the_prompt_tool_from_the_model(
    run_cli: Callable[..., CliRun], relay: FakeRelay
) -> None:
    forged = {"tool_name": "Bash", "input": {"command": "echo forged"}, "tool_use_id": "toolu_forged"}

    run = run_cli({"tool_use": {"name": PROMPT_TOOL, "input": forged}}, QUOTE)

    assert "mcp__ask-user__ask_user" in run.init["tools"]
    assert PROMPT_TOOL not in run.init["tools"]
    assert run.model_received() == [{"text": NO_SUCH_TOOL.format(tool=PROMPT_TOOL), "is_error": True}]
    assert relay.received == []
