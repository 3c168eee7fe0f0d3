"""``manage.py sync_workspaces``: rewrites generated files and reports what changed."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from promptmgr.models import Project
from promptmgr.workspaces import workspace_path
from tests.helpers import make_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]


def _run(*args: str) -> list[str]:
    out = StringIO()
    call_command("sync_workspaces", *args, stdout=out)
    return out.getvalue().splitlines()


@pytest.fixture
def unsynced(alice: Any) -> Project:
    project: Project = make_project(owner=alice, sync=False)
    return project


def test_it_prints_each_created_file_and_a_summary(unsynced: Project) -> None:
    root = workspace_path(unsynced)

    lines = _run()

    assert sorted(lines[:-1]) == [
        f"created {root / '.claude' / 'settings.local.json'}",
        f"created {root / '.mcp.json'}",
        f"created {root / 'CLAUDE.local.md'}",
    ]
    assert lines[-1] == "3 file(s) changed in 1 project(s)"
    assert (root / "CLAUDE.local.md").exists()


def test_a_second_run_changes_nothing(unsynced: Project) -> None:
    _run()

    assert _run() == ["0 file(s) changed in 0 project(s)"]


def test_it_reports_updates_and_deletions_after_ask_user_is_switched_off(
    unsynced: Project, settings: Any
) -> None:
    _run()
    settings.ASK_USER_ENABLED = False
    root = workspace_path(unsynced)

    lines = _run()

    assert sorted(lines[:-1]) == [
        f"deleted {root / '.mcp.json'}",
        f"updated {root / '.claude' / 'settings.local.json'}",
    ]
    assert lines[-1] == "2 file(s) changed in 1 project(s)"
    assert not (root / ".mcp.json").exists()


def test_dry_run_reports_and_writes_nothing(unsynced: Project) -> None:
    root = workspace_path(unsynced)

    lines = _run("--dry-run")

    assert sorted(lines[:-1]) == [
        f"would create {root / '.claude' / 'settings.local.json'}",
        f"would create {root / '.mcp.json'}",
        f"would create {root / 'CLAUDE.local.md'}",
    ]
    assert lines[-1] == "3 file(s) would change in 1 project(s) (dry run, nothing written)"
    assert not root.exists()


def test_project_option_syncs_only_that_project(unsynced: Project, bob: Any) -> None:
    other = make_project(owner=bob, sync=False)

    lines = _run("--project", str(other.pk))

    assert lines[-1] == "3 file(s) changed in 1 project(s)"
    assert all(str(workspace_path(other)) in line for line in lines[:-1])
    assert not workspace_path(unsynced).exists()


def test_unknown_project_is_a_command_error(unsynced: Project) -> None:
    with pytest.raises(CommandError, match=f"There is no project with id {unsynced.pk + 100}."):
        call_command("sync_workspaces", "--project", str(unsynced.pk + 100), stdout=StringIO())


def test_verbosity_zero_prints_nothing_but_still_syncs(unsynced: Project) -> None:
    assert _run("--verbosity", "0") == []
    assert (workspace_path(unsynced) / "CLAUDE.local.md").exists()


def test_verbosity_two_names_projects_that_are_up_to_date(unsynced: Project) -> None:
    _run()

    assert _run("--verbosity", "2") == [
        f"project {unsynced.pk} ({unsynced.name}): up to date",
        "0 file(s) changed in 0 project(s)",
    ]


def test_no_projects_is_fine(db: Any) -> None:
    assert _run() == ["0 file(s) changed in 0 project(s)"]
