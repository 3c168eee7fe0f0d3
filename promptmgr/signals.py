"""Keep workspaces in step with a project's "Always allow" rules and its conversations.

A rule is added by askuser when a person clicks "Always allow" (and removed by the owner);
the workspace files (of the main checkout and every worktree) are rewritten once the change
is committed, so the next run's CLI reads it. A deleted conversation's worktree is removed
once the deletion is committed, its uncommitted work committed on its branch first.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from .git.command import GitError
from .models import Conversation, PermissionRule, Project
from .services.worktrees import worktree_discard
from .workspaces import workspace_sync

logger = logging.getLogger(__name__)


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


@receiver(post_delete, sender=Conversation)
def conversation_deleted(sender: type[Conversation], instance: Conversation, **kwargs: Any) -> None:
    if not instance.worktree_path:
        return
    project_id, worktree, branch = instance.project_id, instance.worktree_path, instance.branch

    def discard() -> None:
        try:
            worktree_discard(
                project_id=project_id, worktree=worktree, branch=branch, reason="its conversation was deleted"
            )
        except (GitError, OSError) as exc:
            logger.warning("worktree %s of a deleted conversation was kept: %s", worktree, exc)

    transaction.on_commit(discard)
