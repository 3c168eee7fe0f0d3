"""A project's repository: cloned from a URL, or started fresh, always with a first commit.

A clone goes into a temporary directory beside its destination and is renamed into
place only once it is complete, so a failed or stopped clone leaves nothing behind. It
is stopped at its time limit and as soon as it grows past its size limit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .command import GitError, run_git

EXCLUDE_HEADER = "# PromptManager's generated files: never committed"
MSG_TOO_LARGE = "the repository grew past the size limit of {mb} MB"
MSG_CLONE_FAILED = "Could not clone {url}: {reason}"
SIZE_CHECK_SECONDS = 1.0
FIRST_COMMIT = "Start of the workspace"
ADOPTED_COMMIT = "The workspace's files before it became a git repository"


def disk_usage(path: Path) -> int:
    """Bytes ``path`` takes on disk (hard-linked files counted once; symlinks not followed)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if info.st_nlink > 1:
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def clone(
    *,
    url: str,
    ref: str,
    dest: Path,
    credentials: Mapping[str, str],
    timeout: float,
    max_bytes: int,
    exclude: Sequence[str],
    redact: Sequence[str] = (),
) -> str:
    """Clone ``url`` (at ``ref``, if given) to ``dest``; return the branch worktrees start from.

    ``dest`` must not exist yet. Raises ``GitError`` with a sentence naming the cause.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".clone-{dest.name}-", dir=dest.parent))
    target = staging / "repo"
    next_check = 0.0

    def too_large() -> str | None:
        nonlocal next_check
        now = time.monotonic()
        if now < next_check:
            return None
        next_check = now + SIZE_CHECK_SECONDS
        if disk_usage(staging) > max_bytes:
            return MSG_TOO_LARGE.format(mb=max_bytes // (1024 * 1024))
        return None

    args = ["clone", "--quiet", "--no-recurse-submodules", "--template="]
    if ref:
        args += ["--branch", ref]
    try:
        try:
            run_git(
                [*args, "--", url, str(target)],
                cwd=staging,
                what="clone",
                env=credentials,
                timeout=timeout,
                stop_when=too_large,
                redact=redact,
            )
        except GitError as exc:
            raise GitError(MSG_CLONE_FAILED.format(url=url, reason=_reason(str(exc)))) from None
        # A clone quicker than the first size check is measured once it is complete.
        if disk_usage(staging) > max_bytes:
            too_big = MSG_TOO_LARGE.format(mb=max_bytes // (1024 * 1024))
            raise GitError(MSG_CLONE_FAILED.format(url=url, reason=too_big))
        exclude_paths(target, exclude)
        branch = _start_branch(target, ref)
        os.rename(target, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return branch


def _reason(message: str) -> str:
    """git's own words for why, without the staging directory it was cloning into."""
    message = message.removeprefix("git clone failed: ")
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("Cloning into")]
    fatal = [line for line in useful if line.startswith(("fatal:", "error:", "remote:"))]
    said = [line.removeprefix("fatal: ").removeprefix("error: ") for line in fatal or useful]
    return "; ".join(said) or message


def _start_branch(repo: Path, ref: str) -> str:
    """The checked-out branch; a tag gets a branch of its own, an empty repository a first commit."""
    if not run_git(["rev-parse", "--verify", "--quiet", "HEAD"], cwd=repo, check=False).ok:
        run_git(["commit", "--quiet", "--allow-empty", "-m", FIRST_COMMIT], cwd=repo)
    branch = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=repo, check=False)
    if branch.ok:
        return branch.text().strip()
    name = f"pm/from-{ref}" if ref else "pm/base"
    run_git(["switch", "--quiet", "-c", name], cwd=repo)
    return name


def ensure_repository(root: Path, *, exclude: Sequence[str]) -> str:
    """Make ``root`` a repository with a first commit if it is not one; return its branch.

    Files already in ``root`` (a workspace from before workspaces were git) become that
    first commit, except the generated ones, which ``exclude`` keeps out.
    """
    if not (root / ".git").exists():
        root.mkdir(parents=True, exist_ok=True)
        run_git(["init", "--quiet", "--template=", "--initial-branch=main"], cwd=root)
    exclude_paths(root, exclude)
    if not run_git(["rev-parse", "--verify", "--quiet", "HEAD"], cwd=root, check=False).ok:
        run_git(["add", "--all"], cwd=root)
        staged = run_git(["diff", "--cached", "--quiet"], cwd=root, check=False)
        message = FIRST_COMMIT if staged.returncode == 0 else ADOPTED_COMMIT
        run_git(["commit", "--quiet", "--allow-empty", "-m", message], cwd=root)
    return current_branch(root)


def current_branch(repo: Path) -> str:
    result = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=repo, check=False)
    return result.text().strip() if result.ok else ""


def exclude_paths(repo: Path, paths: Sequence[str]) -> None:
    """List ``paths`` (relative to the work tree) in ``.git/info/exclude``, once each.

    The file is shared by every worktree of the repository, so this covers them all.
    """
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    try:
        current = exclude.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = ""
    present = set(current.splitlines())
    missing = [f"/{path}" for path in paths if f"/{path}" not in present]
    if not missing:
        return
    lines = ([] if EXCLUDE_HEADER in present else [EXCLUDE_HEADER]) + missing
    prefix = "" if not current or current.endswith("\n") else "\n"
    with exclude.open("a", encoding="utf-8") as handle:
        handle.write(prefix + "\n".join(lines) + "\n")
