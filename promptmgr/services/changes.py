"""Every run's changes: recorded with git when it starts and ends, shown, and reverted.

When a run starts in a git work tree, its state is kept as a snapshot commit
(``refs/pm/runs/<id>/start``); when it ends, a second one (``…/end``), and the run's
changes are the tree diff between the two. A run whose working directory is not a git
work tree records nothing and says so. The git work runs in a thread (``asyncio.to_thread``)
so the event loop keeps serving every other stream meanwhile.

Revert writes back, from the start snapshot, only the files the run changed (files it
created are deleted), and only while each of them is still exactly as the run left it: a
later run that changed them again (and was not reverted) or a person's own edit since
makes it answer 409, so nobody's work is overwritten.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from core.errors import Conflict, Gone, NotFound
from promptmgr import snapshots
from promptmgr.highlight import diff_html
from promptmgr.models import Run
from promptmgr.workspaces import workspace_path

logger = logging.getLogger(__name__)

MSG_NOT_TRACKED = (
    "No changes were recorded for this run: its working directory was not a git work tree when it started."
)
MSG_NOT_RECORDED = (
    "This run's changes were not recorded: it ended without its worker (the server stopped or crashed)."
)
MSG_RUN_ACTIVE = "The run is still going; its changes are recorded when it ends."
MSG_ALREADY_REVERTED = "This run's changes were already reverted."
MSG_NOTHING_TO_REVERT = "This run changed no files."
MSG_CHANGED_AGAIN = "A later run (#{run_id}) changed the same files again: {paths}. Revert that run first."
MSG_EDITED_SINCE = "These files were changed after the run ended, so reverting would lose that work: {paths}."
MSG_WORKTREE_BUSY = "Claude is working in this folder right now; revert when that run has ended."
MSG_FILE_NOT_CHANGED = "This run did not change that file."
MSG_NOT_FOUND = "Not found."
MSG_WORKTREE_GONE = "The folder this run worked in no longer exists."

# Files whose diffs nobody reads line by line: the card shows them collapsed.
LOCKFILES = frozenset(
    {
        "package-lock.json",
        "npm-shrinkwrap.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "bun.lockb",
        "Cargo.lock",
        "poetry.lock",
        "Pipfile.lock",
        "uv.lock",
        "pdm.lock",
        "Gemfile.lock",
        "composer.lock",
        "go.sum",
        "mix.lock",
        "pubspec.lock",
        "Podfile.lock",
        "flake.lock",
        "packages.lock.json",
    }
)
LARGE_DIFF_LINES = 1000  # more changed lines than this: collapsed until asked for
EVENT_FILES = 1000  # files listed in the `changes` event; the endpoint lists them all
MAX_DIFF_BYTES = 2 * 1024 * 1024  # the unified diff one answer carries
MAX_HTML_DIFF_BYTES = 512 * 1024  # past this the diff is sent as text only
MAX_MESSAGE_CHARS = 10_000


def start_ref(run_id: int) -> str:
    return f"refs/pm/runs/{run_id}/start"


def end_ref(run_id: int) -> str:
    return f"refs/pm/runs/{run_id}/end"


def collapse_reason(entry: dict[str, Any]) -> str | None:
    """Why the card shows a file's diff collapsed: ``binary``, ``lockfile``, ``large`` or None."""
    if entry.get("binary"):
        return "binary"
    if PurePosixPath(str(entry["path"])).name in LOCKFILES:
        return "lockfile"
    if int(entry["additions"]) + int(entry["deletions"]) > LARGE_DIFF_LINES:
        return "large"
    return None


def file_entries(files: list[snapshots.ChangedFile]) -> list[dict[str, Any]]:
    entries = []
    for changed in files:
        entry = changed.as_dict()
        entry["collapsed"] = collapse_reason(entry)
        entries.append(entry)
    return entries


def commit_message(prompt: str, run_id: int) -> str:
    """The prompt's first line as the subject, the whole prompt as the body."""
    text = prompt.strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), f"Run {run_id}")
    subject = first if len(first) <= 72 else first[:71] + "…"
    body = text[:MAX_MESSAGE_CHARS] if text != subject else ""
    return f"{subject}\n\n{body + chr(10) + chr(10) if body else ''}PromptManager-Run: {run_id}\n"


def author_of(user: Any) -> tuple[str, str]:
    name = user.get_full_name() or user.get_username()
    email = user.email or f"{user.get_username()}@users.promptmanager.invalid"
    return name, email


# --- Recording (the run supervisor's hooks) ------------------------------------------------


def run_index(run_id: int, workdir: Path) -> Path:
    """Where a run keeps its start snapshot's index until its end (in the worktree's git dir,
    which goes with the worktree)."""
    return snapshots.git_dir(workdir) / f"pm-run-{run_id}.index"


def snapshot_start(run_id: int, workdir: Path) -> str | None:
    """The start snapshot's commit id, or None when ``workdir`` is not a git work tree."""
    if snapshots.work_tree_root(workdir) is None:
        logger.info("run %s: %s is not a git work tree; its changes are not recorded", run_id, workdir)
        return None
    return snapshots.snapshot(workdir, ref=start_ref(run_id), keep=run_index(run_id, workdir))


@dataclass
class EndResult:
    end: str
    files: list[dict[str, Any]]
    commit: str | None = None


def _end_tree(run_id: int, workdir: Path) -> str:
    """The work tree's state at the run's end as a tree, hashed from the start's index."""
    index = run_index(run_id, workdir)
    try:
        return snapshots.snapshot_tree(workdir, seed=index)
    finally:
        index.unlink(missing_ok=True)


async def compute_end(
    *,
    run_id: int,
    workdir: Path,
    start: str,
    commit_as: tuple[str, str] | None = None,
    message: str = "",
) -> EndResult:
    """Snapshot the end, list the changes, and (when asked) commit them on the branch; the
    git work in the loop's executor threads."""
    tree = await asyncio.to_thread(_end_tree, run_id, workdir)
    # The listing needs only the tree, so it runs beside the snapshot's commit and ref:
    # one git process fewer on the way from Claude's last word to the run's end.
    end, changed = await asyncio.gather(
        asyncio.to_thread(snapshots.snapshot_commit, workdir, tree, ref=end_ref(run_id), parent=start),
        asyncio.to_thread(snapshots.changed_files, workdir, start, tree),
    )
    result = EndResult(end=end, files=file_entries(changed))
    if commit_as is not None and result.files:
        result.commit = await asyncio.to_thread(
            snapshots.commit_files,
            workdir,
            source=end,
            paths=[f["path"] for f in result.files],
            author=commit_as,
            message=message,
        )
    return result


def event_data(run_id: int, files: list[dict[str, Any]], commit: str | None) -> dict[str, Any]:
    """The ``changes`` event: the files (the first EVENT_FILES) and the totals."""
    return {
        "run_id": run_id,
        "files": files[:EVENT_FILES],
        "total_files": len(files),
        "additions": sum(int(f["additions"]) for f in files),
        "deletions": sum(int(f["deletions"]) for f in files),
        "commit": commit,
    }


def _save(run_id: int, **fields: Any) -> None:
    Run.objects.filter(pk=run_id).update(**fields)


def _load_for_end(run_id: int) -> tuple[Run, tuple[str, str] | None]:
    run = Run.objects.select_related("user", "conversation__project").get(pk=run_id)
    commit_as = author_of(run.user) if run.conversation.project.commit_after_run else None
    return run, commit_as


async def record_start(run_id: int, workdir: Path) -> None:
    """Keep the work tree's state as the run starts. Never fails the run."""
    try:
        commit = await asyncio.to_thread(snapshot_start, run_id, workdir)
        if commit:
            await sync_to_async(_save)(run_id, start_snapshot=commit)
    except Exception:
        logger.exception("run %s: could not snapshot %s at the start", run_id, workdir)


async def record_end(run_id: int) -> dict[str, Any] | None:
    """Record the run's changes; the ``changes`` event's data, or None when it changed nothing
    (or its changes are not tracked). Never fails the run."""
    try:
        run, commit_as = await sync_to_async(_load_for_end)(run_id)
        if not (run.start_snapshot and run.workdir):
            return None
        result = await compute_end(
            run_id=run_id,
            workdir=Path(run.workdir),
            start=run.start_snapshot,
            commit_as=commit_as,
            message=commit_message(run.prompt, run_id),
        )
        await sync_to_async(_save)(run_id, end_snapshot=result.end, changed_files=result.files)
    except Exception:
        logger.exception("run %s: could not record its changes", run_id)
        return None
    return event_data(run_id, result.files, result.commit) if result.files else None


# --- Reading -----------------------------------------------------------------------------


@dataclass
class Changes:
    run_id: int
    files: list[dict[str, Any]]
    diff: str
    html: str
    truncated: bool
    reverted_at: Any


def _tracked_run(*, user: Any, run_id: int) -> Run:
    # Not services.runs.run_visible: that module imports the runner, which imports this one.
    run = Run.objects.visible_to(user).select_related("conversation__project").filter(pk=run_id).first()
    if run is None:
        raise NotFound(MSG_NOT_FOUND)
    if run.is_active:
        raise Conflict(MSG_RUN_ACTIVE, code="run_active")
    if not run.start_snapshot:
        raise Conflict(MSG_NOT_TRACKED, code="changes_not_tracked")
    if not run.end_snapshot:
        raise Conflict(MSG_NOT_RECORDED, code="changes_not_recorded")
    return run


def _repository_of(run: Run) -> Path:
    """Where git can read the run's snapshots: its worktree, or once that is gone (the idle
    sweep), the project's repository, whose objects and refs every worktree shares."""
    workdir = Path(run.workdir)
    if snapshots.work_tree_root(workdir) is not None:
        return workdir
    repo = workspace_path(run.conversation.project)
    if (
        repo.is_dir()
        and snapshots.git(repo, "rev-parse", "-q", "--verify", end_ref(run.pk), check=False).strip()
    ):
        return repo
    raise Gone(MSG_WORKTREE_GONE, code="worktree_gone")


def run_changes(*, user: Any, run_id: int, path: str | None = None, with_diff: bool = True) -> Changes:
    """A run's changed files and unified diff (of one file when ``path`` is given; none
    when ``with_diff`` is off, for listing a run of thousands of files)."""
    run = _tracked_run(user=user, run_id=run_id)
    files: list[dict[str, Any]] = list(run.changed_files)
    if path is not None:
        files = [f for f in files if f["path"] == path]
        if not files:
            raise NotFound(MSG_FILE_NOT_CHANGED)
    diff, truncated = ("", False)
    if files and with_diff:
        diff, truncated = snapshots.unified_diff(
            _repository_of(run),
            run.start_snapshot,
            run.end_snapshot,
            [path] if path is not None else (),
            limit=MAX_DIFF_BYTES,
        )
    html = diff_html(diff) if len(diff) <= MAX_HTML_DIFF_BYTES else ""
    return Changes(
        run_id=run.pk, files=files, diff=diff, html=html, truncated=truncated, reverted_at=run.reverted_at
    )


# --- Reverting ---------------------------------------------------------------------------


@contextmanager
def _worktree_lock(workdir: Path) -> Iterator[None]:
    """One revert at a time per work tree (two reverts must not interleave their writes)."""
    git_dir = Path(snapshots.git(workdir, "rev-parse", "--absolute-git-dir").decode().strip())
    with open(git_dir / "pm-revert.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_later_runs(run: Run, paths: set[str]) -> None:
    later = Run.objects.filter(workdir=run.workdir, pk__gt=run.pk).order_by("pk")
    if later.active().exists():
        raise Conflict(MSG_WORKTREE_BUSY, code="worktree_busy")
    for other in later.filter(reverted_at__isnull=True):
        overlap = sorted(paths & {str(f["path"]) for f in other.changed_files})
        if overlap:
            raise Conflict(
                MSG_CHANGED_AGAIN.format(run_id=other.pk, paths=", ".join(overlap[:5])), code="changed_again"
            )


def _edited_since(workdir: Path, run: Run, paths: list[str]) -> list[str]:
    """Paths whose current state is not what the run left (a person's edit since)."""
    now = snapshots.snapshot(workdir)
    return [f.path for f in snapshots.changed_files(workdir, run.end_snapshot, now, paths)]


def run_revert(*, user: Any, run_id: int) -> Run:
    """Restore the files this run changed to what they were when it started."""
    run = _tracked_run(user=user, run_id=run_id)
    if run.reverted_at is not None:
        raise Conflict(MSG_ALREADY_REVERTED, code="already_reverted")
    paths = [str(f["path"]) for f in run.changed_files]
    if not paths:
        raise Conflict(MSG_NOTHING_TO_REVERT, code="nothing_to_revert")
    workdir = Path(run.workdir)
    if snapshots.work_tree_root(workdir) is None:
        raise Gone(MSG_WORKTREE_GONE, code="worktree_gone")
    project = run.conversation.project
    with _worktree_lock(workdir), transaction.atomic():
        # Locked, so a second revert of this run waits here and then finds it reverted.
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.reverted_at is not None:
            raise Conflict(MSG_ALREADY_REVERTED, code="already_reverted")
        _check_later_runs(run, set(paths))
        edited = _edited_since(workdir, run, paths)
        if edited:
            raise Conflict(MSG_EDITED_SINCE.format(paths=", ".join(edited[:5])), code="edited_since")
        snapshots.restore_files(workdir, run.start_snapshot, paths)
        if project.commit_after_run:
            subject = commit_message(run.prompt, run.pk).splitlines()[0]
            snapshots.commit_files(
                workdir,
                source=run.start_snapshot,
                paths=paths,
                author=author_of(user),
                message=f"Revert “{subject}”\n\nPromptManager-Reverts-Run: {run.pk}\n",
            )
        locked.reverted_at = timezone.now()
        locked.save(update_fields=["reverted_at"])
    return locked
