"""Browser pages: the project list (with the create form) and a project's page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
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
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)
    return render(request, "projects/detail.html", {"project": project})
