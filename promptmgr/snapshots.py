"""A work tree's state as git objects, without touching the user's index, HEAD or branch.

A snapshot is a commit of everything ``git add -A`` would stage (tracked files and
untracked ones that ``.gitignore`` and ``.git/info/exclude`` do not hide), built in a
temporary index (``GIT_INDEX_FILE``) seeded from a copy of the real one, so only files
whose stat data changed are hashed again. A ref (``refs/pm/runs/<id>/start|end``) keeps
each snapshot from garbage collection. A run's changes are then a plain tree diff between
two snapshots, and reverting them writes the start snapshot's files back, from a second
temporary index.

Every git call gets a small, fixed environment: no system or global configuration, no
hooks, no fsmonitor, no terminal prompts, literal pathspecs, and git never looks above
the work tree for a repository.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

GIT_TIMEOUT = 120  # seconds; a snapshot of a huge tree may hash for a while
SNAPSHOT_MESSAGE = "PromptManager snapshot"
PM_IDENTITY = ("PromptManager", "promptmanager@localhost")
# Config that could make a git call run code or talk to a terminal, switched off per call.
SAFE_CONFIG = tuple(
    part
    for setting in (
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "core.askPass=",
        "credential.helper=",
        "commit.gpgSign=false",
        "core.quotePath=false",
        # No housekeeping left running in the background after a command returns.
        "gc.auto=0",
        "maintenance.auto=false",
    )
    for part in ("-c", setting)
)
STATUS_NAMES = {"A": "added", "D": "deleted", "M": "modified", "T": "modified"}
NULL_OID = "0" * 40


class GitError(Exception):
    """A git command failed; the message carries its stderr."""


@dataclass(frozen=True)
class ChangedFile:
    path: str
    status: str  # added | modified | deleted
    additions: int
    deletions: int
    binary: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "status": self.status,
            "additions": self.additions,
            "deletions": self.deletions,
            "binary": self.binary,
        }


def git_env(workdir: Path, **extra: str) -> dict[str, str]:
    """The whole environment of a git call: nothing of the server's secrets."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_LITERAL_PATHSPECS": "1",
        "GIT_OPTIONAL_LOCKS": "0",
        # A work tree inside another repository (STORAGE_ROOT under a checkout) must not
        # be mistaken for that repository.
        "GIT_CEILING_DIRECTORIES": str(workdir.parent),
    }
    env.update(extra)
    return env


def git(
    workdir: Path,
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> bytes:
    """Run one git command in ``workdir``; its stdout, or GitError."""
    done = subprocess.run(
        ["git", *SAFE_CONFIG, *args],
        cwd=workdir,
        input=input,
        env=git_env(workdir, **(env or {})),
        capture_output=True,
        timeout=GIT_TIMEOUT,
        check=False,
    )
    if check and done.returncode != 0:
        raise GitError(f"git {args[0]} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return done.stdout


def git_limited(workdir: Path, *args: str, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of a command's output, and whether there was more.

    Stops the command at the limit, so a diff of a huge file costs no more than that."""
    proc = subprocess.Popen(
        ["git", *SAFE_CONFIG, *args],
        cwd=workdir,
        env=git_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        data = proc.stdout.read(limit + 1)
    finally:
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=GIT_TIMEOUT)
    return data[:limit], len(data) > limit


def git_stream(workdir: Path, *args: str, chunk: int = 256 * 1024) -> Iterator[bytes]:
    """A command's output in chunks as it comes (``git archive``); GitError if it fails."""
    proc = subprocess.Popen(
        ["git", *SAFE_CONFIG, *args],
        cwd=workdir,
        env=git_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        while block := proc.stdout.read(chunk):
            yield block
    finally:
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
        code = proc.wait(timeout=GIT_TIMEOUT)
    if code != 0:
        raise GitError(f"git {args[0]} failed ({code})")


def work_tree_root(path: Path) -> Path | None:
    """``path`` when it is the top of a git work tree (a clone or a worktree), else None."""
    if not path.is_dir():
        return None
    try:
        top = git(path, "rev-parse", "--show-toplevel", check=True).decode().strip()
    except (GitError, subprocess.TimeoutExpired, OSError):
        return None
    return path if top and Path(top).resolve() == path.resolve() else None


def git_dir(workdir: Path) -> Path:
    """The work tree's own git dir, where its index lives (``.git``, or for a worktree the
    folder its ``.git`` file names); read without a git process, as a snapshot's cost counts."""
    dot = workdir / ".git"
    if dot.is_dir():
        return dot
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = dot.read_text().strip()
        if text.startswith("gitdir: "):
            named = Path(text.removeprefix("gitdir: "))
            return named if named.is_absolute() else (workdir / named).resolve()
    return Path(git(workdir, "rev-parse", "--absolute-git-dir").decode().strip())


@contextlib.contextmanager
def temporary_index(seed: Path | None = None) -> Iterator[dict[str, str]]:
    """A private index file (a copy of ``seed`` when given); yields the env that selects it."""
    with tempfile.TemporaryDirectory(prefix="pm-index-") as tmp:
        index = Path(tmp) / "index"
        if seed is not None:
            with contextlib.suppress(FileNotFoundError):
                # copy2 keeps the index's mtime: git re-hashes entries as new as the index
                # itself ("racily clean"), and a fresh mtime would make it trust them instead.
                shutil.copy2(seed, index)
        yield {"GIT_INDEX_FILE": str(index)}


def _write_tree(workdir: Path, seed: Path | None, keep: Path | None) -> str:
    with temporary_index(seed) as env:
        # --ignore-errors: an unreadable file is left out rather than losing the snapshot.
        git(workdir, "add", "-A", "--ignore-errors", env=env, check=False)
        tree = git(workdir, "write-tree", env=env).decode().strip()
        if keep is not None:
            shutil.copy2(env["GIT_INDEX_FILE"], keep)
        return tree


def snapshot(
    workdir: Path,
    *,
    ref: str | None = None,
    parent: str | None = None,
    seed: Path | None = None,
    keep: Path | None = None,
) -> str:
    """Commit the work tree's current state as a snapshot; returns the commit id.

    The user's index, HEAD and branches are left as they were; ``ref`` (when given)
    keeps the snapshot alive through ``git gc``. ``keep`` saves the snapshot's index, and
    ``seed`` starts from such a saved index instead of the work tree's own: a run's end
    snapshot then hashes only what changed since its start, untracked files included.
    """
    return snapshot_commit(workdir, snapshot_tree(workdir, seed=seed, keep=keep), ref=ref, parent=parent)


def snapshot_tree(workdir: Path, *, seed: Path | None = None, keep: Path | None = None) -> str:
    """The work tree's current state as a tree (``snapshot``'s first half: ``seed`` and
    ``keep`` as there); ``snapshot_commit`` makes it a snapshot."""
    start = seed if seed is not None and seed.is_file() else git_dir(workdir) / "index"
    try:
        return _write_tree(workdir, start, keep)
    except GitError:
        # An index we cannot reuse (a split or sparse index): hash everything afresh.
        logger.warning("snapshot of %s: the index could not be reused", workdir, exc_info=True)
        return _write_tree(workdir, None, keep)


def snapshot_commit(workdir: Path, tree: str, *, ref: str | None = None, parent: str | None = None) -> str:
    """``tree`` committed as a snapshot (``snapshot``'s second half); the commit id."""
    name, email = PM_IDENTITY
    identity = {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }
    args = ["commit-tree", tree, "-m", SNAPSHOT_MESSAGE]
    if parent:
        args += ["-p", parent]
    commit = git(workdir, *args, env=identity).decode().strip()
    if ref:
        git(workdir, "update-ref", ref, commit)
    return commit


def _parse_raw_numstat(out: bytes) -> list[ChangedFile]:
    """Parse ``git diff-tree -r -z --raw --numstat`` (raw records first, then numstat)."""
    fields = out.split(b"\0")
    statuses: dict[str, str] = {}
    counts: dict[str, tuple[int, int, bool]] = {}
    i = 0
    while i < len(fields):
        field = fields[i]
        if field.startswith(b":"):
            status = field.split(b" ")[-1].decode()[:1]
            path = fields[i + 1].decode("utf-8", "surrogateescape")
            statuses[path] = STATUS_NAMES.get(status, "modified")
            i += 2
        elif field:
            added, deleted, path_bytes = field.split(b"\t", 2)
            path = path_bytes.decode("utf-8", "surrogateescape")
            binary = added == b"-"
            counts[path] = (0 if binary else int(added), 0 if binary else int(deleted), binary)
            i += 1
        else:
            i += 1
    return [
        ChangedFile(path, status, *counts.get(path, (0, 0, False)))
        for path, status in sorted(statuses.items())
    ]


def changed_files(workdir: Path, old: str, new: str, paths: Sequence[str] = ()) -> list[ChangedFile]:
    """The files that differ between two snapshots (or their trees), with line counts (0/0
    for binaries)."""
    out = git(
        workdir,
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--raw",
        "--numstat",
        old,
        new,
        "--",
        *paths,
    )
    return _parse_raw_numstat(out)


def unified_diff(
    workdir: Path, old: str, new: str, paths: Sequence[str] = (), *, limit: int
) -> tuple[str, bool]:
    """The unified diff between two snapshots (of ``paths`` only, when given), cut at ``limit`` bytes."""
    data, cut = git_limited(
        workdir, "diff-tree", "-r", "-p", "--no-renames", "--no-color", old, new, "--", *paths, limit=limit
    )
    text = data.decode("utf-8", "replace")
    return text, cut


def tree_entries(workdir: Path, commit: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``{path: (mode, object id)}`` of the given paths in a commit (missing paths are absent)."""
    if not paths:
        return {}
    out = git(workdir, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *paths)
    entries: dict[str, tuple[str, str]] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, _kind, oid = meta.decode().split(" ")
        entries[path.decode("utf-8", "surrogateescape")] = (mode, oid)
    return entries


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _delete_created(workdir: Path, path: str) -> None:
    """Remove a file a run created, and the folders it made that are now empty."""
    target = workdir / path
    # A folder on the way that now is a symlink must not lead the deletion outside.
    if not _inside(workdir, target.parent):
        raise GitError(f"refusing to delete {path}: it is outside the work tree")
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    parent = target.parent
    root = workdir.resolve()
    while parent.resolve() != root:
        try:
            parent.rmdir()
        except OSError:  # not empty (or already gone): stop climbing
            break
        parent = parent.parent


def restore_files(workdir: Path, source: str, paths: Sequence[str]) -> None:
    """Make ``paths`` in the work tree what they were in the ``source`` snapshot.

    Paths the snapshot does not hold are deleted; the rest are written from it through a
    temporary index, so the user's own index stays as it was.
    """
    entries = tree_entries(workdir, source, paths)
    for path in paths:
        if path not in entries:
            _delete_created(workdir, path)
    present = [p for p in paths if p in entries]
    if not present:
        return
    with temporary_index() as env:
        git(workdir, "read-tree", source, env=env)
        stdin = b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in present)
        git(workdir, "checkout-index", "-f", "-z", "--stdin", input=stdin, env=env)


def head_commit(workdir: Path) -> str | None:
    out = git(workdir, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).decode().strip()
    return out or None


def commit_files(
    workdir: Path,
    *,
    source: str,
    paths: Sequence[str],
    author: tuple[str, str],
    message: str,
) -> str | None:
    """Commit ``paths`` as they are in the ``source`` snapshot on top of HEAD (the
    conversation's branch), leaving every other path of HEAD as it was.

    The user's index is brought up to date for those paths only, so ``git status`` stays
    clean for them. Returns the new commit id, or None when HEAD already matches.
    """
    head = head_commit(workdir)
    entries = tree_entries(workdir, source, paths)
    info = b"".join(
        (
            f"{entries[p][0]} {entries[p][1]}\t".encode()
            if p in entries
            else f"0 {NULL_OID}\t".encode()  # mode 0 removes the path
        )
        + p.encode("utf-8", "surrogateescape")
        + b"\0"
        for p in paths
    )
    with temporary_index() as env:
        if head:
            git(workdir, "read-tree", head, env=env)
        git(workdir, "update-index", "-z", "--index-info", input=info, env=env)
        tree = git(workdir, "write-tree", env=env).decode().strip()
    if head and git(workdir, "rev-parse", f"{head}^{{tree}}").decode().strip() == tree:
        return None
    name, email = author
    pm_name, pm_email = PM_IDENTITY
    identity = {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": pm_name,
        "GIT_COMMITTER_EMAIL": pm_email,
    }
    args = ["commit-tree", tree, "-F", "-"] + (["-p", head] if head else [])
    commit = git(workdir, *args, input=message.encode(), env=identity).decode().strip()
    # Compare-and-swap: a commit Claude or a person made meanwhile is never overwritten.
    git(workdir, "update-ref", "-m", "PromptManager: commit after run", "HEAD", commit, head or NULL_OID)
    # The real index follows HEAD for these paths only; the user's other staged work stays.
    git(workdir, "update-index", "-z", "--index-info", input=info)
    return commit
