"""Keep workspaces in step with a project's "Always allow" rules.

A rule is added by askuser when a person clicks "Always allow" (and removed by the owner);
the workspace files are rewritten once the change is committed, so the next run's CLI reads it.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from .models import PermissionRule, Project
from .workspaces import workspace_sync


def _sync_later(project_id: int) -> None:
    def sync() -> None:
        project = Project.objects.filter(pk=project_id).first()
        if project is not None:
            workspace_sync(project=project)

    transaction.on_commit(sync)


@receiver(post_save, sender=PermissionRule)
def rule_saved(sender: type[PermissionRule], instance: PermissionRule, **kwargs: Any) -> None:
    _sync_later(instance.project_id)


@receiver(post_delete, sender=PermissionRule)
def rule_deleted(sender: type[PermissionRule], instance: PermissionRule, **kwargs: Any) -> None:
    _sync_later(instance.project_id)
