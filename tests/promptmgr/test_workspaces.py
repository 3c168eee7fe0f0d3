"""The files each project's workspace gets: CLAUDE.local.md and the ask-user MCP registration."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Project
from promptmgr.services.projects import project_update
from promptmgr.workspaces import CLAUDE_MD_HEADER, FileChange, workspace_path, workspace_sync
from tests.helpers import make_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

ASK_USER_SERVER = {"type": "stdio", "command": sys.executable, "args": ["-P", "-m", "mcp_server"]}
REGISTERED_SETTINGS = {
    "enabledMcpjsonServers": ["ask-user"],
    "permissions": {"allow": ["mcp__ask-user__ask_user"]},
}
UNREGISTERED_SETTINGS: dict[str, Any] = {"enabledMcpjsonServers": [], "permissions": {"allow": []}}


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def unsynced(alice: Any) -> Project:
    project: Project = make_project(owner=alice, context="  Write tests first.\n", sync=False)
    return project


def test_claude_md_holds_the_project_context(unsynced: Project) -> None:
    workspace_sync(project=unsynced)

    text = (workspace_path(unsynced) / "CLAUDE.local.md").read_text()
    assert text == CLAUDE_MD_HEADER + "\nWrite tests first.\n"


def test_empty_context_gives_a_claude_md_with_only_the_header(alice: Any) -> None:
    project = make_project(owner=alice, context="")

    assert (workspace_path(project) / "CLAUDE.local.md").read_text() == CLAUDE_MD_HEADER


def test_cli_project_registers_and_allows_the_ask_user_server(unsynced: Project) -> None:
    changes = workspace_sync(project=unsynced)

    root = workspace_path(unsynced)
    assert _json(root / ".mcp.json") == {"mcpServers": {"ask-user": ASK_USER_SERVER}}
    assert _json(root / ".claude" / "settings.local.json") == REGISTERED_SETTINGS
    assert sorted(str(c.path.relative_to(root)) for c in changes) == [
        ".claude/settings.local.json",
        ".mcp.json",
        "CLAUDE.local.md",
    ]
    assert {c.action for c in changes} == {"created"}


@pytest.mark.parametrize(
    "fields",
    [{"ask_user_enabled": False}, {"engine": "sdk"}],
    ids=["switched-off-for-the-project", "sdk-engine"],
)
def test_ask_user_server_is_not_registered(alice: Any, fields: dict[str, Any]) -> None:
    project = make_project(owner=alice, **fields)

    root = workspace_path(project)
    assert not (root / ".mcp.json").exists()
    assert _json(root / ".claude" / "settings.local.json") == UNREGISTERED_SETTINGS


def test_global_switch_off_unregisters_every_project(alice: Any, settings: Any) -> None:
    project = make_project(owner=alice)
    root = workspace_path(project)
    settings.ASK_USER_ENABLED = False

    changes = workspace_sync(project=project)

    assert not (root / ".mcp.json").exists()
    assert _json(root / ".claude" / "settings.local.json") == UNREGISTERED_SETTINGS
    assert sorted((c.path.name, c.action) for c in changes) == [
        (".mcp.json", "deleted"),
        ("settings.local.json", "updated"),
    ]


def test_switching_ask_user_off_and_on_through_the_service(alice: Any) -> None:
    project = make_project(owner=alice)
    root = workspace_path(project)

    project_update(project=project, ask_user_enabled=False)
    assert not (root / ".mcp.json").exists()

    project_update(project=project, ask_user_enabled=True)
    assert _json(root / ".mcp.json") == {"mcpServers": {"ask-user": ASK_USER_SERVER}}
    assert _json(root / ".claude" / "settings.local.json") == REGISTERED_SETTINGS


def test_users_own_servers_and_rules_are_kept(unsynced: Project) -> None:
    root = workspace_path(unsynced)
    (root / ".claude").mkdir(parents=True)
    own_server = {"type": "stdio", "command": "my-tool", "args": []}
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"mine": own_server}}))
    (root / ".claude" / "settings.local.json").write_text(
        json.dumps(
            {
                "enabledMcpjsonServers": ["mine"],
                "permissions": {"allow": ["Bash(ls:*)"], "deny": ["WebFetch"]},
                "model": "opus",
            }
        )
    )

    workspace_sync(project=unsynced)

    assert _json(root / ".mcp.json") == {"mcpServers": {"mine": own_server, "ask-user": ASK_USER_SERVER}}
    assert _json(root / ".claude" / "settings.local.json") == {
        "enabledMcpjsonServers": ["mine", "ask-user"],
        "permissions": {"allow": ["Bash(ls:*)", "mcp__ask-user__ask_user"], "deny": ["WebFetch"]},
        "model": "opus",
    }

    project_update(project=unsynced, ask_user_enabled=False)

    assert _json(root / ".mcp.json") == {"mcpServers": {"mine": own_server}}
    assert _json(root / ".claude" / "settings.local.json") == {
        "enabledMcpjsonServers": ["mine"],
        "permissions": {"allow": ["Bash(ls:*)"], "deny": ["WebFetch"]},
        "model": "opus",
    }


def test_unrelated_files_are_untouched(unsynced: Project) -> None:
    root = workspace_path(unsynced)
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text('{"shared": true}\n')

    workspace_sync(project=unsynced)
    project_update(project=unsynced, ask_user_enabled=False, context="Changed")

    assert (root / "src" / "app.py").read_text() == "print('hi')\n"
    assert (root / ".claude" / "settings.json").read_text() == '{"shared": true}\n'


def test_a_broken_json_file_is_kept_aside_before_it_is_regenerated(unsynced: Project) -> None:
    root = workspace_path(unsynced)
    (root / ".claude").mkdir(parents=True)
    broken = '{"permissions": {"allow": ["Bash(npm:*)"]},,}\n'
    (root / ".claude" / "settings.local.json").write_text(broken)
    (root / ".mcp.json").write_text("[1, 2]\n")

    changes = workspace_sync(project=unsynced)

    assert (root / ".claude" / "settings.local.json.invalid").read_text() == broken
    assert (root / ".mcp.json.invalid").read_text() == "[1, 2]\n"
    assert _json(root / ".claude" / "settings.local.json") == REGISTERED_SETTINGS
    assert _json(root / ".mcp.json") == {"mcpServers": {"ask-user": ASK_USER_SERVER}}
    assert FileChange(root / ".claude" / "settings.local.json.invalid", "created") in changes
    assert FileChange(root / ".mcp.json.invalid", "created") in changes
    assert workspace_sync(project=unsynced) == []


def test_second_sync_reports_no_changes_and_rewrites_nothing(unsynced: Project) -> None:
    assert workspace_sync(project=unsynced)
    root = workspace_path(unsynced)
    mtimes = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}

    assert workspace_sync(project=unsynced) == []
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == mtimes


def test_dry_run_reports_but_writes_nothing(unsynced: Project) -> None:
    changes = workspace_sync(project=unsynced, dry_run=True)

    assert {c.action for c in changes} == {"created"}
    assert len(changes) == 3
    assert not workspace_path(unsynced).exists()


def test_writes_leave_no_temporary_files(unsynced: Project) -> None:
    workspace_sync(project=unsynced)
    project_update(project=unsynced, context="Changed")

    root = workspace_path(unsynced)
    assert sorted(_files(root)) == [".claude/settings.local.json", ".mcp.json", "CLAUDE.local.md"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary_file(
    unsynced: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace_sync(project=unsynced)
    root = workspace_path(unsynced)
    before = _files(root)

    def fail(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    unsynced.context = "Never written"
    with pytest.raises(OSError, match="disk full"):
        workspace_sync(project=unsynced)

    assert _files(root) == before


def test_each_project_has_its_own_directory(alice: Any, bob: Any) -> None:
    first = make_project(owner=alice, context="first")
    second = make_project(owner=bob, context="second")

    assert workspace_path(first) != workspace_path(second)
    assert "first" in (workspace_path(first) / "CLAUDE.local.md").read_text()
    assert "second" in (workspace_path(second) / "CLAUDE.local.md").read_text()


def test_file_changes_name_absolute_paths(unsynced: Project) -> None:
    changes = workspace_sync(project=unsynced)

    assert all(isinstance(c, FileChange) and c.path.is_absolute() for c in changes)
