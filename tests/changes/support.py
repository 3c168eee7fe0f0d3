"""Plain helpers for the changes and file-browser tests: real git repositories in tmp dirs."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
