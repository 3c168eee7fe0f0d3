"""The Claude Code contract: what the pinned bundled CLI does, which the app relies on.

Each test runs the real CLI (``claude_cli``) against the scripted model in a bare workspace,
with the app's own environment (``child_env``), and asserts on what the CLI does: the
``system`` init line, the exit, and the tool results the model received (the scripted model
quotes them back in its last reply). A CLI upgrade that changes one of these facts fails here.
The MCP server used is ``contract_mcp_server.py`` beside this file (server name ``contract``).
The permission-rule tests at the end pin what an "Always allow" of a tool approval relies on.
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
        # As the app sets it: MCP tools' schemas are sent up front, not behind ToolSearch, and
        # the turn starts only once the servers are connected (see test_mcp_startup.py): under
        # the parallel suite's load a server is otherwise still "pending" in the init line.
        self.env["ENABLE_TOOL_SEARCH"] = "false"
        self.env["MCP_CONNECTION_NONBLOCKING"] = "false"
        self.env[contract.RECORD_ENV_VAR] = str(self.record)

    def register_in_mcp_json(self) -> None:
        (self.root / ".mcp.json").write_text(json.dumps(MCP_CONFIG))

    def settings_local(self, data: dict[str, Any]) -> None:
        (self.root / ".claude" / "settings.local.json").write_text(json.dumps(data))

    def settings_json(self, data: dict[str, Any]) -> None:
        """The shared project settings (``.claude/settings.json``), as a cloned repository has them."""
        (self.root / ".claude" / "settings.json").write_text(json.dumps(data))

    def decide_by_table(self, *entries: dict[str, Any]) -> None:
        """Entries for the prompt tool's decision table (``contract.table_decision``)."""
        path = self.root.parent / "decisions.json"
        path.write_text(json.dumps(list(entries)))
        self.env[contract.DECISIONS_ENV_VAR] = str(path)

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

    def asked_commands(self) -> list[str]:
        """The Bash commands the prompt tool was asked about, in order."""
        return [call["input"]["command"] for call in self.prompt_tool_calls() if call["tool_name"] == "Bash"]

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


def denied_ids(run: CliRun) -> list[str]:
    return [denial["tool_use_id"] for denial in run.result["permission_denials"]]


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


# --- Permission rules: what an "Always allow" can rely on --------------------------------

PROMPTED = ("--permission-mode", "default", "--permission-prompt-tool", PROMPT_TOOL)
NO_OUTPUT = {"text": "(Bash completed with no output)", "is_error": False}
REFUSED = {"text": contract.DENY_MESSAGE, "is_error": True}
RULE_DENIED = "Permission to use Bash with command {command} has been denied."
FILE_RULE_DENIED = (
    "<tool_use_error>File is in a directory that is denied by your permission settings.</tool_use_error>"
)
UNTRUSTED_ALLOW_IGNORED = (
    "Ignoring 1 permissions.allow entry from .claude/settings.json: this workspace has not been "
    "trusted. Run Claude Code interactively here once and accept the trust dialog, or set "
    'projects["{root}"].hasTrustDialogAccepted: true in {home}/.claude.json.\n'
)
# touch, not echo: a read-only command like `echo ruled now` runs unasked with or without a rule.
CHAINED = [
    "touch ruled now && touch pwned",
    "touch ruled now; touch pwned",
    "touch ruled now || touch pwned",
    "touch ruled now | touch pwned",
    "touch ruled now & touch pwned",
    "touch ruled now $(touch pwned)",
    "touch ruled now `touch pwned`",
    "touch ruled now\ntouch pwned",
    "touch ruled now > pwned",
    "echo ruled now && touch pwned",
    "echo ruled; touch pwned",
]


def allow_with_rule(rule_content: str, destination: str) -> dict[str, Any]:
    """A prompt tool's allow that also adds ``Bash(<rule_content>)`` at ``destination``."""
    rule = {"toolName": "Bash", "ruleContent": rule_content}
    update = {"type": "addRules", "rules": [rule], "behavior": "allow", "destination": destination}
    return {"behavior": "allow", "updatedPermissions": [update]}


@pytest.mark.parametrize("granted_by", ["settings_local_allow", "settings_flag"])
def test_a_bash_prefix_rule_allows_its_command_unasked_but_not_a_chained_or_redirected_one(
    workspace: Workspace, granted_by: str
) -> None:
    workspace.register_in_mcp_json()
    rules = {"permissions": {"allow": ["Bash(touch ruled:*)", "Bash(touch also:*)", "Bash(echo ruled:*)"]}}
    args: tuple[str, ...] = PROMPTED
    if granted_by == "settings_local_allow":
        workspace.settings_local(rules)
    else:
        args += ("--settings", json.dumps(rules))
    commands = [
        "echo ruled now",
        "touch ruled now",
        "touch ruled.txt",
        *CHAINED,
        "touch ruled now && touch also this",
    ]
    run = succeeded(workspace.run(*(bash(c) for c in commands), QUOTE, args=args))
    # The prefix ends at a word: `touch ruled.txt` is not covered. Every chained part is checked
    # on its own, so a chain runs unasked only when each part has a rule.
    assert workspace.asked_commands() == ["touch ruled.txt", *CHAINED]
    ran = [{"text": "ruled now", "is_error": False}, NO_OUTPUT]
    assert run.model_received() == [*ran, *[REFUSED] * (1 + len(CHAINED)), NO_OUTPUT]
    assert not (workspace.root / "pwned").exists()
    assert {"now", "this"} <= {path.name for path in workspace.root.iterdir()}
    assert len(denied_ids(run)) == 1 + len(CHAINED)


@pytest.mark.parametrize(
    ("rule", "asked"),
    [
        ("Bash(touch ruled:*)", ["touch ruled.txt", "touch ruled now && touch pwned"]),
        ("Bash(touch ruled *)", ["touch ruled.txt", "touch ruled now && touch pwned"]),
        ("Bash(touch ruled*)", ["touch ruled now && touch pwned"]),
        ("Bash(touch ruled now)", ["touch ruled", "touch ruled.txt", "touch ruled now && touch pwned"]),
        ("Bash(touch:*)", []),
    ],
)
def test_bash_rule_syntaxes_cover_these_commands(workspace: Workspace, rule: str, asked: list[str]) -> None:
    workspace.register_in_mcp_json()
    workspace.settings_local({"permissions": {"allow": [rule]}})
    commands = ["touch ruled now", "touch ruled", "touch ruled.txt", "touch ruled now && touch pwned"]
    succeeded(workspace.run(*(bash(c) for c in commands), QUOTE, args=PROMPTED))
    assert workspace.asked_commands() == asked
    # `Bash(touch:*)` covers both parts of the chain, so even that one ran.
    assert (workspace.root / "pwned").exists() is (rule == "Bash(touch:*)")


def test_a_session_rule_from_the_prompt_tool_covers_the_rest_of_the_turn_but_not_a_resumed_run(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    workspace.decide_by_table(
        {
            "tool_name": "Bash",
            "contains": "touch twice one",
            "decision": allow_with_rule("touch twice:*", "session"),
        }
    )
    run = succeeded(
        workspace.run(
            bash("touch twice one"),
            bash("touch twice two"),
            bash("touch twice three && touch pwned"),
            QUOTE,
            args=PROMPTED,
        )
    )
    assert workspace.asked_commands() == ["touch twice one", "touch twice three && touch pwned"]
    assert run.model_received() == [NO_OUTPUT, NO_OUTPUT, REFUSED]
    assert not (workspace.root / "pwned").exists()
    # Nothing is written anywhere; the rule lives in the CLI process only.
    assert sorted(path.name for path in (workspace.root / ".claude").iterdir()) == []
    assert not (Path(workspace.env["HOME"]) / ".claude" / "settings.json").exists()
    resumed = succeeded(
        workspace.run(bash("touch twice four"), QUOTE, args=(*PROMPTED, "--resume", run.result["session_id"]))
    )
    assert workspace.asked_commands()[-1] == "touch twice four"
    assert resumed.model_received() == [REFUSED]


def test_a_local_settings_rule_from_the_prompt_tool_is_merged_into_the_workspace_settings_local_json(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    workspace.settings_local(
        {"enableAllProjectMcpServers": True, "permissions": {"allow": [NOTE], "deny": ["Read(secret.txt)"]}}
    )
    workspace.decide_by_table(
        {
            "tool_name": "Bash",
            "contains": "touch twice one",
            "decision": allow_with_rule("touch twice:*", "localSettings"),
        }
    )
    run = succeeded(workspace.run(bash("touch twice one"), bash("touch twice two"), QUOTE, args=PROMPTED))
    assert workspace.asked_commands() == ["touch twice one"]
    assert run.model_received() == [NO_OUTPUT, NO_OUTPUT]
    # The CLI rewrites the whole file: keys kept (permissions moved first), the rule appended,
    # two-space indent and a final newline.
    merged = {
        "permissions": {"allow": [NOTE, "Bash(touch twice:*)"], "deny": ["Read(secret.txt)"]},
        "enableAllProjectMcpServers": True,
    }
    local = workspace.root / ".claude" / "settings.local.json"
    assert local.read_text() == json.dumps(merged, indent=2) + "\n"
    assert sorted(path.name for path in (workspace.root / ".claude").iterdir()) == ["settings.local.json"]
    # The next run starts with the rule.
    succeeded(workspace.run(bash("touch twice three"), QUOTE, args=PROMPTED))
    assert workspace.asked_commands() == ["touch twice one"]


def test_a_user_settings_rule_from_the_prompt_tool_is_written_to_the_clis_home(workspace: Workspace) -> None:
    workspace.register_in_mcp_json()
    workspace.decide_by_table(
        {
            "tool_name": "Bash",
            "contains": "touch twice one",
            "decision": allow_with_rule("touch twice:*", "userSettings"),
        }
    )
    run = succeeded(workspace.run(bash("touch twice one"), bash("touch twice two"), QUOTE, args=PROMPTED))
    assert workspace.asked_commands() == ["touch twice one"]
    assert run.model_received() == [NO_OUTPUT, NO_OUTPUT]
    written = Path(workspace.env["HOME"]) / ".claude" / "settings.json"
    assert json.loads(written.read_text()) == {"permissions": {"allow": ["Bash(touch twice:*)"]}}
    assert sorted(path.name for path in (workspace.root / ".claude").iterdir()) == []


def test_a_project_settings_rule_from_the_prompt_tool_is_written_to_settings_json_and_then_ignored(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    workspace.decide_by_table(
        {
            "tool_name": "Bash",
            "contains": "touch twice one",
            "decision": allow_with_rule("touch twice:*", "projectSettings"),
        }
    )
    run = succeeded(workspace.run(bash("touch twice one"), bash("touch twice two"), QUOTE, args=PROMPTED))
    # Written, but a workspace nobody accepted the trust dialog for ignores its allow rules.
    written = workspace.root / ".claude" / "settings.json"
    assert json.loads(written.read_text()) == {"permissions": {"allow": ["Bash(touch twice:*)"]}}
    assert workspace.asked_commands() == ["touch twice one", "touch twice two"]
    assert run.model_received() == [NO_OUTPUT, REFUSED]
    assert run.stderr == UNTRUSTED_ALLOW_IGNORED.format(root=workspace.root, home=workspace.env["HOME"])


def test_the_workspace_settings_json_keeps_its_deny_rules_but_its_allow_rules_are_ignored(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    workspace.settings_json(
        {"permissions": {"allow": ["Bash(touch ruled:*)"], "deny": ["Bash(touch banned:*)"]}}
    )
    workspace.settings_local({"permissions": {"allow": ["Bash(touch banned:*)"]}})
    run = succeeded(workspace.run(bash("touch ruled now"), bash("touch banned now"), QUOTE, args=PROMPTED))
    assert workspace.asked_commands() == ["touch ruled now"]
    assert run.model_received() == [
        REFUSED,
        {"text": RULE_DENIED.format(command="touch banned now"), "is_error": True},
    ]
    assert run.stderr == UNTRUSTED_ALLOW_IGNORED.format(root=workspace.root, home=workspace.env["HOME"])


@pytest.mark.parametrize(
    ("granted_by", "rule", "matches"),
    [
        ("settings_local_allow", "Edit(README.md)", True),
        ("settings_local_allow", "Edit(./README.md)", True),
        ("settings_local_allow", "Edit(/README.md)", True),
        ("settings_local_allow", "Edit({root}/README.md)", False),
        ("settings_local_allow", "Edit(/{root}/README.md)", True),
        ("settings_local_allow", "Edit(*.md)", True),
        ("settings_local_allow", "Edit(other.md)", False),
        ("settings_flag", "Edit(README.md)", True),
        ("settings_flag", "Edit(/README.md)", False),
        ("settings_flag", "Edit({root}/README.md)", False),
        ("settings_flag", "Edit(/{root}/README.md)", True),
    ],
)
def test_edit_rule_paths_that_cover_an_edit_of_the_workspace_readme(
    workspace: Workspace, granted_by: str, rule: str, matches: bool
) -> None:
    """A path is relative to the working directory; `/x` is relative to the settings file's
    project (so it means nothing in --settings); `//abs` is absolute, `/abs` is not."""
    workspace.register_in_mcp_json()
    readme = workspace.root / "README.md"
    readme.write_text("old text\n")
    rules = {"permissions": {"allow": [rule.format(root=workspace.root)]}}
    args: tuple[str, ...] = PROMPTED
    if granted_by == "settings_local_allow":
        workspace.settings_local(rules)
    else:
        args += ("--settings", json.dumps(rules))
    run = succeeded(
        workspace.run(
            tool_call("Read", file_path=str(readme)),
            tool_call("Edit", file_path=str(readme), old_string="old", new_string="new"),
            QUOTE,
            args=args,
        )
    )
    asked = [call["tool_name"] for call in workspace.prompt_tool_calls()]
    assert asked == ([] if matches else ["Edit"])
    assert readme.read_text() == ("new text\n" if matches else "old text\n")
    assert run.model_received()[1]["is_error"] is not matches


def test_an_edit_rule_also_covers_a_write_of_a_new_file(workspace: Workspace) -> None:
    workspace.register_in_mcp_json()
    workspace.settings_local({"permissions": {"allow": ["Edit(*.md)"]}})
    run = succeeded(
        workspace.run(
            tool_call("Write", file_path=str(workspace.root / "NEW.md"), content="x"),
            tool_call("Write", file_path=str(workspace.root / "NEW.txt"), content="x"),
            QUOTE,
            args=PROMPTED,
        )
    )
    assert [call["input"]["file_path"] for call in workspace.prompt_tool_calls()] == [
        str(workspace.root / "NEW.txt")
    ]
    assert (workspace.root / "NEW.md").read_text() == "x"
    assert run.model_received()[1] == REFUSED


def test_a_webfetch_domain_rule_is_accepted_and_malformed_rules_are_skipped_silently(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    malformed = ["Bash(touch ruled:*", "Nonsense(x)", "WebFetch(example.org)"]
    workspace.settings_local(
        {"permissions": {"allow": ["WebFetch(domain:example.com)", *malformed, "Bash(touch ruled:*)"]}}
    )
    run = succeeded(
        workspace.run(
            tool_call("WebFetch", url="https://example.com/", prompt="title?"),
            tool_call("WebFetch", url="https://example.org/", prompt="title?"),
            bash("touch ruled now"),
            QUOTE,
            args=PROMPTED,
        )
    )
    com, org, _ = run.tool_use_ids()
    # example.com is not asked about; what the fetch itself returns depends on the network.
    assert [call["input"].get("url") for call in workspace.prompt_tool_calls()] == ["https://example.org/"]
    assert denied_ids(run) == [org]
    assert com not in denied_ids(run)
    assert run.model_received()[1:] == [REFUSED, NO_OUTPUT]
    assert run.stderr == ""


@pytest.mark.parametrize(
    ("rule", "asked"),
    [
        (NOTE, [PEEK]),
        ("mcp__contract", []),
        ("mcp__contract__*", []),
        (f"{NOTE}(x)", [NOTE, PEEK]),
    ],
)
def test_an_mcp_tool_rule_allows_that_tool_and_a_server_rule_all_its_tools(
    workspace: Workspace, rule: str, asked: list[str]
) -> None:
    workspace.register_in_mcp_json()
    workspace.settings_local({"permissions": {"allow": [rule]}})
    run = succeeded(workspace.run(tool_call(NOTE, text="a"), tool_call(PEEK, text="b"), QUOTE, args=PROMPTED))
    # In default mode even the read-only peek is asked about.
    assert [call["tool_name"] for call in workspace.prompt_tool_calls()] == asked
    ran = {NOTE: {"text": "noted: a", "is_error": False}, PEEK: {"text": "peeked: b", "is_error": False}}
    assert run.model_received() == [REFUSED if tool in asked else ran[tool] for tool in (NOTE, PEEK)]


def test_deny_rules_refuse_without_asking_the_prompt_tool_even_under_a_broad_allow(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    readme = workspace.root / "README.md"
    readme.write_text("old\n")
    workspace.settings_local(
        {
            "permissions": {
                "allow": ["Bash", "Edit", NOTE],
                "deny": ["Bash(touch denied:*)", "Edit(README.md)", NOTE],
            }
        }
    )
    chained = "touch fine && touch denied later"
    run = succeeded(
        workspace.run(
            bash("touch denied now"),
            bash(chained),
            tool_call("Read", file_path=str(readme)),
            tool_call("Edit", file_path=str(readme), old_string="old", new_string="new"),
            tool_call(NOTE, text="a"),
            QUOTE,
            args=PROMPTED,
        )
    )
    assert workspace.prompt_tool_calls() == []
    assert run.model_received() == [
        {"text": RULE_DENIED.format(command="touch denied now"), "is_error": True},
        {"text": RULE_DENIED.format(command=chained), "is_error": True},
        {"text": "1\told\n2\t", "is_error": False},
        {"text": FILE_RULE_DENIED, "is_error": True},
        {"text": f"<tool_use_error>Error: No such tool available: {NOTE}</tool_use_error>", "is_error": True},
    ]
    # A denied MCP tool is not offered at all, so its call is no permission denial.
    assert NOTE not in run.init["tools"]
    denied_now, denied_chain, _, edit, _ = run.tool_use_ids()
    assert denied_ids(run) == [denied_now, denied_chain, edit]
    assert readme.read_text() == "old\n"
    assert not (workspace.root / "fine").exists()


def test_a_read_deny_rule_also_refuses_bash_reads_of_that_path_but_not_through_a_glob(
    workspace: Workspace,
) -> None:
    workspace.register_in_mcp_json()
    secret = workspace.root / "secret.txt"
    secret.write_text("hush\n")
    workspace.settings_local({"permissions": {"deny": ["Read(secret.txt)"]}})
    commands = ["cat secret.txt", "cat ./secret.txt", "head -1 secret.txt", "cat sec*.txt"]
    run = succeeded(
        workspace.run(
            tool_call("Read", file_path=str(secret)), *(bash(c) for c in commands), QUOTE, args=PROMPTED
        )
    )
    assert workspace.prompt_tool_calls() == []
    # Deny rules are a second line only: the glob reads the file. The sandbox is the boundary.
    assert run.model_received() == [
        {"text": FILE_RULE_DENIED, "is_error": True},
        *({"text": RULE_DENIED.format(command=c), "is_error": True} for c in commands[:3]),
        {"text": "hush", "is_error": False},
    ]
