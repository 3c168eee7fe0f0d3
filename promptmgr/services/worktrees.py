"""A worktree per conversation: made for its first run, set up, removed without losing work.

A conversation works on branch ``pm/<conversation id>``, made from the project's default
branch, checked out at ``STORAGE_ROOT/worktrees/<project id>/<conversation id>``. A new
worktree gets the project's copy globs (git-ignored files such as ``.env`` from the main
checkout) and its generated files; the project's setup command runs before the first run
that works there (``setup_if_pending``, called by the runner). Deleting a conversation or
sweeping an idle worktree commits what is uncommitted on its branch first and keeps the
branch. Git commands on one repository's worktrees are serialized by a lock file, across
threads and processes.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.db.models import Max, Q
from django.utils import timezone

from core.errors import Conflict
from promptmgr.git import repository, worktrees
from promptmgr.git.command import GitError
from promptmgr.models import ACTIVE_RUN_STATUSES, Conversation, Project
from promptmgr.services.git_workspace import repository_ready
from promptmgr.workspaces import GENERATED_PATHS, root_sync, workspace_path, worktree_seed, worktrees_path

logger = logging.getLogger(__name__)

MSG_WORKTREE_FAILED = "Could not make this conversation's worktree: {error}"
MSG_SETUP_FAILED = "The project's setup command failed in this conversation's worktree ({reason}):\n{output}"
KEEP_MESSAGE = "Uncommitted work kept by PromptManager before the worktree was removed ({reason})"
LOCK_FILE = "promptmanager.lock"
SETUP_KEEPALIVE_SECONDS = 5.0
DISK_CACHE_SECONDS = 60


def conversation_branch(conversation: Conversation) -> str:
    return f"pm/{conversation.pk}"


def conversation_worktree_path(conversation: Conversation) -> Path:
    return worktrees_path(conversation.project) / str(conversation.pk)


@contextmanager
def repository_lock(repo: Path) -> Iterator[None]:
    """One worktree operation at a time per repository (flock: threads and processes)."""
    lock = repo / ".git" / LOCK_FILE
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def conversation_worktree_ensure(conversation: Conversation) -> Path:
    """The conversation's worktree, made now if it does not exist (again, after a sweep).

    Raises ``Conflict`` (409) while the repository is cloning, after its clone failed, or
    when git cannot make the worktree.
    """
    project = conversation.project
    repo = repository_ready(project)
    path = conversation_worktree_path(conversation)
    try:
        with repository_lock(repo):
            if not worktrees.is_worktree(path):
                branch = _make_worktree(project, conversation, repo, path)
            else:
                branch = conversation.branch or conversation_branch(conversation)
            # Touched under the lock: the idle sweep, which checks this, cannot remove a
            # worktree a run is about to start in.
            Conversation.objects.filter(pk=conversation.pk).update(
                branch=branch, worktree_path=str(path), updated_at=timezone.now()
            )
    except (GitError, OSError) as exc:
        logger.error("conversation %s: worktree failed: %s", conversation.pk, exc)
        raise Conflict(MSG_WORKTREE_FAILED.format(error=exc), code="worktree_failed") from None
    conversation.branch, conversation.worktree_path = branch, str(path)
    return path


def _make_worktree(project: Project, conversation: Conversation, repo: Path, path: Path) -> str:
    branch = conversation.branch or conversation_branch(conversation)
    # A conversation's first worktree: its branch is about to be made (None: look again).
    branch_exists_now: bool | None = None
    if not conversation.branch:
        if worktrees.branch_exists(repo, branch):
            # Left by an earlier life of this database (ids handed out again): kept, renamed.
            worktrees.rename_branch(repo, branch, f"{branch}-before-{int(time.time())}")
        branch_exists_now = False
    base = project.default_branch or repository.current_branch(repo)
    worktrees.add(repo, path, branch=branch, base=base, branch_exists_now=branch_exists_now)
    repository.exclude_paths(repo, GENERATED_PATHS)
    globs = [line.strip() for line in project.worktree_copy_globs.splitlines() if line.strip()]
    copied = worktrees.copy_matching(workspace_path(project), path, globs)
    worktree_seed(project=project, worktree=path)
    root_sync(project=project, root=path)
    worktrees.hide_tracked(path, GENERATED_PATHS)
    logger.info("conversation %s: worktree %s on %s (copied %s)", conversation.pk, path, branch, copied)
    return branch


def worktree_discard(*, project_id: int, worktree: str, branch: str, reason: str) -> str | None:
    """Remove a worktree (a deleted conversation's, an idle one) after committing its work.

    Returns the commit that kept uncommitted work, if any. The branch stays.
    """
    path = Path(worktree)
    repo = workspace_path(Project(pk=project_id))
    if not (repo / ".git").exists():
        return None
    with repository_lock(repo):
        kept = worktrees.remove(
            repo,
            path,
            message=KEEP_MESSAGE.format(reason=reason),
            detached_branch=f"{branch or 'pm/detached'}-kept-{int(time.time())}",
        )
    # The project's worktrees directory goes with its last worktree.
    for directory in (path, path.parent):
        try:
            directory.rmdir()
        except OSError:
            break
    return kept


# --- the setup command -------------------------------------------------------------------


def setup_env() -> dict[str, str]:
    """What a setup command sees of the server: its ``PATH``, and a home of its own."""
    home = Path(settings.STORAGE_ROOT) / "setup-home"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", "CI": "1"}


def setup_if_pending(
    *, worktree: Path, command: str, stop_when: Callable[[], str | None] | None = None
) -> worktrees.SetupResult | None:
    """Run the project's setup command in a worktree that has not been set up yet.

    No database access: the runner calls it from a thread of its own. None when there is
    nothing to do.
    """
    if not command.strip() or not worktrees.is_worktree(worktree) or not worktrees.setup_pending(worktree):
        return None
    return worktrees.run_setup(
        worktree,
        command,
        env=setup_env(),
        timeout=settings.WORKSPACE_SETUP_TIMEOUT,
        stop_when=stop_when,
    )


def setup_failure_message(result: worktrees.SetupResult) -> str:
    reason = result.stopped or f"exit code {result.exit_code}"
    return MSG_SETUP_FAILED.format(reason=reason, output=result.output.strip()[-2000:] or "(no output)")


async def setup_before_run(
    *,
    worktree: Path,
    command: str,
    emit: Callable[[str, dict[str, Any]], Awaitable[None]],
    stopping: Callable[[], bool],
    keep_alive: Callable[[], Awaitable[None]],
) -> str | None:
    """Run a new worktree's setup command before the run's turn; None, or why the run fails.

    Emits ``workspace_setup`` as it starts (``status: running``) and ends (``ok`` or
    ``failed``, with the exit code and the output's tail). ``keep_alive`` is awaited every
    few seconds meanwhile (the runner keeps owning its run), and ``stopping`` stops the
    command (cancel, shutdown).
    """
    pending = command.strip() and worktrees.is_worktree(worktree) and worktrees.setup_pending(worktree)
    if not pending:
        return None
    await emit("workspace_setup", {"status": "running", "command": command})
    task = asyncio.ensure_future(
        sync_to_async(setup_if_pending, thread_sensitive=False)(
            worktree=worktree, command=command, stop_when=lambda: "cancelled" if stopping() else None
        )
    )
    while not task.done():
        await asyncio.wait({task}, timeout=SETUP_KEEPALIVE_SECONDS)
        await keep_alive()
    result = task.result()
    if result is None:
        return None
    await emit(
        "workspace_setup",
        {
            "status": "ok" if result.ok else "failed",
            "command": command,
            "exit_code": result.exit_code,
            "stopped": result.stopped,
            "duration_ms": result.duration_ms,
            "output": result.output,
        },
    )
    return None if result.ok else setup_failure_message(result)


# --- disk use and the idle sweep ----------------------------------------------------------


@dataclass(frozen=True)
class DiskUsage:
    repository_bytes: int
    worktrees: dict[int, int]  # conversation id -> bytes

    @property
    def total_bytes(self) -> int:
        return self.repository_bytes + sum(self.worktrees.values())


def project_disk_usage(project: Project) -> DiskUsage:
    """What the project's repository and each conversation's worktree take on disk."""
    sizes = {}
    for conversation_id, path in (
        Conversation.objects.filter(project=project)
        .exclude(worktree_path="")
        .values_list("pk", "worktree_path")
    ):
        if Path(path).is_dir():
            sizes[conversation_id] = repository.disk_usage(Path(path))
    return DiskUsage(repository_bytes=repository.disk_usage(workspace_path(project)), worktrees=sizes)


def project_disk_bytes(project: Project) -> int:
    """The project's total disk use, remembered a minute per worker: the project page shows
    it on every load, and walking a large repository and its worktrees takes a while."""
    key = f"promptmgr:disk-bytes:{project.pk}"
    total = cache.get(key)
    if total is None:
        total = project_disk_usage(project).total_bytes
        cache.set(key, total, DISK_CACHE_SECONDS)
    return int(total)


@dataclass(frozen=True)
class SweptWorktree:
    conversation_id: int
    path: str
    kept_commit: str | None
    error: str = ""


def _idle(conversations: Any, cutoff: Any) -> Any:
    return (
        conversations.exclude(worktree_path="")
        .exclude(runs__status__in=ACTIVE_RUN_STATUSES)
        .annotate(last_run=Max("runs__created_at"), last_end=Max("runs__ended_at"))
        .filter(updated_at__lt=cutoff)
        .filter(Q(last_run__isnull=True) | Q(last_run__lt=cutoff))
        .filter(Q(last_end__isnull=True) | Q(last_end__lt=cutoff))
    )


def worktrees_sweep_idle(
    *, idle_for: timedelta, dry_run: bool = False, project_id: int | None = None
) -> list[SweptWorktree]:
    """Remove the worktrees of conversations idle for ``idle_for``, committing their
    uncommitted work on their branch first; the next prompt makes the worktree again."""
    cutoff = timezone.now() - idle_for
    conversations = Conversation.objects.select_related("project")
    if project_id is not None:
        conversations = conversations.filter(project_id=project_id)
    swept: list[SweptWorktree] = []
    for conversation in _idle(conversations, cutoff).order_by("pk"):
        path = conversation.worktree_path
        if dry_run:
            swept.append(SweptWorktree(conversation.pk, path, None))
            continue
        repo = workspace_path(conversation.project)
        if not (repo / ".git").exists():
            continue
        try:
            with repository_lock(repo):
                # Checked again under the lock: a prompt may have arrived meanwhile.
                if not _idle(Conversation.objects.filter(pk=conversation.pk), cutoff).exists():
                    continue
                kept = worktrees.remove(
                    repo,
                    Path(path),
                    message=KEEP_MESSAGE.format(reason=f"idle since {cutoff:%Y-%m-%d}"),
                    detached_branch=f"{conversation.branch or 'pm/detached'}-kept-{int(time.time())}",
                )
                Conversation.objects.filter(pk=conversation.pk).update(worktree_path="")
        except GitError as exc:
            logger.warning("conversation %s: worktree kept: %s", conversation.pk, exc)
            swept.append(SweptWorktree(conversation.pk, path, None, error=str(exc)))
            continue
        swept.append(SweptWorktree(conversation.pk, path, kept))
    return swept
