"""Cloning a project's repository: real git from a local bare repository, no background thread
(``workspace_clone`` is what the thread runs)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from promptmgr.git import command, repository
from promptmgr.models import Project, WorkspaceStatus
from promptmgr.services import git_workspace
from promptmgr.services.projects import project_create
from promptmgr.workspaces import CONTEXT_FILE, GENERATED_PATHS, workspace_path
from tests.workspaces.support import README, REPO_CLAUDE_MD, cloned_project, git, make_origin, status

pytestmark = [pytest.mark.django_db, pytest.mark.unit]


def test_a_clone_is_ready_on_the_origins_default_branch_with_its_files(alice: Any, origin: Path) -> None:
    project = project_create(owner=alice, name="App", git_url=f"file://{origin}", context="Use tabs.")
    assert project.workspace_status == WorkspaceStatus.CLONING
    assert not workspace_path(project).exists()

    git_workspace.workspace_clone(project.pk)

    project.refresh_from_db()
    root = workspace_path(project)
    assert (project.workspace_status, project.workspace_error, project.default_branch) == (
        "ready",
        "",
        "trunk",
    )
    assert (root / "README.md").read_text() == README
    assert (root / "CLAUDE.md").read_text() == REPO_CLAUDE_MD
    assert "Use tabs." in (root / CONTEXT_FILE).read_text()
    assert (root / ".mcp.json").exists()
    # The generated files are there, and git does not see them.
    assert status(root) == ""
    exclude = (root / ".git" / "info" / "exclude").read_text().splitlines()
    assert all(f"/{path}" in exclude for path in GENERATED_PATHS)


def test_a_ref_picks_the_branch_or_tag_to_start_from(alice: Any, origin: Path, tmp_path: Path) -> None:
    work = tmp_path / "origin.git-work"
    git(work, "switch", "--quiet", "-c", "release")
    (work / "README.md").write_text("release notes\n")
    git(work, "commit", "--quiet", "-am", "Release")
    git(work, "tag", "v1")
    git(work, "push", "--quiet", str(origin), "release", "v1")

    on_branch = cloned_project(alice, origin, name="B", git_ref="release")
    on_tag = cloned_project(alice, origin, name="T", git_ref="v1")

    assert on_branch.default_branch == "release"
    assert on_tag.default_branch == "pm/from-v1"
    for project in (on_branch, on_tag):
        assert (workspace_path(project) / "README.md").read_text() == "release notes\n"


def test_an_empty_repository_gets_a_first_commit(alice: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty.git"
    empty.mkdir()
    git(empty, "init", "--quiet", "--bare", "--initial-branch=main")

    project = cloned_project(alice, empty)

    assert project.workspace_status == WorkspaceStatus.READY
    assert git(workspace_path(project), "log", "--format=%s").strip() == repository.FIRST_COMMIT


def test_a_failing_clone_leaves_no_directory_and_says_why(alice: Any, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-repo.git"
    project = project_create(owner=alice, name="Broken", git_url=f"file://{missing}")

    git_workspace.workspace_clone(project.pk)

    project.refresh_from_db()
    assert project.workspace_status == WorkspaceStatus.FAILED
    assert project.workspace_error == (
        f"Could not clone file://{missing}: '{missing}' does not appear to be a git repository; "
        "Could not read from remote repository."
    )
    projects_dir = workspace_path(project).parent
    assert not workspace_path(project).exists()
    assert list(projects_dir.iterdir()) == []  # no staging directory left either


def test_a_clone_past_the_size_limit_is_stopped_and_leaves_nothing(
    alice: Any, tmp_path: Path, settings: Any
) -> None:
    import os

    big = make_origin(tmp_path / "big.git", {"blob.bin": os.urandom(3 * 1024 * 1024).hex()})
    settings.WORKSPACE_CLONE_MAX_MB = 1

    project = cloned_project(alice, big)

    assert project.workspace_status == WorkspaceStatus.FAILED
    assert "size limit of 1 MB" in project.workspace_error
    assert list(workspace_path(project).parent.iterdir()) == []


def test_a_stopped_command_takes_its_whole_process_group_with_it(tmp_path: Path) -> None:
    marker = tmp_path / "child-still-running"
    started = time.monotonic()
    result = command.run_bounded(
        ["/bin/sh", "-c", f"(sleep 3; touch {marker}) & sleep 30"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        timeout=0.5,
    )
    assert result.stopped == "time limit of 0.5 s"
    assert time.monotonic() - started < 5
    time.sleep(3.5)
    assert not marker.exists()


def test_git_runs_with_no_hooks_and_no_config_of_the_servers_user(tmp_path: Path, settings: Any) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet")
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    ran = tmp_path / "hook-ran"
    hook = hooks / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\n")
    hook.chmod(0o755)

    command.run_git(["commit", "--quiet", "--allow-empty", "-m", "x"], cwd=repo)

    assert not ran.exists()
    env = command.git_env()
    assert env["GIT_ALLOW_PROTOCOL"] == ":".join(settings.WORKSPACE_GIT_SCHEMES)
    assert (env["GIT_CONFIG_NOSYSTEM"], env["GIT_CONFIG_GLOBAL"], env["GIT_TERMINAL_PROMPT"]) == (
        "1",
        "/dev/null",
        "0",
    )
    assert set(env) >= {"PATH", "HOME"} and "SECRET_KEY" not in env


def test_a_retry_after_a_failure_clones_the_fixed_url(alice: Any, origin: Path, tmp_path: Path) -> None:
    from promptmgr.services.projects import project_update

    project = project_create(owner=alice, name="Typo", git_url=f"file://{tmp_path}/typo.git")
    git_workspace.workspace_clone(project.pk)
    project.refresh_from_db()
    assert project.workspace_status == WorkspaceStatus.FAILED

    project_update(project=project, actor=alice, git_url=f"file://{origin}")
    assert Project.objects.get(pk=project.pk).workspace_status == WorkspaceStatus.CLONING
    git_workspace.workspace_clone(project.pk)

    project.refresh_from_db()
    assert (project.workspace_status, project.git_url) == ("ready", f"file://{origin}")


def test_a_clone_no_worker_finished_becomes_failed_and_retryable(
    alice: Any, origin: Path, settings: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    project = project_create(owner=alice, name="Stuck", git_url=f"file://{origin}")
    later = timezone.now() + timedelta(seconds=settings.WORKSPACE_CLONE_TIMEOUT + 120)

    assert git_workspace.clones_recover_interrupted(now=later) == [project.pk]

    project.refresh_from_db()
    assert (project.workspace_status, project.workspace_error) == ("failed", git_workspace.MSG_INTERRUPTED)
    git_workspace.workspace_retry(project=project)
    git_workspace.workspace_clone(project.pk)
    project.refresh_from_db()
    assert project.workspace_status == WorkspaceStatus.READY


def test_a_settings_change_during_the_clone_does_not_undo_its_end(alice: Any, origin: Path) -> None:
    from promptmgr.services.projects import project_update

    project = project_create(owner=alice, name="Busy", git_url=f"file://{origin}")
    seen_while_cloning = Project.objects.get(pk=project.pk)
    git_workspace.workspace_clone(project.pk)  # the clone ends while the page is open

    project_update(project=seen_while_cloning, actor=alice, context="Edited meanwhile.")

    saved = Project.objects.get(pk=project.pk)
    assert (saved.workspace_status, saved.default_branch, saved.context) == (
        "ready",
        "trunk",
        "Edited meanwhile.",
    )
