"""The foundation's pages in Chromium: log in, create a project, see it listed, 404 for others."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.models import Project
from tests.helpers import browser_login, make_project

pytestmark = pytest.mark.browser


def test_log_in_create_a_project_and_see_it_listed(app_server: Any, page: Any, alice: Any) -> None:
    browser_login(page, app_server, "alice", "alice-password")
    expect(page.get_by_text("No projects yet")).to_be_visible()
    page.fill("input[name=name]", "Browser-made project")
    page.fill("textarea[name=context]", "Use tabs, not spaces.")
    page.get_by_role("button", name="Create project").click()

    project = Project.objects.get(name="Browser-made project")
    expect(page).to_have_url(f"{app_server.url}/projects/{project.pk}/")
    assert project.owner == alice and project.context == "Use tabs, not spaces."
    page.goto(f"{app_server.url}/projects/")
    expect(page.locator(".project-list a", has_text="Browser-made project")).to_be_visible()


def test_another_users_project_answers_404_in_the_browser(
    app_server: Any, page: Any, alice: Any, bob: Any
) -> None:
    bobs = make_project(owner=bob, name="Bob's secret project")
    browser_login(page, app_server, "alice", "alice-password")
    expect(page.locator(".project-list")).not_to_be_attached()
    expect(page.get_by_text("Bob's secret project")).to_have_count(0)
    response = page.goto(f"{app_server.url}/projects/{bobs.pk}/")
    assert response is not None and response.status == 404
    expect(page.get_by_text("Bob's secret project")).to_have_count(0)
