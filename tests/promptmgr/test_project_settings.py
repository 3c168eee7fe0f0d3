"""The project settings page and the services behind it: who may do what, and what is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from core.errors import Conflict, Forbidden
from promptmgr.forms import DELETE_CONFIRM_MISMATCH
from promptmgr.models import PermissionRule, Project
from promptmgr.services.projects import (
    DELETE_RUN_ACTIVE,
    MEMBER_UNKNOWN,
    NAME_TAKEN,
    project_create,
    project_delete,
    project_member_add,
    project_update,
)
from promptmgr.workspaces import workspace_path, workspace_sync
from tests.helpers import make_project, make_run

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

ClientFor = Callable[..., Client]


def settings_form(project: Project, **changes: Any) -> dict[str, Any]:
    data = {
        "name": project.name,
        "context": project.context,
        "engine": project.engine,
        "permission_mode": project.permission_mode,
        "ask_user_timeout": project.ask_user_timeout,
        "model": project.model,
    }
    if project.ask_user_enabled:
        data["ask_user_enabled"] = "on"
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_a_second_project_with_the_same_name_is_refused_for_the_same_owner(alice: Any, bob: Any) -> None:
    project_create(owner=alice, name="Alpha")

    with pytest.raises(ValidationError) as caught:
        project_create(owner=alice, name="alpha ")

    assert caught.value.message_dict == {"name": [NAME_TAKEN.format(name="alpha")]}
    assert project_create(owner=bob, name="Alpha").name == "Alpha"


def test_renaming_onto_another_of_ones_projects_is_refused_but_keeping_the_name_is_fine(alice: Any) -> None:
    project_create(owner=alice, name="Alpha")
    beta = project_create(owner=alice, name="Beta")

    with pytest.raises(ValidationError):
        project_update(project=beta, actor=alice, name="Alpha")
    assert project_update(project=beta, actor=alice, name="Beta", context="x").context == "x"


def test_the_create_form_shows_the_duplicate_name_message(client_for: ClientFor, alice: Any) -> None:
    project_create(owner=alice, name="Alpha")

    response = client_for(alice).post("/projects/", {"name": "Alpha", "engine": "cli"})

    assert response.status_code == 400
    assert NAME_TAKEN.format(name="Alpha") in response.content.decode()


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_owner_and_members_open_the_settings_page(
    client_for: ClientFor, project: Project, who: str, request: Any
) -> None:
    response = client_for(request.getfixturevalue(who)).get(f"/projects/{project.pk}/settings/")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="name"' in html and 'name="ask_user_timeout"' in html
    # Owner-only parts show to the owner only.
    assert ("Delete project" in html) is (who == "alice")
    assert ("Add member" in html) is (who == "alice")


def test_anyone_else_gets_404_for_every_settings_url(
    client_for: ClientFor, project: Project, carol: Any
) -> None:
    client = client_for(carol)
    rule = PermissionRule.objects.create(project=project, rule="Bash(ls:*)")
    base = f"/projects/{project.pk}"

    assert client.get(f"{base}/settings/").status_code == 404
    assert client.post(f"{base}/settings/", settings_form(project, name="Hacked")).status_code == 404
    assert client.post(f"{base}/settings/members/", {"username": "carol"}).status_code == 404
    assert client.post(f"{base}/settings/members/remove/", {"username": "bob"}).status_code == 404
    assert client.post(f"{base}/settings/rules/{rule.pk}/remove/").status_code == 404
    assert client.post(f"{base}/delete/", {"confirm_name": project.name}).status_code == 404
    project.refresh_from_db()
    assert project.name == "Alpha" and project.members.count() == 1


def test_a_member_saves_settings_and_the_workspace_follows(
    client_for: ClientFor, project: Project, bob: Any
) -> None:
    response = client_for(bob).post(
        f"/projects/{project.pk}/settings/",
        settings_form(
            project, context="Use tabs.", ask_user_enabled=None, ask_user_timeout=120, engine="sdk"
        ),
    )

    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.context, project.ask_user_enabled, project.ask_user_timeout, project.engine) == (
        "Use tabs.",
        False,
        120,
        "sdk",
    )
    # The workspace was regenerated from the saved settings: nothing is left to change.
    assert workspace_sync(project=project, dry_run=True) == []


def test_bypass_is_offered_to_staff_only(client_for: ClientFor, project: Project, alice: Any) -> None:
    response = client_for(alice).post(
        f"/projects/{project.pk}/settings/", settings_form(project, permission_mode="bypassPermissions")
    )
    assert response.status_code == 400
    assert 'value="bypassPermissions"' not in response.content.decode()

    alice.is_staff = True
    alice.save()
    page = client_for(alice).get(f"/projects/{project.pk}/settings/").content.decode()
    assert 'value="bypassPermissions"' in page
    saved = client_for(alice).post(
        f"/projects/{project.pk}/settings/", settings_form(project, permission_mode="bypassPermissions")
    )
    assert saved.status_code == 302
    project.refresh_from_db()
    assert project.permission_mode == "bypassPermissions"


def test_a_bad_timeout_is_shown_next_to_its_field(client_for: ClientFor, project: Project) -> None:
    response = client_for(project.owner).post(
        f"/projects/{project.pk}/settings/", settings_form(project, ask_user_timeout=5)
    )

    assert response.status_code == 400
    assert "The ask-user timeout must be between 30 and 900 seconds." in response.content.decode()


def test_the_owner_adds_and_removes_members_by_username(
    client_for: ClientFor, project: Project, carol: Any
) -> None:
    client = client_for(project.owner)

    assert client.post(f"/projects/{project.pk}/settings/members/", {"username": "carol"}).status_code == 302
    assert set(project.members.values_list("username", flat=True)) == {"bob", "carol"}
    unknown = client.post(f"/projects/{project.pk}/settings/members/", {"username": "nobody"})
    assert unknown.status_code == 400
    assert MEMBER_UNKNOWN.format(username="nobody") in unknown.content.decode()
    assert (
        client.post(f"/projects/{project.pk}/settings/members/remove/", {"username": "bob"}).status_code
        == 302
    )
    assert set(project.members.values_list("username", flat=True)) == {"carol"}


def test_a_member_may_not_change_membership_remove_rules_or_delete(
    client_for: ClientFor, project: Project, bob: Any, carol: Any
) -> None:
    client = client_for(bob)
    rule = PermissionRule.objects.create(project=project, rule="Bash(ls:*)")

    assert client.post(f"/projects/{project.pk}/settings/members/", {"username": "carol"}).status_code == 403
    assert client.post(f"/projects/{project.pk}/settings/rules/{rule.pk}/remove/").status_code == 403
    assert client.post(f"/projects/{project.pk}/delete/", {"confirm_name": "Alpha"}).status_code == 403
    with pytest.raises(Forbidden):
        project_member_add(project=project, actor=bob, username="carol")
    assert Project.objects.filter(pk=project.pk).exists()
    assert PermissionRule.objects.filter(pk=rule.pk).exists()


def test_the_owner_removes_a_rule(client_for: ClientFor, project: Project) -> None:
    rule = PermissionRule.objects.create(project=project, rule="Bash(npm test:*)")

    response = client_for(project.owner).post(f"/projects/{project.pk}/settings/rules/{rule.pk}/remove/")

    assert response.status_code == 302
    assert not PermissionRule.objects.filter(pk=rule.pk).exists()


def test_delete_needs_the_name_typed_and_then_removes_the_workspace(
    client_for: ClientFor, project: Project
) -> None:
    client = client_for(project.owner)
    directory = workspace_path(project)
    assert directory.exists()

    wrong = client.post(f"/projects/{project.pk}/delete/", {"confirm_name": "alpha"})
    assert wrong.status_code == 400
    assert DELETE_CONFIRM_MISMATCH in wrong.content.decode()
    assert Project.objects.filter(pk=project.pk).exists()

    response = client.post(f"/projects/{project.pk}/delete/", {"confirm_name": "Alpha"})
    assert response.status_code == 302 and response["Location"] == "/projects/"
    assert not Project.objects.filter(pk=project.pk).exists()
    assert not directory.exists()


def test_delete_is_refused_while_a_run_is_going(alice: Any) -> None:
    project = make_project(owner=alice, name="Busy")
    make_run(owner=alice, project=project, status="running")

    with pytest.raises(Conflict) as caught:
        project_delete(project=project, actor=alice)

    assert caught.value.detail == DELETE_RUN_ACTIVE
    assert Project.objects.filter(pk=project.pk).exists()


def test_markdown_preview_renders_sanitized_html_for_signed_in_users(
    client_for: ClientFor, alice: Any
) -> None:
    client = client_for(alice)

    response = client.post(
        "/markdown/",
        '{"text": "**hi** <script>x()</script>\\n\\n```py\\nx = 1\\n```"}',
        content_type="application/json",
    )

    assert response.status_code == 200
    html = response.json()["html"]
    assert "<strong>hi</strong>" in html and "<script>" not in html
    assert '<span class="hl-n">x</span>' in html
    assert client.post("/markdown/", "{}", content_type="application/json").status_code == 422
    assert Client().post("/markdown/", '{"text": "x"}', content_type="application/json").status_code == 302
