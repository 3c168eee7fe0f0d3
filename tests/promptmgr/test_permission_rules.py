"""The project's always-allow rules: listed for the team, removed by the owner (API and admin)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import PermissionRule, Project
from promptmgr.services.projects import PROJECT_NOT_FOUND, RULE_NOT_FOUND, RULES_OWNER_ONLY
from promptmgr.workspaces import workspace_path

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.unit]

ClientFor = Callable[..., Client]


@pytest.fixture
def rule(project: Project, bob: Any) -> PermissionRule:
    return PermissionRule.objects.create(project=project, rule="Bash(npm test:*)", added_by=bob)


def allowed(project: Project) -> list[str]:
    path = workspace_path(project) / ".claude" / "settings.local.json"
    return list(json.loads(path.read_text())["permissions"]["allow"])


def test_owner_and_members_see_the_rules_with_who_added_them(
    client_for: ClientFor, project: Project, rule: PermissionRule, alice: Any, bob: Any
) -> None:
    for user in (alice, bob):
        response = client_for(user).get(f"/api/projects/{project.pk}/rules")
        assert response.status_code == 200
        [item] = response.json()
        assert (item["id"], item["rule"], item["added_by"]) == (rule.pk, "Bash(npm test:*)", "bob")


def test_a_new_rule_is_written_into_the_workspace(project: Project, rule: PermissionRule) -> None:
    assert "Bash(npm test:*)" in allowed(project)


def test_the_owner_removes_a_rule_and_the_workspace_follows(
    client_for: ClientFor, project: Project, rule: PermissionRule, alice: Any
) -> None:
    response = client_for(alice).delete(f"/api/projects/{project.pk}/rules/{rule.pk}")

    assert response.status_code == 204
    assert not PermissionRule.objects.exists()
    assert "Bash(npm test:*)" not in allowed(project)


def test_a_member_may_not_remove_a_rule(
    client_for: ClientFor, project: Project, rule: PermissionRule, bob: Any
) -> None:
    response = client_for(bob).delete(f"/api/projects/{project.pk}/rules/{rule.pk}")

    assert response.status_code == 403
    assert response.json() == {"detail": RULES_OWNER_ONLY, "code": "owner_only"}
    assert PermissionRule.objects.filter(pk=rule.pk).exists()


def test_a_stranger_gets_404_for_the_list_and_the_removal(
    client_for: ClientFor, project: Project, rule: PermissionRule, carol: Any
) -> None:
    client = client_for(carol)
    assert client.get(f"/api/projects/{project.pk}/rules").json()["detail"] == PROJECT_NOT_FOUND
    response = client.delete(f"/api/projects/{project.pk}/rules/{rule.pk}")
    assert response.status_code == 404
    assert PermissionRule.objects.filter(pk=rule.pk).exists()


def test_a_rule_of_another_project_is_404(client_for: ClientFor, project: Project, alice: Any) -> None:
    other = Project.objects.create(owner=alice, name="Other")
    foreign = PermissionRule.objects.create(project=other, rule="Bash(ls:*)")

    response = client_for(alice).delete(f"/api/projects/{project.pk}/rules/{foreign.pk}")

    assert response.status_code == 404
    assert response.json()["detail"] == RULE_NOT_FOUND


def test_removal_needs_the_csrf_token(
    client_for: ClientFor, project: Project, rule: PermissionRule, alice: Any
) -> None:
    response = client_for(alice, enforce_csrf_checks=True).delete(
        f"/api/projects/{project.pk}/rules/{rule.pk}"
    )
    assert response.status_code == 403
    assert PermissionRule.objects.filter(pk=rule.pk).exists()


def test_the_admin_lists_a_projects_rules_and_removes_one(
    admin_client: Client, project: Project, rule: PermissionRule
) -> None:
    url = f"/admin/promptmgr/project/{project.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    assert "Bash(npm test:*)" in page.content.decode()

    form = {
        "name": project.name,
        "owner": project.owner_id,
        "members": [m.pk for m in project.members.all()],
        "context": project.context,
        "engine": project.engine,
        "permission_mode": project.permission_mode,
        "model": "",
        "ask_user_enabled": "on",
        "ask_user_timeout": str(project.ask_user_timeout),
        "answer_policy": project.answer_policy,
        "answer_policy_delay": str(project.answer_policy_delay),
        "permission_rules-TOTAL_FORMS": "1",
        "permission_rules-INITIAL_FORMS": "1",
        "permission_rules-MIN_NUM_FORMS": "0",
        "permission_rules-MAX_NUM_FORMS": "1000",
        "permission_rules-0-id": str(rule.pk),
        "permission_rules-0-project": str(project.pk),
        "permission_rules-0-DELETE": "on",
    }
    response = admin_client.post(url, form)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert not PermissionRule.objects.exists()
    assert "Bash(npm test:*)" not in allowed(project)
