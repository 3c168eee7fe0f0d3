"""The pages under the Content-Security-Policy in Chromium: nothing is blocked (the
``page`` fixture fails a test on any violation), and /api/docs works with no network
beyond this server."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.helpers import browser_login, make_project

pytestmark = pytest.mark.browser


def test_api_docs_work_offline(app_server: Any, page: Any, alice: Any) -> None:
    outside: list[str] = []

    def only_this_server(route: Any) -> None:
        if route.request.url.startswith(app_server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_server)
    browser_login(page, app_server, "alice", "alice-password")
    page.goto(f"{app_server.url}/api/docs")

    expect(page.locator(".swagger-ui .info .title")).to_contain_text("PromptManager", timeout=30_000)
    page.get_by_text("/api/projects/{project_id}/rules", exact=True).first.click()
    expect(page.get_by_text("The project's always-allow rules").first).to_be_visible()
    assert outside == []


@pytest.mark.parametrize("look", ["desktop-light", "phone-dark"])
def test_the_admin_works_under_the_policy(app_server: Any, page: Any, alice: Any) -> None:
    alice.is_staff = True
    alice.is_superuser = True
    alice.save()
    project = make_project(owner=alice, name="Alpha")
    browser_login(page, app_server, "alice", "alice-password")

    page.goto(f"{app_server.url}/admin/promptmgr/project/{project.pk}/change/")
    page.get_by_label("Name:").fill("Alpha renamed")
    page.get_by_role("button", name="Save", exact=True).click()

    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    project.refresh_from_db()
    assert project.name == "Alpha renamed"
