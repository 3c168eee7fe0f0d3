"""Regenerating the workspaces of many projects at once (``manage.py sync_workspaces``)."""

from __future__ import annotations

from dataclasses import dataclass

from promptmgr.models import Project
from promptmgr.workspaces import FileChange, workspace_sync

UNKNOWN_PROJECT = "There is no project with id {project_id}."


class UnknownProject(LookupError):
    pass


@dataclass(frozen=True)
class ProjectSync:
    project: Project
    changes: list[FileChange]


def workspaces_sync_all(*, project_id: int | None = None, dry_run: bool = False) -> list[ProjectSync]:
    """Sync every project's workspace (or one project's); report what changed or would change."""
    projects = Project.objects.order_by("id")
    if project_id is not None:
        projects = projects.filter(pk=project_id)
        if not projects.exists():
            raise UnknownProject(UNKNOWN_PROJECT.format(project_id=project_id))
    return [
        ProjectSync(project=project, changes=workspace_sync(project=project, dry_run=dry_run))
        for project in projects.iterator()
    ]
