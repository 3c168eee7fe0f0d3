"""Worktrees: one per conversation, on a branch of its own, removed without losing work.

Removing a worktree first commits what is uncommitted in it (tracked changes and new
files; ignored files are what a setup command or the copy globs make again) on the
branch it has checked out, or on a branch of its own when its HEAD is detached, and
removes it only once ``git status`` is clean. A worktree in the middle of a merge or a
rebase is left alone.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .command import GitError, run_bounded, run_git

SETUP_MARKER = "promptmanager-setup-done"
IN_PROGRESS = ("MERGE_HEAD", "rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG")
OUTPUT_TAIL = 16_000
MSG_BUSY = "a merge, rebase or similar is in progress in {path}; it was left in place"
MSG_STILL_DIRTY = "{path} still has uncommitted changes after they were committed; it was left in place"


class WorktreeBusy(GitError):
    """The worktree cannot be emptied safely now; it stays where it is."""


def is_worktree(path: Path) -> bool:
    return (path / ".git").is_file()


def git_dir(worktree: Path) -> Path:
    """The worktree's private directory inside the repository (from its ``.git`` file)."""
    text = (worktree / ".git").read_text(encoding="utf-8").strip()
    return (worktree / text.removeprefix("gitdir:").strip()).resolve()


def branch_exists(repo: Path, branch: str) -> bool:
    return run_git(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=repo, check=False).ok


def add(repo: Path, path: Path, *, branch: str, base: str, branch_exists_now: bool | None = None) -> bool:
    """Check out ``branch`` at ``path``, making it from ``base`` if it does not exist.

    ``branch_exists_now``: what the caller just learned, saving a look; None to look here.
    Returns whether the branch was made now.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    exists = branch_exists(repo, branch) if branch_exists_now is None else branch_exists_now
    try:
        _add(repo, path, branch=branch, base=base, exists=exists)
    except GitError:
        # A worktree directory deleted by hand leaves git's record of it, which blocks its
        # path and branch until pruned. Pruning only then spares every new worktree a git
        # command; the branch is looked at again, as a failed ``-b`` may have made it.
        run_git(["worktree", "prune"], cwd=repo)
        exists = exists or branch_exists(repo, branch)
        _add(repo, path, branch=branch, base=base, exists=exists)
    return not exists


def _add(repo: Path, path: Path, *, branch: str, base: str, exists: bool) -> None:
    if exists:
        run_git(["worktree", "add", "--quiet", str(path), branch], cwd=repo, what="worktree add")
    else:
        run_git(["worktree", "add", "--quiet", "-b", branch, str(path), base], cwd=repo, what="worktree add")


def rename_branch(repo: Path, old: str, new: str) -> None:
    run_git(["branch", "--move", old, new], cwd=repo)


def hide_tracked(worktree: Path, paths: Sequence[str]) -> list[str]:
    """Mark generated paths the repository tracks ``skip-worktree`` in this worktree, so
    what we write into them never shows in ``git status`` or reaches a commit."""
    tracked = run_git(["ls-files", "-z", "--", *paths], cwd=worktree).text().split("\0")
    tracked = [path for path in tracked if path]
    if tracked:
        run_git(["update-index", "--skip-worktree", "--", *tracked], cwd=worktree)
    return tracked


def dirty(worktree: Path) -> bool:
    status = run_git(["status", "--porcelain", "--untracked-files=all", "-z"], cwd=worktree)
    return bool(status.stdout)


def keep_work(worktree: Path, *, message: str, detached_branch: str) -> str | None:
    """Commit what is uncommitted in ``worktree``; return the commit, or None if clean."""
    private = git_dir(worktree)
    if any((private / name).exists() for name in IN_PROGRESS):
        raise WorktreeBusy(MSG_BUSY.format(path=worktree))
    if not dirty(worktree):
        return None
    run_git(["add", "--all"], cwd=worktree)
    run_git(["commit", "--quiet", "--no-verify", "-m", message], cwd=worktree)
    if not run_git(["symbolic-ref", "--quiet", "HEAD"], cwd=worktree, check=False).ok:
        # A detached HEAD's commit would be unreachable once the worktree is gone.
        run_git(["branch", detached_branch, "HEAD"], cwd=worktree)
    return run_git(["rev-parse", "HEAD"], cwd=worktree).text().strip()


def remove(repo: Path, worktree: Path, *, message: str, detached_branch: str) -> str | None:
    """Keep the worktree's work (see ``keep_work``), then remove it; return the commit made."""
    if not is_worktree(worktree):
        # Not (or no longer) a worktree: nothing of git's to keep.
        run_git(["worktree", "prune"], cwd=repo)
        return None
    kept = keep_work(worktree, message=message, detached_branch=detached_branch)
    if dirty(worktree):
        raise WorktreeBusy(MSG_STILL_DIRTY.format(path=worktree))
    # --force: only ignored and generated files are left, and those are not work.
    run_git(["worktree", "remove", "--force", str(worktree)], cwd=repo, what="worktree remove")
    run_git(["worktree", "prune"], cwd=repo)
    return kept


def copy_matching(source: Path, dest: Path, patterns: Sequence[str]) -> list[str]:
    """Copy what matches ``patterns`` in ``source`` to the same place in ``dest``.

    For git-ignored files such as ``.env``: nothing in ``.git``, nothing reached through
    a symlink, nothing outside ``source``, and nothing that already exists in ``dest``.
    """
    copied: list[str] = []
    base = source.resolve()
    for pattern in patterns:
        for match in sorted(source.glob(pattern)):
            relative = match.relative_to(source)
            if not relative.parts or relative.parts[0] == ".git" or match.is_symlink():
                continue
            if not match.resolve().is_relative_to(base):
                continue
            target = dest / relative
            if target.exists() or target.is_symlink():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if match.is_dir():
                shutil.copytree(match, target, symlinks=True)
            elif match.is_file():
                shutil.copy2(match, target)
            else:
                continue
            copied.append(str(relative))
    return copied


@dataclass(frozen=True)
class SetupResult:
    command: str
    exit_code: int
    output: str
    duration_ms: int
    stopped: str | None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.stopped is None


def setup_pending(worktree: Path) -> bool:
    return not (git_dir(worktree) / SETUP_MARKER).exists()


def run_setup(
    worktree: Path,
    command: str,
    *,
    env: Mapping[str, str],
    timeout: float,
    stop_when: Callable[[], str | None] | None = None,
) -> SetupResult:
    """Run the setup command in the worktree with ``sh -c``; mark it done when it succeeds.

    Its stdout and stderr are kept together (the tail), as a terminal would show them.
    """
    started = time.monotonic()
    result = run_bounded(
        ["/bin/sh", "-c", f"exec 2>&1; {command}"],
        cwd=worktree,
        env=env,
        timeout=timeout,
        stop_when=stop_when,
    )
    setup = SetupResult(
        command=command,
        exit_code=result.returncode,
        output=result.stdout.decode("utf-8", "replace")[-OUTPUT_TAIL:],
        duration_ms=int((time.monotonic() - started) * 1000),
        stopped=result.stopped,
    )
    if setup.ok:
        (git_dir(worktree) / SETUP_MARKER).write_text(command + "\n", encoding="utf-8")
    return setup
