"""The file browser page: a tree and a viewer over a conversation's worktree (``?conversation=``)
or the project's default branch. The page only renders URLs; ``static/js/files/browser.js``
reads the files API (``files_api.py``), which checks access on every request."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from promptmgr.models import Conversation
from promptmgr.services.projects import project_for_user


@login_required
def files_page(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_for_user(user=request.user, project_id=project_id)
    conversation = None
    raw = request.GET.get("conversation", "")
    if raw:
        # The project is visible to the user, so its conversations are too; any other id is 404.
        conversation = Conversation.objects.filter(project=project, pk=raw).first() if raw.isdigit() else None
        if conversation is None:
            raise Http404("No such conversation.")
    if conversation is not None:
        urls = {
            "list_url": reverse("api:conversation_files", kwargs={"conversation_id": conversation.pk}),
            "content_url": reverse("api:conversation_file", kwargs={"conversation_id": conversation.pk}),
            "zip_url": reverse("api:conversation_zip", kwargs={"conversation_id": conversation.pk}),
            "chat_url": f"{reverse('project_detail', kwargs={'project_id': project.pk})}?c={conversation.pk}",
        }
    else:
        urls = {
            "list_url": reverse("api:project_files", kwargs={"project_id": project.pk}),
            "content_url": reverse("api:project_file", kwargs={"project_id": project.pk}),
            "zip_url": "",
            "chat_url": reverse("project_detail", kwargs={"project_id": project.pk}),
        }
    context = {
        "project": project,
        "conversation": conversation,
        "urls": urls,
        "path": request.GET.get("path", ""),
    }
    return render(request, "projects/files.html", context)
