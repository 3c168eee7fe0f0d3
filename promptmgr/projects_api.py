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
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import field_validator

from core.schemas import errors
from promptmgr.models import PermissionRule, Project
from promptmgr.services.projects import (
    permission_rule_delete,
    project_create,
    project_for_user,
    project_update,
)

router = Router()

EngineName = Literal["cli", "sdk"]
PermissionModeName = Literal["default", "acceptEdits", "plan", "bypassPermissions"]


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


class ProjectPatch(Schema):
    """Only the fields sent are changed; ``null`` is a value, refused by validation."""

    name: str | None = Field(None, max_length=200)
    context: str | None = None
    engine: EngineName | None = None
    ask_user_enabled: bool | None = None
    ask_user_timeout: int | None = None
    permission_mode: PermissionModeName | None = None
    model: str | None = Field(None, max_length=100)

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
    response={200: ProjectOut, **errors(401, 403, 404, 422)},
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
