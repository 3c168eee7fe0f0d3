"""The project settings page in Chromium, on a desktop and a phone, light and dark."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from promptmgr.models import PermissionRule, Project
from promptmgr.services.projects import NAME_TAKEN
from promptmgr.workspaces import workspace_sync
from tests.helpers import browser_login, make_project

pytestmark = pytest.mark.browser


def open_settings(page: Any, server: Any, project: Project, who: str = "alice") -> None:
    browser_login(page, server, who, f"{who}-password")
    page.goto(f"{server.url}/projects/{project.pk}/settings/")


def test_the_owner_changes_every_setting_and_the_workspace_follows(
    app_server: Any, page: Any, alice: Any
) -> None:
    project = make_project(owner=alice, name="Alpha", context="Old context.")
    open_settings(page, app_server, project)

    page.get_by_label("Name", exact=True).fill("Alpha two")
    page.get_by_label("Context").fill("Use tabs, never spaces.")
    page.get_by_label("Engine").select_option("sdk")
    page.get_by_label("Permission mode").select_option("default")
    page.get_by_label("Let Claude ask questions").uncheck()
    page.get_by_label("Question timeout (seconds)").fill("120")
    page.get_by_role("button", name="Save settings").click()

    expect(page.locator(".message-success")).to_have_text("Settings saved.")
    project.refresh_from_db()
    assert (project.name, project.engine, project.permission_mode, project.ask_user_enabled) == (
        "Alpha two",
        "sdk",
        "default",
        False,
    )
    assert project.ask_user_timeout == 120
    # The workspace was regenerated from the saved settings: nothing is left to change.
    assert workspace_sync(project=project, dry_run=True) == []
    expect(page.get_by_label("Name", exact=True)).to_have_value("Alpha two")
    expect(page.get_by_label("Let Claude ask questions")).not_to_be_checked()
    # Bypass is for staff only: alice is not staff.
    expect(page.locator("#id_permission_mode option[value=bypassPermissions]")).to_have_count(0)
    # The chat page says what the settings say.
    page.get_by_role("link", name="← Back to the chat").click()
    expect(page.locator(".chat-project-meta")).to_contain_text("questions off")


def test_a_duplicate_name_and_a_bad_timeout_are_refused_with_clear_messages(
    app_server: Any, page: Any, alice: Any
) -> None:
    make_project(owner=alice, name="Taken")
    project = make_project(owner=alice, name="Mine")
    open_settings(page, app_server, project)

    page.get_by_label("Name", exact=True).fill("taken")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_text(NAME_TAKEN.format(name="taken"))).to_be_visible()

    page.get_by_label("Name", exact=True).fill("Mine")
    page.get_by_label("Question timeout (seconds)").fill("5")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_text("The ask-user timeout must be between 30 and 900 seconds.")).to_be_visible()
    expect(page.get_by_text(NAME_TAKEN.format(name="taken"))).to_have_count(0)
    project.refresh_from_db()
    assert project.name == "Mine"


def test_rules_are_listed_and_the_owner_removes_one(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice, name="Alpha")
    PermissionRule.objects.create(project=project, rule="Bash(npm test:*)", added_by=alice)
    PermissionRule.objects.create(project=project, rule="WebFetch(domain:example.com)", added_by=alice)
    open_settings(page, app_server, project)

    rules = page.locator("[data-role=rules] li")
    expect(rules).to_have_count(2)
    expect(rules.first).to_contain_text("Bash(npm test:*)")
    expect(rules.first).to_contain_text("added by alice")
    page.get_by_role("button", name="Remove rule Bash(npm test:*)").click()

    expect(page.locator(".message-success")).to_have_text("Rule Bash(npm test:*) removed.")
    expect(rules).to_have_count(1)
    assert list(project.permission_rules.values_list("rule", flat=True)) == ["WebFetch(domain:example.com)"]


def test_members_are_added_and_removed_by_username(app_server: Any, page: Any, alice: Any, bob: Any) -> None:
    project = make_project(owner=alice, name="Alpha")
    open_settings(page, app_server, project)
    members = page.locator("[data-role=members] li")
    expect(members).to_have_count(1)

    page.get_by_label("Add a member by username").fill("nobody")
    page.get_by_role("button", name="Add member").click()
    expect(page.get_by_text("There is no user named “nobody”.")).to_be_visible()

    page.get_by_label("Add a member by username").fill("bob")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator(".message-success")).to_have_text("bob can now open this project.")
    expect(members).to_have_count(2)
    assert list(project.members.values_list("username", flat=True)) == ["bob"]

    page.get_by_role("button", name="Remove bob").click()
    expect(members).to_have_count(1)
    assert project.members.count() == 0


def test_delete_asks_for_the_name_then_removes_the_project(app_server: Any, page: Any, alice: Any) -> None:
    project = make_project(owner=alice, name="Doomed")
    open_settings(page, app_server, project)

    page.get_by_label("Type Doomed to confirm").fill("doomed")
    page.get_by_role("button", name="Delete project").click()
    expect(page.get_by_text("Type the project name exactly as shown to delete it.")).to_be_visible()
    assert Project.objects.filter(pk=project.pk).exists()

    page.get_by_label("Type Doomed to confirm").fill("Doomed")
    page.get_by_role("button", name="Delete project").click()

    expect(page).to_have_url(f"{app_server.url}/projects/")
    expect(page.locator(".message-success")).to_have_text("Project “Doomed” deleted.")
    assert not Project.objects.filter(pk=project.pk).exists()


@pytest.mark.parametrize("look", ["desktop-dark", "phone-light"])
def test_a_member_edits_settings_but_sees_no_owner_controls_and_strangers_get_404(
    app_server: Any, page: Any, alice: Any, bob: Any, carol: Any
) -> None:
    project = make_project(owner=alice, members=(bob,), name="Shared")
    PermissionRule.objects.create(project=project, rule="Bash(make:*)", added_by=alice)
    open_settings(page, app_server, project, who="bob")

    expect(page.get_by_role("heading", name="Settings of Shared")).to_be_visible()
    expect(page.locator("[data-role=rules]")).to_contain_text("Bash(make:*)")
    expect(page.get_by_role("button", name="Remove rule Bash(make:*)")).to_have_count(0)
    expect(page.get_by_role("button", name="Add member")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete project")).to_have_count(0)
    page.get_by_label("Context").fill("Set by bob.")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".message-success")).to_have_text("Settings saved.")

    page.context.clear_cookies()
    browser_login(page, app_server, "carol", "carol-password")
    response = page.goto(f"{app_server.url}/projects/{project.pk}/settings/")
    assert response is not None and response.status == 404
    expect(page.get_by_text("Set by bob.")).to_have_count(0)
