"""A project's repository: checked before it is saved, cloned in the background or started
fresh, and its access token or deploy key kept encrypted.

``workspace_status`` tells the pages and the API where a project stands: ``cloning``
(runs answer 409 meanwhile), ``ready``, or ``failed`` with ``workspace_error`` saying why
in a sentence. The clone runs in a thread of the worker that created the project; a clone
that no worker finishes (the worker stopped) is marked failed once it is past its time
limit, and can be started again.
"""

from __future__ import annotations

import logging
import shutil
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from core.errors import Conflict
from promptmgr.git import credentials, repository, urls
from promptmgr.git.command import GitError
from promptmgr.models import GitSecretKind, Project, WorkspaceStatus
from promptmgr.workspaces import GENERATED_PATHS, workspace_path, workspace_sync

logger = logging.getLogger(__name__)

MSG_CLONING = "The project's repository is still being cloned; try again when it is ready."
MSG_FAILED = "The project's workspace is not available: {error}"
MSG_RETRY_NOT_FAILED = "Only a project whose clone failed can be cloned again."
MSG_REPOSITORY_FIXED = (
    "A project's repository cannot change once its workspace exists; create another project instead."
)
MSG_INTERRUPTED = "The clone was interrupted (the server stopped while cloning); start it again."
MSG_SECRET_BOTH = "Give an access token or a deploy key, not both."
MSG_SECRET_WITHOUT_URL = "An access token or deploy key is only used to clone a repository: give its URL too."
MSG_WORKSPACE_FAILED = "Could not start the project's repository: {error}"

_clones: dict[int, threading.Thread] = {}


def git_fields_errors(*, git_url: str, git_ref: str) -> dict[str, list[str]]:
    """Field errors of a repository URL and ref, before git ever sees them."""
    errors: dict[str, list[str]] = {}
    if git_url:
        try:
            urls.allowed_scheme(git_url)
        except urls.InvalidGitUrl as exc:
            errors["git_url"] = [str(exc)]
    if git_ref:
        try:
            urls.check_ref(git_ref)
        except urls.InvalidGitUrl as exc:
            errors["git_ref"] = [str(exc)]
    return errors


def secret_fields(*, git_token: str | None, git_ssh_key: str | None) -> tuple[str, str] | None:
    """The (kind, ciphertext) to store for what was given; None when neither was given.

    An empty string given for either clears the stored secret.
    """
    if git_token and git_ssh_key:
        raise ValueError(MSG_SECRET_BOTH)
    if git_token is None and git_ssh_key is None:
        return None
    if git_token:
        return GitSecretKind.TOKEN, credentials.secret_encrypt(git_token.strip())
    if git_ssh_key:
        return GitSecretKind.SSH_KEY, credentials.secret_encrypt(credentials.normalize_ssh_key(git_ssh_key))
    return GitSecretKind.NONE, ""


def workspace_start(project: Project) -> None:
    """After a project is saved: clone it in the background, or start a fresh repository.

    Called once its row is committed (the clone's thread reads it from the database).
    """
    if project.git_url:
        transaction.on_commit(lambda: workspace_clone_start(project.pk))
        return
    try:
        project.default_branch = repository.ensure_repository(
            workspace_path(project), exclude=GENERATED_PATHS
        )
    except GitError as exc:
        logger.error("project %s: could not start its repository: %s", project.pk, exc)
        _mark_failed(project.pk, MSG_WORKSPACE_FAILED.format(error=exc))
        project.refresh_from_db()
        return
    Project.objects.filter(pk=project.pk).update(default_branch=project.default_branch)
    workspace_sync(project=project)


def workspace_clone_start(project_id: int) -> threading.Thread:
    """Clone the project's repository in a thread of this worker (one clone per project)."""
    running = _clones.get(project_id)
    if running is not None and running.is_alive():
        return running
    thread = threading.Thread(
        target=_clone_in_thread, args=(project_id,), name=f"clone-{project_id}", daemon=True
    )
    _clones[project_id] = thread
    thread.start()
    return thread


def _clone_in_thread(project_id: int) -> None:
    try:
        workspace_clone(project_id)
    except Exception:  # a thread's failure must reach the log and the project, not vanish
        logger.exception("project %s: the clone failed unexpectedly", project_id)
        _mark_failed(project_id, "The clone failed unexpectedly; see the server's log.")
    finally:
        _clones.pop(project_id, None)
        connections.close_all()  # this thread's own connections


def workspace_clone(project_id: int) -> None:
    """Clone a project that is ``cloning``; leave it ``ready`` or ``failed`` with a reason."""
    project = Project.objects.filter(pk=project_id, workspace_status=WorkspaceStatus.CLONING).first()
    if project is None:
        return
    dest = workspace_path(project)
    try:
        secret = credentials.secret_decrypt(project.git_secret) if project.git_secret else ""
    except credentials.SecretUnreadable as exc:
        _mark_failed(project_id, str(exc))
        return
    try:
        with credentials.git_credentials(project.git_secret_kind, secret) as env:
            branch = repository.clone(
                url=project.git_url,
                ref=project.git_ref,
                dest=dest,
                credentials=env,
                timeout=settings.WORKSPACE_CLONE_TIMEOUT,
                max_bytes=settings.WORKSPACE_CLONE_MAX_MB * 1024 * 1024,
                exclude=GENERATED_PATHS,
                redact=[secret],
            )
    except (GitError, OSError) as exc:
        logger.warning("project %s: clone failed: %s", project_id, exc)
        _mark_failed(project_id, str(exc))
        return
    updated = Project.objects.filter(pk=project_id, workspace_status=WorkspaceStatus.CLONING).update(
        workspace_status=WorkspaceStatus.READY, workspace_error="", default_branch=branch
    )
    if not updated:
        # Deleted (or retried elsewhere) meanwhile: the files are nobody's.
        if not Project.objects.filter(pk=project_id).exists():
            shutil.rmtree(dest, ignore_errors=True)
        return
    project.refresh_from_db()
    workspace_sync(project=project)
    logger.info("project %s: cloned %s (branch %s)", project_id, project.git_url, branch)


def _mark_failed(project_id: int, error: str) -> None:
    Project.objects.filter(pk=project_id).update(
        workspace_status=WorkspaceStatus.FAILED, workspace_error=error
    )


def workspace_retry(*, project: Project) -> Project:
    """Clone a project again after its clone failed (a fixed URL or token, a network outage)."""
    moved = Project.objects.filter(pk=project.pk, workspace_status=WorkspaceStatus.FAILED).update(
        workspace_status=WorkspaceStatus.CLONING, workspace_error="", updated_at=timezone.now()
    )
    if not moved or not project.git_url:
        project.refresh_from_db()
        raise Conflict(MSG_RETRY_NOT_FAILED, code="workspace_not_failed")
    # Whatever a crashed attempt left at the destination would block the new clone's move.
    if not (workspace_path(project) / ".git").exists():
        shutil.rmtree(workspace_path(project), ignore_errors=True)
    transaction.on_commit(lambda: workspace_clone_start(project.pk))
    project.refresh_from_db()
    return project


def workspace_require_ready(project: Project) -> None:
    """Runs need the repository: 409 while it is cloning or after its clone failed."""
    if project.workspace_status == WorkspaceStatus.CLONING:
        raise Conflict(MSG_CLONING, code="workspace_cloning")
    if project.workspace_status == WorkspaceStatus.FAILED:
        raise Conflict(MSG_FAILED.format(error=project.workspace_error), code="workspace_failed")


def repository_ready(project: Project) -> Path:
    """The project's repository, made now for a workspace from before workspaces were git."""
    workspace_require_ready(project)
    root = workspace_path(project)
    branch = repository.ensure_repository(root, exclude=GENERATED_PATHS)
    if not project.default_branch:
        project.default_branch = branch
        Project.objects.filter(pk=project.pk).update(default_branch=branch)
    return root


def clones_recover_interrupted(*, now: Any = None) -> list[int]:
    """Projects stuck in ``cloning`` past the clone's time limit (their worker stopped)
    become ``failed``, so they can be cloned again; returns their ids."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.WORKSPACE_CLONE_TIMEOUT + 60)
    stuck = list(
        Project.objects.filter(workspace_status=WorkspaceStatus.CLONING, updated_at__lt=cutoff).values_list(
            "pk", flat=True
        )
    )
    stuck = [pk for pk in stuck if pk not in _clones]
    Project.objects.filter(pk__in=stuck, workspace_status=WorkspaceStatus.CLONING).update(
        workspace_status=WorkspaceStatus.FAILED, workspace_error=MSG_INTERRUPTED
    )
    return stuck
