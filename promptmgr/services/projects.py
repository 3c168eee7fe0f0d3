"""Creating, changing and finding projects.

Every write validates the whole project (the model's ``full_clean`` plus the rules that
span fields), saves in a transaction and then regenerates the workspace, so the API, the
pages and the admin all leave the same files behind. Error texts are constants that the
tests assert on.
"""

from __future__ import annotations

import shutil
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404

from core.errors import Conflict, Forbidden, NotFound
from promptmgr.models import (
    ASK_USER_TIMEOUT_MAX,
    ASK_USER_TIMEOUT_MIN,
    AnswerPolicy,
    Engine,
    PermissionMode,
    PermissionRule,
    Project,
    Run,
    WorkspaceStatus,
)
from promptmgr.services import git_workspace
from promptmgr.workspaces import workspace_path, workspace_sync, worktrees_path

NAME_REQUIRED = "Give the project a name."
ENGINE_INVALID = "Engine must be one of: " + ", ".join(Engine.values) + "."
PERMISSION_MODE_INVALID = "Permission mode must be one of: " + ", ".join(PermissionMode.values) + "."
TIMEOUT_OUT_OF_RANGE = (
    f"The ask-user timeout must be between {ASK_USER_TIMEOUT_MIN} and {ASK_USER_TIMEOUT_MAX} seconds."
)
SDK_BYPASS_REFUSED = (
    "The SDK engine cannot run with bypassPermissions: in that mode the SDK never asks the app "
    "before a tool runs, so Claude's questions could not reach you. Choose another permission "
    "mode or the CLI engine."
)
PROJECT_NOT_FOUND = "Project not found."
POLICY_DELAY_TOO_LONG = (
    "The policy's delay must be shorter than the ask-user timeout ({timeout} s), "
    "or questions expire before the policy answers."
)
RULE_NOT_FOUND = "No such rule in this project."
RULES_OWNER_ONLY = "Only the project's owner can remove an always-allow rule."
NAME_TAKEN = "You already have a project named “{name}”. Choose another name."
OWNER_ONLY = "Only the project's owner can do that."
MEMBER_UNKNOWN = "There is no user named “{username}”."
MEMBER_IS_OWNER = "“{username}” owns this project already."
MEMBER_ALREADY = "“{username}” is already a member."
MEMBER_NOT_FOUND = "“{username}” is not a member of this project."
DELETE_RUN_ACTIVE = "A run is still going in this project. Cancel it (or let it finish), then delete."
BYPASS_STAFF_ONLY = (
    "Only staff can choose bypassPermissions: in that mode Claude runs any command on the "
    "server without asking. Ask an administrator, or choose another permission mode."
)

SETUP_STAFF_ONLY = (
    "Only staff can set a setup command: it runs on the server, outside Claude's sandbox, "
    "in every new worktree. Ask an administrator."
)
COPY_GLOB_INVALID = "“{pattern}” is not a path pattern inside the repository (no “..”, not absolute)."

# What project_update may change; ownership and membership are managed elsewhere.
# git_token and git_ssh_key are write-only: stored encrypted, never shown.
UPDATABLE_FIELDS = frozenset(
    {
        "name",
        "context",
        "engine",
        "ask_user_enabled",
        "ask_user_timeout",
        "permission_mode",
        "model",
        "git_url",
        "git_ref",
        "git_token",
        "git_ssh_key",
        "worktree_copy_globs",
        "worktree_setup_command",
        "commit_after_run",
        "answer_policy",
        "answer_policy_delay",
        "answer_policy_instructions",
        "answer_policy_permissions",
    }
)


class ProjectNotFound(NotFound, Http404):
    """The project does not exist or the user may not see it: 404 either way (pages too)."""


class ModeNotAllowed(Forbidden, PermissionDenied):
    """The user may not choose this permission mode: 403 (pages too)."""


def _check_mode_allowed(*, actor: Any, permission_mode: str, previous_mode: str | None) -> None:
    """bypassPermissions lets Claude run anything as the server's user: staff decide that.

    Only a change to it is checked, so members can still edit a project staff set up so.
    """
    chosen_now = permission_mode == PermissionMode.BYPASS and previous_mode != PermissionMode.BYPASS
    if chosen_now and not getattr(actor, "is_staff", False):
        raise ModeNotAllowed(BYPASS_STAFF_ONLY)


def project_check_engine_mode(*, engine: str, permission_mode: str) -> None:
    """Refuse the SDK engine in bypassPermissions mode, where ``can_use_tool`` never fires."""
    if engine == Engine.SDK and permission_mode == PermissionMode.BYPASS:
        raise ValidationError({"permission_mode": [SDK_BYPASS_REFUSED]})


def project_validate(project: Project) -> None:
    """Validate every field and the cross-field rules; errors are keyed by field name."""
    project.name = (project.name or "").strip()
    errors: dict[str, list[str]] = {}
    try:
        # The only constraint, the timeout range, is checked below with a clearer message.
        project.full_clean(validate_constraints=False)
    except ValidationError as exc:
        errors = {field: list(messages) for field, messages in exc.message_dict.items()}
    # Our own wording for the rules users meet most, instead of Django's generic texts.
    if not project.name:
        errors["name"] = [NAME_REQUIRED]
    if project.engine not in Engine.values:
        errors["engine"] = [ENGINE_INVALID]
    if project.permission_mode not in PermissionMode.values:
        errors["permission_mode"] = [PERMISSION_MODE_INVALID]
    # One owner's projects are told apart by name in the list and the sidebar.
    if project.name and project.owner_id is not None:
        taken = Project.objects.filter(owner_id=project.owner_id, name__iexact=project.name)
        if taken.exclude(pk=project.pk).exists():
            errors.setdefault("name", []).append(NAME_TAKEN.format(name=project.name))
    timeout = project.ask_user_timeout
    if isinstance(timeout, int) and not ASK_USER_TIMEOUT_MIN <= timeout <= ASK_USER_TIMEOUT_MAX:
        errors["ask_user_timeout"] = [TIMEOUT_OUT_OF_RANGE]
    delay = project.answer_policy_delay
    # With a delay as long as the timeout, questions would expire before the policy's turn.
    auto = project.answer_policy == AnswerPolicy.AUTO
    if auto and isinstance(delay, int) and isinstance(timeout, int) and delay >= timeout:
        errors.setdefault("answer_policy_delay", []).append(POLICY_DELAY_TOO_LONG.format(timeout=timeout))
    try:
        project_check_engine_mode(engine=project.engine, permission_mode=project.permission_mode)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            errors.setdefault(field, []).extend(messages)
    project.git_url, project.git_ref = project.git_url.strip(), project.git_ref.strip()
    for field, messages in git_workspace.git_fields_errors(
        git_url=project.git_url, git_ref=project.git_ref
    ).items():
        errors.setdefault(field, []).extend(messages)
    for pattern in project.worktree_copy_globs.splitlines():
        pattern = pattern.strip()
        if pattern and (pattern.startswith("/") or ".." in pattern.split("/") or "\0" in pattern):
            errors.setdefault("worktree_copy_globs", []).append(COPY_GLOB_INVALID.format(pattern=pattern))
    if errors:
        raise ValidationError(errors)


def _check_setup_allowed(*, actor: Any, command: str, previous: str) -> None:
    """A setup command runs as the server's user, unsandboxed: staff decide that."""
    if command.strip() != previous.strip() and command.strip() and not getattr(actor, "is_staff", False):
        raise ModeNotAllowed(SETUP_STAFF_ONLY)


def _apply_secret(project: Project, *, git_token: str | None, git_ssh_key: str | None) -> bool:
    """Store a token or key given on create/update (encrypted); returns whether one was given."""
    try:
        secret = git_workspace.secret_fields(git_token=git_token, git_ssh_key=git_ssh_key)
    except ValueError as exc:
        raise ValidationError({"git_token": [str(exc)]}) from None
    if secret is None:
        return False
    project.git_secret_kind, project.git_secret = secret
    return True


def _save_and_sync(project: Project, *, fields: list[str] | None = None) -> Project:
    """Save (only ``fields``, when given) and regenerate the workspace's files."""
    with transaction.atomic():
        project.save(update_fields=[*fields, "updated_at"] if fields is not None else None)
    # Files are written after the commit; `sync_workspaces` repairs any drift.
    workspace_sync(project=project)
    return project


def project_create(
    *,
    owner: Any,
    name: str,
    context: str = "",
    engine: str = Engine.CLI,
    ask_user_enabled: bool = True,
    ask_user_timeout: int | None = None,
    permission_mode: str = PermissionMode.ACCEPT_EDITS,
    model: str = "",
    git_url: str = "",
    git_ref: str = "",
    git_token: str | None = None,
    git_ssh_key: str | None = None,
    worktree_copy_globs: str = "",
    worktree_setup_command: str = "",
    commit_after_run: bool = False,
    answer_policy: str = AnswerPolicy.OFF,
    answer_policy_delay: int = 30,
    answer_policy_instructions: str = "",
    answer_policy_permissions: bool = False,
) -> Project:
    """Create a project owned by ``owner`` and start its workspace: a clone of ``git_url``
    in the background (``workspace_status`` is ``cloning`` meanwhile), or a fresh repository.

    ``ask_user_timeout=None`` takes the server default (``ASK_USER_DEFAULT_TIMEOUT``).
    """
    project = Project(
        owner=owner,
        name=name,
        context=context,
        engine=engine,
        ask_user_enabled=ask_user_enabled,
        permission_mode=permission_mode,
        model=model,
        git_url=git_url,
        git_ref=git_ref,
        worktree_copy_globs=worktree_copy_globs,
        worktree_setup_command=worktree_setup_command,
        commit_after_run=commit_after_run,
        answer_policy=answer_policy,
        answer_policy_delay=answer_policy_delay,
        answer_policy_instructions=answer_policy_instructions,
        answer_policy_permissions=answer_policy_permissions,
    )
    if ask_user_timeout is not None:
        project.ask_user_timeout = ask_user_timeout
    project_validate(project)
    if (git_token or git_ssh_key) and not project.git_url:
        raise ValidationError({"git_url": [git_workspace.MSG_SECRET_WITHOUT_URL]})
    _apply_secret(project, git_token=git_token, git_ssh_key=git_ssh_key)
    _check_mode_allowed(actor=owner, permission_mode=project.permission_mode, previous_mode=None)
    _check_setup_allowed(actor=owner, command=worktree_setup_command, previous="")
    project.workspace_status = WorkspaceStatus.CLONING if project.git_url else WorkspaceStatus.READY
    _save_and_sync(project)
    git_workspace.workspace_start(project)
    return project


def project_update(*, project: Project, actor: Any = None, **fields: Any) -> Project:
    """Change some of a project's settings and regenerate its workspace.

    ``actor`` is the user making the change (None for trusted callers such as commands).
    On a validation error the project object is restored from the database, so the
    caller never holds half-applied values.
    """
    unknown = set(fields) - UPDATABLE_FIELDS
    if unknown:
        raise TypeError(f"project_update() cannot change {', '.join(sorted(unknown))}")
    previous_mode, previous_setup = project.permission_mode, project.worktree_setup_command
    repository = (project.git_url, project.git_ref)
    git_token, git_ssh_key = fields.pop("git_token", None), fields.pop("git_ssh_key", None)
    for field, value in fields.items():
        setattr(project, field, value)
    try:
        project_validate(project)
        moved = (project.git_url.strip(), project.git_ref.strip()) != repository
        if moved and project.workspace_status != WorkspaceStatus.FAILED:
            # Only a clone that failed may be pointed elsewhere; worktrees hang off the repository.
            raise Conflict(git_workspace.MSG_REPOSITORY_FIXED, code="repository_fixed")
        secret_given = _apply_secret(project, git_token=git_token, git_ssh_key=git_ssh_key)
        if actor is not None:
            _check_mode_allowed(
                actor=actor, permission_mode=project.permission_mode, previous_mode=previous_mode
            )
            _check_setup_allowed(actor=actor, command=project.worktree_setup_command, previous=previous_setup)
    except (ValidationError, ModeNotAllowed, Conflict):
        project.refresh_from_db()
        raise
    # Only what was changed: a clone ending meanwhile writes the workspace's status itself.
    changed = [*fields, *(["git_secret", "git_secret_kind"] if secret_given else [])]
    _save_and_sync(project, fields=changed)
    if project.workspace_status == WorkspaceStatus.FAILED and project.git_url and (moved or secret_given):
        # A failed clone with a new URL, ref or credentials is tried again at once.
        git_workspace.workspace_retry(project=project)
    return project


def project_for_user(*, user: Any, project_id: int) -> Project:
    """The project if ``user`` owns it or is a member; otherwise ``ProjectNotFound``.

    Projects a user may not see are indistinguishable from projects that do not exist.
    """
    try:
        return Project.objects.visible_to(user).select_related("owner").get(pk=project_id)
    except Project.DoesNotExist:
        raise ProjectNotFound(PROJECT_NOT_FOUND) from None


def permission_rule_delete(*, project: Project, actor: Any, rule_id: int) -> None:
    """The owner removes an "Always allow" rule; the workspaces follow (``signals``)."""
    rule = PermissionRule.objects.filter(project=project, pk=rule_id).first()
    if rule is None:
        raise NotFound(RULE_NOT_FOUND, code="rule_not_found")
    if project.owner_id != actor.pk:
        raise Forbidden(RULES_OWNER_ONLY, code="owner_only")
    rule.delete()


def _check_owner(*, project: Project, actor: Any) -> None:
    if project.owner_id != actor.pk:
        raise Forbidden(OWNER_ONLY, code="owner_only")


def project_member_add(*, project: Project, actor: Any, username: str) -> Any:
    """The owner shares the project with another user, found by username; returns the user."""
    _check_owner(project=project, actor=actor)
    username = username.strip()
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationError({"username": [MEMBER_UNKNOWN.format(username=username)]})
    if user.pk == project.owner_id:
        raise ValidationError({"username": [MEMBER_IS_OWNER.format(username=username)]})
    if project.members.filter(pk=user.pk).exists():
        raise ValidationError({"username": [MEMBER_ALREADY.format(username=username)]})
    project.members.add(user)
    return user


def project_member_remove(*, project: Project, actor: Any, username: str) -> None:
    """The owner takes a member off the project; their conversations stay with the project."""
    _check_owner(project=project, actor=actor)
    user = project.members.filter(username=username).first()
    if user is None:
        raise NotFound(MEMBER_NOT_FOUND.format(username=username), code="member_not_found")
    project.members.remove(user)


def project_delete(*, project: Project, actor: Any) -> None:
    """The owner deletes the project, its conversations and its workspace on disk.

    Refused while a run is going: its CLI works in the workspace that would vanish."""
    _check_owner(project=project, actor=actor)
    if Run.objects.active().filter(conversation__project=project).exists():
        raise Conflict(DELETE_RUN_ACTIVE, code="run_active")
    directory, worktrees = workspace_path(project), worktrees_path(project)
    with transaction.atomic():
        project.delete()
    # After the commit: a failed delete must not leave a project without its files.
    shutil.rmtree(directory, ignore_errors=True)
    shutil.rmtree(worktrees, ignore_errors=True)
