"""Projects API: ``GET|POST /api/projects``, ``GET|PATCH /api/projects/{project_id}``.

Who may do what: any signed-in user may create a project (and owns it). The owner and
the project's members may read it and change its settings with PATCH: members run
Claude in the workspace, so they are trusted with how it runs. Ownership and membership
are changed in the admin only. A project a user may not see answers 404, as if it did not
exist. Anonymous requests get 401; unsafe methods need the CSRF token (session auth).

Schemas check types and the allowed values of ``engine`` and ``permission_mode``; the
service checks the domain rules, so the API, the pages and the admin give the same
messages. Both kinds of failure answer 422 with the API's error body, whose ``errors``
lists ``{"loc", "msg", "type"}`` per field (``promptmgr.api``).

A project with a ``git_url`` is cloned in the background: ``workspace_status`` is
``cloning``, then ``ready`` or ``failed`` (``workspace_error`` says why). A URL over a
scheme the server does not allow, or git's ``ext::``/``fd::`` transports, answer 422
before git runs. ``git_token`` and ``git_ssh_key`` are write-only; the output shows only
``git_secret_kind``. Only staff may set ``worktree_setup_command`` (403).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict, field_validator

from core.schemas import errors
from promptmgr.models import PermissionRule, Project
from promptmgr.services.git_workspace import workspace_retry
from promptmgr.services.projects import (
    permission_rule_delete,
    project_create,
    project_for_user,
    project_update,
)
from promptmgr.services.worktrees import project_disk_usage

router = Router()

EngineName = Literal["cli", "sdk"]
PermissionModeName = Literal["default", "acceptEdits", "plan", "bypassPermissions"]
AnswerPolicyName = Literal["off", "suggest", "auto"]
POLICY_HELP = "off; suggest: the policy's answer shows on the card; auto: it answers after the delay."
POLICY_DELAY_HELP = "Auto: seconds people have to answer first (0: at once; below the ask-user timeout)."
INSTRUCTIONS_HELP = "The team's rules for answering, in plain words."
POLICY_PERMISSIONS_HELP = "Let the policy decide tool approvals (never Bash unless instructions allow it)."


GIT_URL_HELP = "Repository to clone (schemes allowed by WORKSPACE_GIT_SCHEMES); empty: a fresh repository."
GIT_TOKEN_HELP = "Access token for an https URL; write-only, stored encrypted. Empty string: remove it."
GIT_SSH_KEY_HELP = (
    "Deploy key (private key) for an ssh URL; write-only, stored encrypted. Empty string: remove it."
)
COPY_GLOBS_HELP = (
    "Git-ignored files copied from the main checkout into each new worktree, one pattern a line."
)
SETUP_HELP = "Shell command run once in each new worktree before Claude starts (staff only)."
COMMIT_HELP = (
    "Commit each run's changes on the conversation's branch (the user as author, the prompt as message)."
)


class ProjectIn(Schema):
    name: str = Field(max_length=200)
    context: str = ""
    engine: EngineName = "cli"
    ask_user_enabled: bool = True
    ask_user_timeout: int | None = Field(
        None, description="Seconds Claude waits for an answer (30–900); empty: server default."
    )
    permission_mode: PermissionModeName = "acceptEdits"
    model: str = Field("", max_length=100, description="Empty: the CLI's default model.")
    git_url: str = Field("", max_length=1000, description=GIT_URL_HELP)
    git_ref: str = Field("", max_length=255, description="Branch or tag to start from; empty: the default.")
    git_token: str | None = Field(None, max_length=10_000, description=GIT_TOKEN_HELP)
    git_ssh_key: str | None = Field(None, max_length=20_000, description=GIT_SSH_KEY_HELP)
    worktree_copy_globs: str = Field("", max_length=5000, description=COPY_GLOBS_HELP)
    worktree_setup_command: str = Field("", max_length=5000, description=SETUP_HELP)
    commit_after_run: bool = Field(False, description=COMMIT_HELP)
    answer_policy: AnswerPolicyName = Field("off", description=POLICY_HELP)
    answer_policy_delay: int = Field(30, ge=0, le=900, description=POLICY_DELAY_HELP)
    answer_policy_instructions: str = Field("", max_length=20_000, description=INSTRUCTIONS_HELP)
    answer_policy_permissions: bool = Field(False, description=POLICY_PERMISSIONS_HELP)


def _not_nullable(schema: dict[str, Any]) -> None:
    """The published schema of a patch: every field may be left out, none may be null."""
    for prop in schema.get("properties", {}).values():
        options = [o for o in prop.pop("anyOf", []) if o.get("type") != "null"]
        if len(options) == 1:
            prop.update(options[0])
        elif options:
            prop["anyOf"] = options


class ProjectPatch(Schema):
    """Only the fields sent are changed; ``null`` is a value, refused by validation."""

    model_config = ConfigDict(json_schema_extra=_not_nullable)

    name: str | None = Field(None, max_length=200)
    context: str | None = None
    engine: EngineName | None = None
    ask_user_enabled: bool | None = None
    ask_user_timeout: int | None = None
    permission_mode: PermissionModeName | None = None
    model: str | None = Field(None, max_length=100)
    git_url: str | None = Field(None, max_length=1000, description="Only while the clone has failed.")
    git_ref: str | None = Field(None, max_length=255, description="Only while the clone has failed.")
    git_token: str | None = Field(None, max_length=10_000, description=GIT_TOKEN_HELP)
    git_ssh_key: str | None = Field(None, max_length=20_000, description=GIT_SSH_KEY_HELP)
    worktree_copy_globs: str | None = Field(None, max_length=5000, description=COPY_GLOBS_HELP)
    worktree_setup_command: str | None = Field(None, max_length=5000, description=SETUP_HELP)
    commit_after_run: bool | None = Field(None, description=COMMIT_HELP)
    answer_policy: AnswerPolicyName | None = Field(None, description=POLICY_HELP)
    answer_policy_delay: int | None = Field(None, ge=0, le=900, description=POLICY_DELAY_HELP)
    answer_policy_instructions: str | None = Field(None, max_length=20_000, description=INSTRUCTIONS_HELP)
    answer_policy_permissions: bool | None = Field(None, description=POLICY_PERMISSIONS_HELP)

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_null(cls, value: Any) -> Any:
        # Defaults are not validated, so only an explicit null reaches this.
        if value is None:
            raise ValueError("may not be null")
        return value


class ProjectOut(Schema):
    id: int
    name: str
    context: str
    engine: str
    ask_user_enabled: bool
    ask_user_timeout: int
    permission_mode: str
    model: str
    git_url: str
    git_ref: str
    default_branch: str
    workspace_status: str = Field(description="cloning, ready or failed")
    workspace_error: str
    git_secret_kind: str = Field(description='"", "token" or "ssh_key"; the secret itself is never shown')
    worktree_copy_globs: str
    worktree_setup_command: str
    commit_after_run: bool
    answer_policy: str
    answer_policy_delay: int
    answer_policy_instructions: str
    answer_policy_permissions: bool
    owner: str
    is_owner: bool
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_owner(obj: Project) -> str:
        return obj.owner.get_username()

    @staticmethod
    def resolve_is_owner(obj: Project, context: dict[str, Any]) -> bool:
        return bool(obj.owner_id == context["request"].user.pk)


@router.get(
    "", response={200: list[ProjectOut], **errors(401)}, summary="Projects you own or are a member of"
)
def list_projects(request: HttpRequest) -> Any:
    return Project.objects.visible_to(request.user).select_related("owner")


@router.post(
    "",
    response={201: ProjectOut, **errors(401, 403, 422)},
    summary="Create a project you own",
)
def create_project(request: HttpRequest, payload: ProjectIn) -> Any:
    return Status(201, project_create(owner=request.user, **payload.model_dump()))


@router.get(
    "/{project_id}",
    response={200: ProjectOut, **errors(401, 404, 422)},
    summary="One project",
)
def get_project(request: HttpRequest, project_id: int) -> Any:
    return project_for_user(user=request.user, project_id=project_id)


@router.patch(
    "/{project_id}",
    response={200: ProjectOut, **errors(401, 403, 404, 409, 422)},
    summary="Change some of a project's settings",
)
def patch_project(request: HttpRequest, project_id: int, payload: ProjectPatch) -> Any:
    project = project_for_user(user=request.user, project_id=project_id)
    return project_update(project=project, actor=request.user, **payload.model_dump(exclude_unset=True))


class RuleOut(Schema):
    id: int
    rule: str
    added_by: str | None
    created_at: datetime

    @staticmethod
    def resolve_added_by(obj: PermissionRule) -> str | None:
        return obj.added_by.username if obj.added_by is not None else None


@router.get(
    "/{project_id}/rules",
    response={200: list[RuleOut], **errors(401, 404, 422)},
    summary="The project's always-allow rules",
)
def list_rules(request: HttpRequest, project_id: int) -> Any:
    project = project_for_user(user=request.user, project_id=project_id)
    return project.permission_rules.select_related("added_by")


@router.delete(
    "/{project_id}/rules/{rule_id}",
    response={204: None, **errors(401, 403, 404, 422)},
    summary="Remove an always-allow rule (owner only)",
)
def delete_rule(request: HttpRequest, project_id: int, rule_id: int) -> Status[None]:
    project = project_for_user(user=request.user, project_id=project_id)
    permission_rule_delete(project=project, actor=request.user, rule_id=rule_id)
    return Status(204, None)


class WorktreeDiskOut(Schema):
    conversation_id: int
    bytes: int


class DiskUsageOut(Schema):
    repository_bytes: int = Field(description="The repository and its main checkout")
    worktrees: list[WorktreeDiskOut]
    total_bytes: int


@router.get(
    "/{project_id}/disk-usage",
    response={200: DiskUsageOut, **errors(401, 404, 422)},
    summary="What the project's repository and its worktrees take on disk",
)
def disk_usage(request: HttpRequest, project_id: int) -> Any:
    project = project_for_user(user=request.user, project_id=project_id)
    usage = project_disk_usage(project)
    return {
        "repository_bytes": usage.repository_bytes,
        "worktrees": [{"conversation_id": c, "bytes": b} for c, b in sorted(usage.worktrees.items())],
        "total_bytes": usage.total_bytes,
    }


@router.post(
    "/{project_id}/workspace/retry",
    response={202: ProjectOut, **errors(401, 404, 409, 422)},
    summary="Clone the repository again after its clone failed",
)
def retry_clone(request: HttpRequest, project_id: int) -> Any:
    project = project_for_user(user=request.user, project_id=project_id)
    return Status(202, workspace_retry(project=project))
