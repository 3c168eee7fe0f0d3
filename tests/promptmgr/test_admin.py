"""Admin: the per-project ask-user toggle regenerates the workspace."""

from __future__ import annotations

from html import escape
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from promptmgr.models import Project
from promptmgr.services.projects import SDK_BYPASS_REFUSED
from promptmgr.workspaces import workspace_path
from tests.helpers import make_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

CHANGELIST = "/admin/promptmgr/project/"


@pytest.fixture
def admin_client(db: Any) -> Client:
    admin = User.objects.create_superuser("root", "root@example.com", "root-password")
    client = Client()
    client.force_login(admin)
    return client


def _changelist_post(project: Project, **overrides: Any) -> dict[str, Any]:
    """The changelist's inline-edit formset for one row; a checkbox left out means off."""
    row = {
        "id": project.pk,
        "engine": project.engine,
        "permission_mode": project.permission_mode,
        "ask_user_timeout": project.ask_user_timeout,
        "ask_user_enabled": "on" if project.ask_user_enabled else None,
    } | overrides
    data: dict[str, Any] = {
        "form-TOTAL_FORMS": "1",
        "form-INITIAL_FORMS": "1",
        "form-MIN_NUM_FORMS": "0",
        "form-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    data |= {f"form-0-{key}": value for key, value in row.items() if value is not None}
    return data


def test_changelist_shows_the_ask_user_columns(admin_client: Client, alice: Any) -> None:
    make_project(owner=alice, name="Alpha")

    html = admin_client.get(CHANGELIST).content.decode()

    assert "form-0-ask_user_enabled" in html
    assert "form-0-ask_user_timeout" in html
    assert "Alpha" in html


def test_list_toggle_turns_ask_user_off_and_unregisters_the_server(admin_client: Client, alice: Any) -> None:
    project = make_project(owner=alice)
    root = workspace_path(project)
    assert (root / ".mcp.json").exists()

    response = admin_client.post(CHANGELIST, _changelist_post(project, ask_user_enabled=None))

    assert response.status_code == 302
    project.refresh_from_db()
    assert project.ask_user_enabled is False
    assert not (root / ".mcp.json").exists()
    assert "mcp__ask-user__ask_user" not in (root / ".claude" / "settings.local.json").read_text()


def test_list_toggle_turns_ask_user_back_on(admin_client: Client, alice: Any) -> None:
    project = make_project(owner=alice, ask_user_enabled=False)

    admin_client.post(CHANGELIST, _changelist_post(project, ask_user_enabled="on"))

    project.refresh_from_db()
    assert project.ask_user_enabled is True
    assert (workspace_path(project) / ".mcp.json").exists()


def test_list_refuses_a_timeout_out_of_range(admin_client: Client, alice: Any) -> None:
    project = make_project(owner=alice)

    response = admin_client.post(CHANGELIST, _changelist_post(project, ask_user_timeout=901))

    assert response.status_code == 200
    project.refresh_from_db()
    assert project.ask_user_timeout == 300


def test_list_refuses_sdk_with_bypass_permissions(admin_client: Client, alice: Any) -> None:
    project = make_project(owner=alice)

    response = admin_client.post(
        CHANGELIST, _changelist_post(project, engine="sdk", permission_mode="bypassPermissions")
    )

    assert response.status_code == 200
    assert escape(SDK_BYPASS_REFUSED) in response.content.decode()
    project.refresh_from_db()
    assert (project.engine, project.permission_mode) == ("cli", "acceptEdits")


# The always-allow rules inline's management form, with no rows.
RULES_INLINE_EMPTY = {
    "permission_rules-TOTAL_FORMS": "0",
    "permission_rules-INITIAL_FORMS": "0",
    "permission_rules-MIN_NUM_FORMS": "0",
    "permission_rules-MAX_NUM_FORMS": "1000",
}


def test_change_form_save_regenerates_claude_md(admin_client: Client, alice: Any) -> None:
    project = make_project(owner=alice, context="old")

    response = admin_client.post(
        f"{CHANGELIST}{project.pk}/change/",
        {
            "name": "Alpha",
            "owner": alice.pk,
            "context": "new instructions",
            "engine": "cli",
            "permission_mode": "acceptEdits",
            "model": "",
            "ask_user_enabled": "on",
            "ask_user_timeout": "120",
            "answer_policy": "off",
            "answer_policy_delay": "30",
            **RULES_INLINE_EMPTY,
        },
    )

    assert response.status_code == 302
    assert "new instructions" in (workspace_path(project) / "CLAUDE.local.md").read_text()


@pytest.mark.parametrize(
    "path",
    [
        "/admin/promptmgr/conversation/",
        "/admin/promptmgr/run/",
        "/admin/askuser/question/",
        "/admin/askuser/permissionrequest/",
    ],
)
def test_other_admin_lists_load(admin_client: Client, path: str) -> None:
    assert admin_client.get(path).status_code == 200
