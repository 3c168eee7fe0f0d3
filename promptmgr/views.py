"""Browser pages (filled by the foundation work)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


def project_list(request: HttpRequest) -> HttpResponse:
    return HttpResponse("projects")


def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    return HttpResponse("project")
