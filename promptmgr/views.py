"""Browser pages: the project list (with the create form) and a project's page."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_http_methods

from promptmgr.forms import ProjectCreateForm
from promptmgr.models import Project
from promptmgr.services.projects import project_create, project_for_user

PROJECT_CREATED = "Project “{name}” created."


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
    # A form that failed is answered 400 so scripts and tests can tell; browsers show it as usual.
    status = 400 if form.is_bound else 200
    return render(request, "projects/list.html", {"projects": projects, "form": form}, status=status)


@login_required
@ensure_csrf_cookie
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)

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
        "csrf_cookie": settings.CSRF_COOKIE_NAME,
    }
    return render(request, "projects/detail.html", {"project": project, "chat": chat})
