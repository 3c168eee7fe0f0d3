"""Remove the worktrees of conversations nobody has used for a while.

A worktree idle for ``--idle-days`` (default ``WORKTREE_IDLE_DAYS``) with no run going
is removed; what was uncommitted in it is first committed on the conversation's branch
(which stays), so no work is lost, and the conversation's next prompt makes the worktree
again from that branch. A worktree in the middle of a merge or a rebase is left alone.
Prints one line per worktree and a summary; ``--dry-run`` only reports. Clones left in
"cloning" by a stopped worker are marked failed (retryable) on the way.
"""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from promptmgr.services.git_workspace import clones_recover_interrupted
from promptmgr.services.worktrees import worktrees_sweep_idle


class Command(BaseCommand):
    help = "Remove idle conversations' worktrees, committing their uncommitted work first."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--idle-days",
            type=float,
            default=None,
            metavar="DAYS",
            help="How long a worktree must be unused (default: WORKTREE_IDLE_DAYS).",
        )
        parser.add_argument("--project", type=int, metavar="ID", help="Only this project.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would be removed; change nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run: bool = options["dry_run"]
        verbosity: int = options["verbosity"]
        days = options["idle_days"] if options["idle_days"] is not None else settings.WORKTREE_IDLE_DAYS
        if not dry_run:
            for project_id in clones_recover_interrupted():
                if verbosity >= 1:
                    self.stdout.write(f"project {project_id}: interrupted clone marked failed")
        swept = worktrees_sweep_idle(
            idle_for=timedelta(days=days), dry_run=dry_run, project_id=options["project"]
        )
        removed = 0
        for item in swept:
            if item.error:
                line = f"kept {item.path} (conversation {item.conversation_id}): {item.error}"
            elif dry_run:
                line = f"would remove {item.path} (conversation {item.conversation_id})"
            else:
                removed += 1
                kept = f", uncommitted work committed as {item.kept_commit[:12]}" if item.kept_commit else ""
                line = f"removed {item.path} (conversation {item.conversation_id}){kept}"
            if verbosity >= 1:
                self.stdout.write(line)
        if dry_run:
            summary = f"{len(swept)} idle worktree(s) would be removed (dry run, nothing changed)"
        else:
            summary = f"{removed} idle worktree(s) removed"
        if verbosity >= 1:
            self.stdout.write(self.style.SUCCESS(summary))
