"""Plain helpers for the changes and file-browser tests: real git repositories in tmp dirs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

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
