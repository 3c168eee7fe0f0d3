"""Plain helpers for the changes and file-browser tests: real git repositories in tmp dirs."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promptmgr.models import Conversation, Run
from promptmgr.services import changes, run_state
from promptmgr.services.run_state import Outcome
from promptmgr.workspaces import workspace_path
from tests.helpers import make_project

IDENTITY = ["-c", "user.name=Tester", "-c", "user.email=tester@example.com"]


def run_git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *IDENTITY, *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def make_repo(path: Path, files: dict[str, str] | None = None, *, ignore: str = "") -> Path:
    """A git repository with one commit holding ``files`` (and a .gitignore when given)."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q", "-b", "main")
    for name, text in (files or {"README.md": "# Demo\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if ignore:
        (path / ".gitignore").write_text(ignore)
    run_git(path, "add", "-A")
    run_git(path, "commit", "-q", "-m", "initial")
    return path


def status(repo: Path) -> str:
    """``git status --porcelain``: what a person running git in the worktree would see."""
    return run_git(repo, "status", "--porcelain", "--untracked-files=all")


# Steps for the scripted model: Claude reads README.md, then edits it (relative paths: the
# CLI works in the run's folder, wherever the app puts it).
READ = {"tool_use": {"name": "Read", "input": {"file_path": "README.md"}}}


def edit(old: str, new: str) -> dict[str, Any]:
    return {
        "tool_use": {
            "name": "Edit",
            "input": {"file_path": "README.md", "old_string": old, "new_string": new},
        }
    }


def git_project(owner: Any, **fields: Any) -> tuple[Any, Path]:
    """A project whose workspace is a git repository holding README.md; the generated files
    are excluded from git, as they are in every worktree."""
    project = make_project(owner=owner, permission_mode="acceptEdits", **fields)
    root = workspace_path(project)
    generated = sorted(p.name for p in root.iterdir())
    make_repo(root, {"README.md": "# Demo\nstatus: draft\n"}, ignore="")
    (root / ".git" / "info" / "exclude").write_text("\n".join(generated) + "\n")
    run_git(root, "rm", "-q", "-r", "--cached", *generated)
    run_git(root, "commit", "-q", "-m", "generated files are not the repository's")
    return project, root


@dataclass
class Ended:
    run: Run
    event: dict[str, Any] | None  # the `changes` event the supervisor would emit

    @property
    def pk(self) -> int:
        return self.run.pk


def run_in(
    conversation: Conversation, workdir: Path, edit: Callable[[], None], prompt: str = "Edit it"
) -> Ended:
    """A run that starts, makes ``edit`` in ``workdir`` and ends, through the runner's hooks."""
    run = Run.objects.create(
        conversation=conversation, user=conversation.user, prompt=prompt, workdir=str(workdir)
    )
    run_state.run_mark_started(run.pk)
    asyncio.run(changes.record_start(run.pk, workdir))
    edit()
    event = asyncio.run(changes.record_end(run.pk))
    run_state.run_finish(run.pk, Outcome(status="completed"))
    run.refresh_from_db()
    return Ended(run, event)


def write(path: Path, text: str) -> Callable[[], None]:
    def edit() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return edit
