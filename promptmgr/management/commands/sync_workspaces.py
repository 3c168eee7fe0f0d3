"""Regenerate the files PromptManager writes into each project's workspace.

``CLAUDE.local.md`` (from the project context) and the ask-user MCP registration
(``.mcp.json``, ``.claude/settings.local.json``) are brought in line with the database
and the settings (``ASK_USER_ENABLED``), in each project's main checkout and in every
conversation's worktree. Files a user added are never touched. Prints one line per
changed file and a summary; ``--dry-run`` only reports.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from promptmgr.services.workspaces import UnknownProject, workspaces_sync_all

DRY_RUN_VERBS = {"created": "would create", "updated": "would update", "deleted": "would delete"}


class Command(BaseCommand):
    help = (
        "Regenerate every project's workspace files (CLAUDE.local.md, ask-user MCP registration) "
        "in its main checkout and every worktree."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--project", type=int, metavar="ID", help="Only this project.")
        parser.add_argument("--dry-run", action="store_true", help="Report what would change; write nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run: bool = options["dry_run"]
        verbosity: int = options["verbosity"]
        try:
            results = workspaces_sync_all(project_id=options["project"], dry_run=dry_run)
        except UnknownProject as exc:
            raise CommandError(str(exc)) from None

        files = 0
        for result in results:
            if verbosity >= 2 and not result.changes:
                self.stdout.write(f"project {result.project.pk} ({result.project.name}): up to date")
            for change in result.changes:
                files += 1
                verb = DRY_RUN_VERBS[change.action] if dry_run else change.action
                if verbosity >= 1:
                    self.stdout.write(f"{verb} {change.path}")

        projects = sum(1 for result in results if result.changes)
        if dry_run:
            summary = f"{files} file(s) would change in {projects} project(s) (dry run, nothing written)"
        else:
            summary = f"{files} file(s) changed in {projects} project(s)"
        if verbosity >= 1:
            self.stdout.write(self.style.SUCCESS(summary))
