"""Plain helpers for the workspace tests: real git repositories made the way a user would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

README = "# Demo\nstatus: draft\n"
REPO_CLAUDE_MD = "The repository's own instructions.\n"
ORIGIN_FILES = {
    "README.md": README,
    "CLAUDE.md": REPO_CLAUDE_MD,
    ".gitignore": ".env\n",
    "src/app.py": "print('hi')\n",
}


def git(cwd: Path, *args: str) -> str:
    """git as a user of this machine would run it, without their own config."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Origin Author",
        "GIT_AUTHOR_EMAIL": "origin@example.com",
        "GIT_COMMITTER_NAME": "Origin Author",
        "GIT_COMMITTER_EMAIL": "origin@example.com",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout


def make_origin(path: Path, files: dict[str, str] | None = None, *, branch: str = "trunk") -> Path:
    """A bare repository at ``path`` with one commit of ``files`` on ``branch``."""
    work = path.with_name(path.name + "-work")
    work.mkdir(parents=True)
    git(work, "init", "--quiet", f"--initial-branch={branch}")
    for name, content in (ORIGIN_FILES if files is None else files).items():
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git(work, "add", "--all")
    git(work, "commit", "--quiet", "-m", "First")
    git(work.parent, "clone", "--quiet", "--bare", str(work), str(path))
    return path


def status(worktree: Path) -> str:
    """``git status --porcelain`` including untracked files: empty when nothing would be committed."""
    return git(worktree, "status", "--porcelain", "--untracked-files=all")


def cloned_project(owner: Any, origin: Path, **fields: Any) -> Any:
    """A project created through the service and cloned in this thread (no background)."""
    from promptmgr.services.git_workspace import workspace_clone
    from promptmgr.services.projects import project_create

    fields.setdefault("name", "Cloned")
    project = project_create(owner=owner, git_url=f"file://{origin}", **fields)
    workspace_clone(project.pk)
    project.refresh_from_db()
    return project
