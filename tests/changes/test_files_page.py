"""The file browser page: rendered for the project's people with the API URLs its script
reads; 404 for anyone else and for a conversation of another project."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Conversation, Project
from tests.helpers import make_project

pytestmark = pytest.mark.unit

ClientFor = Callable[[Any], Client]


def test_the_page_on_a_conversation_points_at_its_worktree_and_zip(
    client_for: ClientFor, project: Project, conversation: Conversation, bob: Any
) -> None:
    response = client_for(bob).get(f"/projects/{project.pk}/files/", {"conversation": conversation.pk})
    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-list-url="/api/conversations/{conversation.pk}/files"' in page
    assert f'data-content-url="/api/conversations/{conversation.pk}/files/content"' in page
    assert f'href="/api/conversations/{conversation.pk}/files/zip"' in page
    assert 'src="/static/js/files/browser.js"' in page
    assert "<script>" not in page  # no inline script: the CSP allows none


def test_the_page_without_a_conversation_shows_the_default_branch(
    client_for: ClientFor, project: Project, alice: Any
) -> None:
    page = client_for(alice).get(f"/projects/{project.pk}/files/", {"path": "src/app.py"}).content.decode()
    assert f'data-list-url="/api/projects/{project.pk}/files"' in page
    assert 'data-path="src/app.py"' in page
    assert "Download zip" not in page


def test_strangers_and_other_projects_conversations_get_404(
    client_for: ClientFor, project: Project, conversation: Conversation, alice: Any, carol: Any
) -> None:
    assert client_for(carol).get(f"/projects/{project.pk}/files/").status_code == 404
    other = make_project(owner=alice, name="Other")
    url = f"/projects/{other.pk}/files/"
    assert client_for(alice).get(url, {"conversation": conversation.pk}).status_code == 404
    assert client_for(alice).get(url, {"conversation": "x"}).status_code == 404
    assert Client().get(url).status_code == 302  # to the login page


def test_the_chat_page_links_to_the_files_and_carries_the_changes_urls(
    client_for: ClientFor, project: Project, alice: Any
) -> None:
    page = client_for(alice).get(f"/projects/{project.pk}/").content.decode()
    assert f'href="/projects/{project.pk}/files/"' in page
    assert 'data-changes-url="/api/runs/{id}/changes"' in page
    assert 'data-revert-url="/api/runs/{id}/revert"' in page
