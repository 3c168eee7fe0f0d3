"""Browser pages: the project list (with the create form), a project's chat page and its settings."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_http_methods, require_POST

from askuser import clicks
from core.errors import Conflict, Forbidden, NotFound
from promptmgr.forms import MemberAddForm, ProjectCreateForm, ProjectDeleteForm, ProjectSettingsForm
from promptmgr.markdown import render_markdown_async
from promptmgr.models import Project, WorkspaceStatus
from promptmgr.services.demo import demo_triggers, project_asks_user
from promptmgr.services.projects import (
    ProjectNotFound,
    permission_rule_delete,
    project_create,
    project_delete,
    project_for_user,
    project_member_add,
    project_member_remove,
    project_update,
)
from promptmgr.services.worktrees import project_disk_bytes

PROJECT_CREATED = "Project “{name}” created."
# Stands in for a question id in the late-answer URL the chat script fills in ("{id}").
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
SETTINGS_SAVED = "Settings saved."
MEMBER_ADDED = "{username} can now open this project."
MEMBER_REMOVED = "{username} no longer has access to this project."
RULE_REMOVED = "Rule {rule} removed."
PROJECT_DELETED = "Project “{name}” deleted."
# A streaming reply is rendered again as it grows; a reply this long is past any real one.
MARKDOWN_MAX_CHARS = 500_000
MARKDOWN_BAD_BODY = f'Send {{"text": "…"}} with at most {MARKDOWN_MAX_CHARS} characters.'


@login_required
@require_http_methods(["GET", "POST"])
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectCreateForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            project = project_create(owner=request.user, **form.cleaned_data)
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, PROJECT_CREATED.format(name=project.name))
            return redirect("project_detail", project_id=project.pk)
    projects = Project.objects.visible_to(request.user).select_related("owner")
    # The page reloads itself while a clone is under way, so its end shows without a click.
    cloning = projects.filter(workspace_status=WorkspaceStatus.CLONING).exists()
    # A form that failed is answered 400 so scripts and tests can tell; browsers show it as usual.
    status = 400 if form.is_bound else 200
    context = {"projects": projects, "form": form, "cloning": cloning}
    return render(request, "projects/list.html", context, status=status)


@login_required
@ensure_csrf_cookie
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)

    late_answer_url = reverse("api:late_answer", kwargs={"question_id": ZERO_UUID}).replace(ZERO_UUID, "{id}")

    def with_id_slot(name: str, kwarg: str) -> str:
        # The chat script fills in "{id}"; reverse() needs a real id, so 0 stands in for it.
        head, _, tail = reverse(name, kwargs={kwarg: 0}).rpartition("/0")
        return f"{head}/{{id}}{tail}"

    chat = {
        "runs_url": reverse("api:start_run", kwargs={"project_id": project.pk}),
        "conversations_url": reverse("api:list_conversations", kwargs={"project_id": project.pk}),
        "conversation_url": with_id_slot("api:get_conversation", "conversation_id"),
        "cancel_url": with_id_slot("api:cancel_run", "run_id"),
        "submit_answer_url": reverse("api:submit_answer"),
        "submit_decision_url": reverse("api:submit_decision"),
        "clicks_url": clicks.PATH,
        "messages_url": with_id_slot("api:send_message", "run_id"),
        "late_answer_url": late_answer_url,
        "markdown_url": reverse("markdown_preview"),
        "changes_url": with_id_slot("api:run_changes", "run_id"),
        "revert_url": with_id_slot("api:revert_run", "run_id"),
        "files_page_url": reverse("files_page", kwargs={"project_id": project.pk}),
        "csrf_cookie": settings.CSRF_COOKIE_NAME,
    }
    context = {
        "project": project,
        "chat": chat,
        "ask_user_on": project_asks_user(project),
        "demo_triggers": demo_triggers(project=project) if settings.DEMO_MODEL else [],
        "disk_bytes": project_disk_bytes(project),
    }
    return render(request, "projects/detail.html", context)


def _settings_page(
    request: HttpRequest,
    project: Project,
    *,
    form: ProjectSettingsForm | None = None,
    member_form: MemberAddForm | None = None,
    delete_form: ProjectDeleteForm | None = None,
    status: int = 200,
) -> HttpResponse:
    initial = {name: getattr(project, name) for name in ProjectSettingsForm.base_fields}
    context: dict[str, Any] = {
        "project": project,
        "is_owner": project.owner_id == request.user.pk,
        "form": form or ProjectSettingsForm(initial=initial, user=request.user, project=project),
        "member_form": member_form or MemberAddForm(),
        "delete_form": delete_form or ProjectDeleteForm(project=project),
        "members": project.members.order_by("username"),
        "rules": project.permission_rules.select_related("added_by"),
    }
    return render(request, "projects/settings.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def project_settings(request: HttpRequest, project_id: int) -> HttpResponse:
    """Owner and members change how Claude runs here; owner-only parts show to the owner only."""
    project = project_for_user(user=request.user, project_id=project_id)
    if request.method == "GET":
        return _settings_page(request, project)
    form = ProjectSettingsForm(request.POST, user=request.user, project=project)
    if form.is_valid():
        try:
            project_update(project=project, actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, SETTINGS_SAVED)
            return redirect("project_settings", project_id=project.pk)
    return _settings_page(request, project, form=form, status=400)


@login_required
@require_POST
def project_member_add_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)
    form = MemberAddForm(request.POST)
    if form.is_valid():
        try:
            user = _owner_action(project_member_add, project=project, actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, MEMBER_ADDED.format(username=user.get_username()))
            return redirect("project_settings", project_id=project.pk)
    return _settings_page(request, project, member_form=form, status=400)


@login_required
@require_POST
def project_member_remove_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)
    username = request.POST.get("username", "")
    _owner_action(project_member_remove, project=project, actor=request.user, username=username)
    messages.success(request, MEMBER_REMOVED.format(username=username))
    return redirect("project_settings", project_id=project.pk)


@login_required
@require_POST
def project_rule_remove(request: HttpRequest, project_id: int, rule_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)
    rule = project.permission_rules.filter(pk=rule_id).values_list("rule", flat=True).first()
    _owner_action(permission_rule_delete, project=project, actor=request.user, rule_id=rule_id)
    messages.success(request, RULE_REMOVED.format(rule=rule))
    return redirect("project_settings", project_id=project.pk)


@login_required
@require_POST
def project_delete_view(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)
    form = ProjectDeleteForm(request.POST, project=project)
    if not form.is_valid():
        return _settings_page(request, project, delete_form=form, status=400)
    name = project.name
    try:
        _owner_action(project_delete, project=project, actor=request.user)
    except Conflict as exc:
        form.add_error(None, exc.detail)
        return _settings_page(request, project, delete_form=form, status=409)
    messages.success(request, PROJECT_DELETED.format(name=name))
    return redirect("project_list")


def _owner_action(action: Any, **kwargs: Any) -> Any:
    """Run an owner-only service; its domain errors become the page answers Django knows."""
    try:
        return action(**kwargs)
    except Forbidden as exc:
        raise PermissionDenied(exc.detail) from None
    except NotFound as exc:
        raise ProjectNotFound(exc.detail) from None


@login_required
@require_POST
async def markdown_preview(request: HttpRequest) -> HttpResponse:
    """Claude's text while it streams, rendered and sanitized as a complete reply is.

    The chat page asks again as the text grows (at most a few times a second per reply);
    the complete ``assistant_text`` event then brings the final HTML."""
    try:
        text = json.loads(request.body)["text"]
    except (ValueError, KeyError, TypeError):
        text = None
    if not isinstance(text, str) or len(text) > MARKDOWN_MAX_CHARS:
        return JsonResponse({"detail": MARKDOWN_BAD_BODY, "code": "invalid"}, status=422)
    return JsonResponse({"html": await render_markdown_async(text)})
