"""The Claude Code contract: what the pinned bundled CLI does, which the app relies on.

Each test runs the real CLI (``claude_cli``) against the scripted model in a bare workspace,
with the app's own environment (``child_env``), and asserts on what the CLI does: the
``system`` init line, the exit, and the tool results the model received (the scripted model
quotes them back in its last reply). A CLI upgrade that changes one of these facts fails here.
The MCP server used is ``contract_mcp_server.py`` beside this file (server name ``contract``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from promptmgr.cli import child_env
from tests.harness import contract_mcp_server as contract
from tests.helpers import QUOTE, script

pytestmark = pytest.mark.e2e

SERVER_ENTRY = {"type": "stdio", "command": sys.executable, "args": [contract.__file__]}
MCP_CONFIG = {"mcpServers": {contract.SERVER_NAME: SERVER_ENTRY}}
NOTE = "mcp__contract__note"
PEEK = "mcp__contract__peek"
PROMPT_TOOL = "mcp__contract__decide"
RECEIVED = "Tool results received: "

# The CLI's own wording, as the model receives it.
ASK_USER_QUESTION_DISABLED = (
    "<tool_use_error>Error: No such tool available: AskUserQuestion. AskUserQuestion is disabled "
    "for this session, in subagents as well as here.</tool_use_error>"
)
NOT_GRANTED = "Claude requested permissions to use {tool}, but you haven't granted it yet."
PLAN_MODE_REFUSAL = "Cannot call {tool} while in plan mode."
INVALID_PERMISSION_RESULT = (
    "The permission prompt tool returned an invalid permission result. Expected "
    "{behavior: 'allow', updatedInput?: object} or {behavior: 'deny', message: string}. "
    "updatedPermissions may hold at most 4096 updates, rules and directories in all."
)
ROOT_REFUSAL = (
    "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons\n"
)


@dataclass
class CliRun:
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str
    stdout: str

    @property
    def init(self) -> dict[str, Any]:
        [init] = [x for x in self.lines if x["type"] == "system" and x.get("subtype") == "init"]
        return init

    @property
    def connected_servers(self) -> list[tuple[str, str]]:
        return [(s["name"], s["status"]) for s in self.init["mcp_servers"]]

    @property
    def result(self) -> dict[str, Any]:
        [result] = [x for x in self.lines if x["type"] == "result"]
        return result

    def model_received(self) -> list[dict[str, Any]]:
        """The tool results as the model got them (quoted back by the script's last step)."""
        text = str(self.result["result"])
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


class Workspace:
    """A bare working directory for one CLI run, with the app's environment."""

    def __init__(self, root: Path, claude: str) -> None:
        self.root = root
        self.claude = claude
        (root / ".claude").mkdir(parents=True)
        self.record = root.parent / "prompt-tool-calls.jsonl"
        self.env = child_env(ask_user_config=None, ask_user_timeout=None)
        # As the app sets it: MCP tools' schemas are sent up front, not behind ToolSearch.
        self.env["ENABLE_TOOL_SEARCH"] = "false"
        self.env[contract.RECORD_ENV_VAR] = str(self.record)

    def register_in_mcp_json(self) -> None:
        (self.root / ".mcp.json").write_text(json.dumps(MCP_CONFIG))

    def settings_local(self, data: dict[str, Any]) -> None:
        (self.root / ".claude" / "settings.local.json").write_text(json.dumps(data))

    def mcp_config_outside(self) -> Path:
        """The same registration in a file outside the workspace, for ``--mcp-config``."""
        path = self.root.parent / "mcp-config.json"
        path.write_text(json.dumps(MCP_CONFIG))
        return path

    def prompt_tool_calls(self) -> list[dict[str, Any]]:
        """The arguments the CLI sent to the permission prompt tool, one per call."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def run(self, *steps: dict[str, Any], args: tuple[str, ...] = ()) -> CliRun:
        completed = subprocess.run(
            [self.claude, "-p", "--output-format", "stream-json", "--verbose", *args],
            input=script(*steps),
            capture_output=True,
            text=True,
            cwd=self.root,
            env=self.env,
            timeout=120,
            check=False,
        )
        lines = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
        return CliRun(completed.returncode, lines, completed.stderr, completed.stdout)


@pytest.fixture
def workspace(model_settings: Any, claude_cli: str, tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "workspace", claude_cli)


def tool_call(name: str, **tool_input: Any) -> dict[str, Any]:
    return {"tool_use": {"name": name, "input": tool_input}}


def bash(command: str) -> dict[str, Any]:
    return tool_call("Bash", command=command, description="contract test command")


def succeeded(run: CliRun) -> CliRun:
    assert run.returncode == 0, run.stderr
    assert run.result["is_error"] is False, run.result
    return run


QUESTIONS = [
    {
        "question": "Which database?",
        "header": "Database",
        "options": [
            {"label": "SQLite", "description": "One file"},
            {"label": "Postgres", "description": "A server"},
        ],
        "multiSelect": False,
    },
    {
        "question": "Which extras?",
        "header": "Extras",
        "options": [
            {"label": "Cache", "description": "Redis"},
            {"label": "Search", "description": "Full text"},
            {"label": "Queue", "description": "Workers"},
        ],
        "multiSelect": True,
    },
]


def test_without_a_prompt_tool_print_mode_refuses_the_builtin_ask_user_question(
    workspace: Workspace,
) -> None:
    run = succeeded(workspace.run(tool_call("AskUserQuestion", questions=QUESTIONS[:1]), QUOTE))
    assert "AskUserQuestion" not in run.init["tools"]
    assert run.model_received() == [{"text": ASK_USER_QUESTION_DISABLED, "is_error": True}]


def test_mcp_servers_in_settings_local_json_are_ignored(workspace: Workspace) -> None:
    workspace.settings_local(
        {"mcpServers": {contract.SERVER_NAME: SERVER_ENTRY}, "enableAllProjectMcpServers": True}
    )
    run = succeeded(workspace.run({"text": "hi"}))
    assert run.connected_servers == []
    assert not [tool for tool in run.init["tools"] if tool.startswith("mcp__")]


@pytest.mark.parametrize("registration", ["mcp_json_with_enable_all", "mcp_config_flag"])
def test_a_server_in_the_workspace_mcp_json_or_given_by_mcp_config_connects(
    workspace: Workspace, registration: str
) -> None:
    args: tuple[str, ...] = ()
    if registration == "mcp_json_with_enable_all":
        workspace.register_in_mcp_json()
        workspace.settings_local({"enableAllProjectMcpServers": True})
    else:
        args = ("--mcp-config", str(workspace.mcp_config_outside()))
    run = succeeded(workspace.run({"text": "hi"}, args=args))
    assert run.connected_servers == [(contract.SERVER_NAME, "connected")]
    assert {NOTE, PEEK, PROMPT_TOOL} <= set(run.init["tools"])


def test_print_mode_connects_a_workspace_mcp_json_server_without_approval_unless_disabled(
    workspace: Workspace,
) -> None:
    # No trust dialog in -p mode: a cloned repository's .mcp.json starts its servers as-is.
    workspace.register_in_mcp_json()
    assert succeeded(workspace.run({"text": "hi"})).connected_servers == [(contract.SERVER_NAME, "connected")]
    workspace.settings_local({"disabledMcpjsonServers": [contract.SERVER_NAME]})
    assert succeeded(workspace.run({"text": "hi"})).connected_servers == []


@pytest.mark.parametrize("granted_by", ["settings_local_allow", "allowed_tools_flag"])
def test_an_mcp_tool_without_an_allow_rule_is_denied_in_print_mode_even_if_read_only(
    workspace: Workspace, granted_by: str
) -> None:
    workspace.register_in_mcp_json()
    args: tuple[str, ...] = ()
    if granted_by == "settings_local_allow":
        workspace.settings_local({"permissions": {"allow": [NOTE]}})
    else:
        args = ("--allowedTools", NOTE)
    run = succeeded(workspace.run(tool_call(PEEK, text="a"), tool_call(NOTE, text="b"), QUOTE, args=args))
    assert run.model_received() == [
        {"text": NOT_GRANTED.format(tool=PEEK), "is_error": True},
        {"text": "noted: b", "is_error": False},
    ]
    assert [d["tool_name"] for d in run.result["permission_denials"]] == [PEEK]


def test_plan_mode_refuses_an_mcp_tool_unless_it_is_annotated_read_only(workspace: Workspace) -> None:
    workspace.register_in_mcp_json()
    workspace.settings_local({"permissions": {"allow": [NOTE, PEEK]}})
    run = succeeded(
        workspace.run(
            tool_call(NOTE, text="a"), tool_call(PEEK, text="b"), QUOTE, args=("--permission-mode", "plan")
        )
    )
    assert run.init["permissionMode"] == "plan"
    assert run.model_received() == [
        {"text": PLAN_MODE_REFUSAL.format(tool=NOTE), "is_error": True},
        {"text": "peeked: b", "is_error": False},
    ]


def test_the_permission_prompt_tool_decides_bash_calls_and_the_model_gets_the_outcome(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    allowed = "touch allowed.txt && echo allowed"
    refused = "touch refused.txt && echo refused"
    run = succeeded(
        workspace.run(
            bash(allowed),
            bash(refused),
            QUOTE,
            args=("--permission-mode", "default", "--permission-prompt-tool", PROMPT_TOOL),
        )
    )
    # The prompt tool needs no allow rule of its own, and gets exactly these three fields.
    first, second = run.tool_use_ids()
    assert workspace.prompt_tool_calls() == [
        {
            "tool_name": "Bash",
            "input": {"command": allowed, "description": "contract test command"},
            "tool_use_id": first,
        },
        {
            "tool_name": "Bash",
            "input": {"command": refused, "description": "contract test command"},
            "tool_use_id": second,
        },
    ]
    # updatedInput is what runs: the prompt tool appended a second echo to the command.
    assert run.model_received() == [
        {"text": "allowed\nrewritten-by-the-prompt-tool", "is_error": False},
        {"text": contract.DENY_MESSAGE, "is_error": True},
    ]
    assert (workspace.root / "allowed.txt").exists()
    assert not (workspace.root / "refused.txt").exists()
    assert [d["tool_use_id"] for d in run.result["permission_denials"]] == [second]


def test_a_read_only_bash_command_runs_without_asking_the_prompt_tool(workspace: Workspace) -> None:
    workspace.register_in_mcp_json()
    run = succeeded(
        workspace.run(
            bash("echo read-only"),
            QUOTE,
            args=("--permission-mode", "default", "--permission-prompt-tool", PROMPT_TOOL),
        )
    )
    assert workspace.prompt_tool_calls() == []
    assert run.model_received() == [{"text": "read-only", "is_error": False}]


def test_with_a_prompt_tool_ask_user_question_is_offered_and_answered_through_updated_input(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    run = succeeded(
        workspace.run(
            tool_call("AskUserQuestion", questions=QUESTIONS),
            QUOTE,
            args=("--permission-prompt-tool", PROMPT_TOOL),
        )
    )
    assert "AskUserQuestion" in run.init["tools"]
    [tool_use_id] = run.tool_use_ids()
    assert workspace.prompt_tool_calls() == [
        {"tool_name": "AskUserQuestion", "input": {"questions": QUESTIONS}, "tool_use_id": tool_use_id}
    ]
    # The prompt tool answered {question: label}, the multi-select one with "Cache, Search".
    assert run.model_received() == [
        {
            "text": 'Your questions have been answered: "Which database?"="Postgres", '
            '"Which extras?"="Cache, Search". You can now continue with these answers in mind.',
            "is_error": False,
        }
    ]


def test_a_deny_without_a_message_is_rejected_as_an_invalid_permission_result_and_nothing_runs(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    command = f"touch bare.txt && {contract.BARE_DENY_MARKER}"
    run = succeeded(workspace.run(bash(command), QUOTE, args=("--permission-prompt-tool", PROMPT_TOOL)))
    assert [call["input"]["command"] for call in workspace.prompt_tool_calls()] == [command]
    assert run.model_received() == [{"text": INVALID_PERMISSION_RESULT, "is_error": True}]
    assert not (workspace.root / "bare.txt").exists()
    # The run goes on: the model got the error and finished its turn.
    assert run.result["subtype"] == "success"


def test_bypass_permissions_is_refused_as_root_with_the_clis_reason_and_runs_otherwise(
    workspace: Workspace,
) -> None:
    run = workspace.run({"text": "bypassed"}, args=("--permission-mode", "bypassPermissions"))
    if os.geteuid() == 0:
        assert (run.returncode, run.stdout, run.stderr) == (1, "", ROOT_REFUSAL)
    else:
        succeeded(run)
        assert run.init["permissionMode"] == "bypassPermissions"
        assert run.result["result"] == "bypassed"
