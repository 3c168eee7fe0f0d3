"""Git workspaces at scale: a repository of 10,000 files, cloned, given worktrees, and its runs'
changes recorded, the app's own way.

Run: ``.venv/bin/python bench/workspace_git.py`` (about a minute on 2 cores).

The origin is a local bare repository (``file://``, allowed here as an operator would allow it)
of 10,000 files in 100 folders (about 12 MB). Every step calls the app's service:

* clone: ``git_workspace.workspace_clone`` of a new project (the protocol allow-list, no
  hooks, the size and time limits, then the generated files);
* worktree: ``worktrees.conversation_worktree_ensure`` for a new conversation (branch
  ``pm/<id>``, the exclude list, the generated files);
* run start: ``changes.record_start``, the snapshot a run takes before Claude starts;
* run end: ``changes.record_end``, what computing the changes adds to a run's end, after a
  typical run's edits (3 files changed, 1 added, 1 deleted): the end snapshot, the diff,
  and the database writes; once more with the project's commit after each run;
* revert: ``changes.run_revert`` of that run (for reference).

Target (issue 17): the run end's changes take at most 100 ms, p50 and p90.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import machine  # noqa: E402
from bench.report import fmt, percentile, table, verdict  # noqa: E402

FILES = 10_000
FOLDERS = 100
CLONES = 5
WORKTREES = 9
RUNS = 21
END_TARGET_MS = 100.0
HEADERS = ["what (milliseconds)", "n", "p50", "p90", "max"]
LINE = "value = compute(alpha, beta, gamma)  # a line of ordinary source code\n"


def make_origin(tmp: Path) -> Path:
    """A bare repository of FILES files, as a team's repository would be cloned from."""
    source = tmp / "source"
    for folder in range(FOLDERS):
        directory = source / f"pkg{folder:03}"
        directory.mkdir(parents=True)
        for index in range(FILES // FOLDERS):
            (directory / f"module{index:03}.py").write_text(f"# module {folder}.{index}\n" + LINE * 18)
    (source / "README.md").write_text("# Benchmark\n")
    # No automatic gc: a detached one, repacking 10,000 loose objects, raced the rmtree below.
    git = ["git", "-c", "user.name=Bench", "-c", "user.email=bench@example.com", "-c", "gc.auto=0"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=source, check=True)
    subprocess.run([*git, "add", "-A"], cwd=source, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "10,000 files"], cwd=source, check=True)
    origin = tmp / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(origin)], check=True)
    shutil.rmtree(source)
    return origin


def configure_django(tmp: Path) -> None:
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "promptmgr.settings",
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(40),
            "LOG_LEVEL": "WARNING",
            "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "VAR_DIR": str(tmp / "var"),
            "STORAGE_ROOT": str(tmp / "storage"),
            "RUN_SECRETS_DIR": str(tmp / "secrets"),
            "WORKSPACE_GIT_SCHEMES": "https,ssh,file",
        }
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return (time.perf_counter() - start) * 1000, result


def bench_clones(owner: Any, origin: Path) -> tuple[list[float], Any]:
    from promptmgr.models import Project, WorkspaceStatus
    from promptmgr.services.git_workspace import workspace_clone

    samples = []
    project = None
    for index in range(CLONES):
        project = Project.objects.create(
            owner=owner,
            name=f"Clone {index}",
            git_url=origin.as_uri(),
            workspace_status=WorkspaceStatus.CLONING,
        )
        ms, _ = timed(partial(workspace_clone, project.pk))
        project.refresh_from_db()
        if project.workspace_status != WorkspaceStatus.READY:
            raise RuntimeError(f"clone failed: {project.workspace_error}")
        samples.append(ms)
    return samples, project


def bench_worktrees(owner: Any, project: Any) -> tuple[list[float], Any]:
    from promptmgr.models import Conversation
    from promptmgr.services.worktrees import conversation_worktree_ensure

    samples = []
    conversation = None
    for index in range(WORKTREES):
        conversation = Conversation.objects.create(project=project, user=owner, title=f"c{index}")
        ms, _ = timed(partial(conversation_worktree_ensure, conversation))
        samples.append(ms)
    return samples, conversation


def typical_edit(worktree: Path, round_: int) -> None:
    """What a run typically leaves: three files edited, one added, one deleted."""
    for name in ("pkg001/module001.py", "pkg050/module020.py", "pkg099/module099.py"):
        path = worktree / name
        path.write_text(path.read_text().replace("alpha", f"alpha_{round_}", 2))
    (worktree / "pkg010" / f"added_{round_}.py").write_text(LINE * 10)
    (worktree / "pkg020" / "module005.py").unlink()


async def bench_runs(owner: Any, conversation: Any, *, commit: bool) -> dict[str, list[float]]:
    from asgiref.sync import sync_to_async

    from promptmgr.models import Project, Run
    from promptmgr.services import changes, run_state

    await sync_to_async(Project.objects.filter(pk=conversation.project_id).update)(commit_after_run=commit)
    worktree = Path(conversation.worktree_path)
    found: dict[str, list[float]] = {"start": [], "end": [], "revert": []}
    for round_ in range(RUNS):
        run = await sync_to_async(Run.objects.create)(
            conversation=conversation, user=owner, prompt=f"Round {round_}", workdir=str(worktree)
        )
        await sync_to_async(run_state.run_mark_started)(run.pk)
        start = time.perf_counter()
        await changes.record_start(run.pk, worktree)
        found["start"].append((time.perf_counter() - start) * 1000)
        typical_edit(worktree, round_)
        start = time.perf_counter()
        event = await changes.record_end(run.pk)
        found["end"].append((time.perf_counter() - start) * 1000)
        if event is None or event["total_files"] != 5:
            raise RuntimeError(f"round {round_}: unexpected changes {event}")
        await sync_to_async(run_state.run_finish)(run.pk, run_state.Outcome(status="completed"))
        start = time.perf_counter()
        await sync_to_async(changes.run_revert)(user=owner, run_id=run.pk)
        found["revert"].append((time.perf_counter() - start) * 1000)
    return found


def row(label: str, samples: list[float]) -> list[str]:
    return [
        label,
        str(len(samples)),
        fmt(percentile(samples, 50), 1),
        fmt(percentile(samples, 90), 1),
        fmt(max(samples), 1),
    ]


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-git-"))
    try:
        print(f"bench/workspace_git.py on {machine()}")
        made, origin = timed(lambda: make_origin(tmp))
        size = sum(f.stat().st_size for f in origin.rglob("*") if f.is_file()) / 1024 / 1024
        print(
            f"origin: {FILES:,} files in {FOLDERS} folders, {size:.1f} MB packed (made in {made / 1000:.1f} s)"
        )
        configure_django(tmp)
        from django.contrib.auth.models import User

        owner = User.objects.create_user("bench", "bench@example.com", "bench-password")
        clones, project = bench_clones(owner, origin)
        worktrees, conversation = bench_worktrees(owner, project)
        plain = asyncio.run(bench_runs(owner, conversation, commit=False))
        committing = asyncio.run(bench_runs(owner, conversation, commit=True))
        # The first round of each set is a warm-up (the first loose objects, the first thread).
        rows = [
            row("clone (workspace_clone)", clones),
            row("worktree creation", worktrees),
            row("run start: snapshot", plain["start"][1:]),
            row("run end: changes", plain["end"][1:]),
            row("run end: changes + commit", committing["end"][1:]),
            row("revert", plain["revert"][1:]),
        ]
        print(table(HEADERS, rows, title=f"A repository of {FILES:,} files"))
        end = plain["end"][1:]
        targets = [
            [
                "run end: changes, p50 <= 100 ms",
                fmt(percentile(end, 50), 1),
                verdict(percentile(end, 50), END_TARGET_MS, inclusive=True),
            ],
            [
                "run end: changes, p90 <= 100 ms",
                fmt(percentile(end, 90), 1),
                verdict(percentile(end, 90), END_TARGET_MS, inclusive=True),
            ],
            ["clone", fmt(percentile(clones, 50), 1), "(figure)"],
            ["worktree creation", fmt(percentile(worktrees, 50), 1), "(figure)"],
        ]
        print(table(["target", "ms", "result"], targets, title="Targets"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
