"""``/api/projects``: who may see and change what, and how bad input is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.forms.models import model_to_dict
from django.test import Client

from promptmgr.models import Project
from promptmgr.services.projects import (
    BYPASS_STAFF_ONLY,
    NAME_REQUIRED,
    PROJECT_NOT_FOUND,
    SDK_BYPASS_REFUSED,
    TIMEOUT_OUT_OF_RANGE,
)
from promptmgr.workspaces import workspace_path
from tests.helpers import make_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

ClientFor = Callable[..., Client]
JSON = "application/json"


def _messages(response: Any) -> list[str]:
    body = response.json()
    assert body["code"] == "invalid"
    return [error["msg"] for error in body["errors"]]


def _post(client: Client, body: dict[str, Any]) -> Any:
    return client.post("/api/projects", body, content_type=JSON)


def _patch(client: Client, project: Project, body: dict[str, Any]) -> Any:
    return client.patch(f"/api/projects/{project.pk}", body, content_type=JSON)


def _snapshot(project: Project) -> dict[str, Any]:
    project.refresh_from_db()
    return model_to_dict(project) | {"updated_at": project.updated_at}


# --- Reading -------------------------------------------------------------------------


def test_list_shows_owned_and_shared_projects_only(
    client_for: ClientFor, project: Project, alice: Any, bob: Any, carol: Any
) -> None:
    make_project(owner=carol, name="Carol's secret")
    make_project(owner=bob, name="Bob's own")

    def names(user: Any) -> list[str]:
        response = client_for(user).get("/api/projects")
        assert response.status_code == 200
        return [item["name"] for item in response.json()]

    assert names(alice) == ["Alpha"]
    assert names(bob) == ["Alpha", "Bob's own"]
    assert names(carol) == ["Carol's secret"]


def test_anonymous_list_gets_401() -> None:
    assert Client().get("/api/projects").status_code == 401


def test_owner_gets_every_field(client_for: ClientFor, project: Project, alice: Any) -> None:
    body = client_for(alice).get(f"/api/projects/{project.pk}").json()

    assert body | {"created_at": None, "updated_at": None} == {
        "id": project.pk,
        "name": "Alpha",
        "context": "Be brief.",
        "engine": "cli",
        "ask_user_enabled": True,
        "ask_user_timeout": 300,
        "permission_mode": "acceptEdits",
        "model": "",
        "git_url": "",
        "git_ref": "",
        "default_branch": "",
        "workspace_status": "ready",
        "workspace_error": "",
        "git_secret_kind": "",
        "worktree_copy_globs": "",
        "worktree_setup_command": "",
        "commit_after_run": False,
        "answer_policy": "off",
        "answer_policy_delay": 30,
        "answer_policy_instructions": "",
        "answer_policy_permissions": False,
        "owner": "alice",
        "is_owner": True,
        "created_at": None,
        "updated_at": None,
    }


def test_member_sees_project_but_is_not_owner(client_for: ClientFor, project: Project, bob: Any) -> None:
    response = client_for(bob).get(f"/api/projects/{project.pk}")

    assert response.status_code == 200
    assert response.json()["owner"] == "alice"
    assert response.json()["is_owner"] is False


def test_other_user_gets_404_like_a_missing_project(
    client_for: ClientFor, project: Project, carol: Any
) -> None:
    client = client_for(carol)
    hidden = client.get(f"/api/projects/{project.pk}")
    missing = client.get(f"/api/projects/{project.pk + 1000}")

    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json() == {"detail": PROJECT_NOT_FOUND, "code": "not_found"}


def test_anonymous_detail_gets_401(project: Project) -> None:
    assert Client().get(f"/api/projects/{project.pk}").status_code == 401


# --- Creating ------------------------------------------------------------------------


def test_create_makes_an_owned_project_with_its_workspace(client_for: ClientFor, bob: Any) -> None:
    response = _post(client_for(bob), {"name": "  Beta  ", "context": "Use tabs.", "engine": "sdk"})

    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "Beta"
    assert body["owner"] == "bob"
    assert body["is_owner"] is True
    assert body["ask_user_timeout"] == 300
    project = Project.objects.get(pk=body["id"])
    assert project.owner == bob
    assert project.engine == "sdk"
    assert "Use tabs." in (workspace_path(project) / "CLAUDE.local.md").read_text()


def test_create_takes_every_setting(client_for: ClientFor, alice: Any) -> None:
    body = {
        "name": "Gamma",
        "engine": "cli",
        "ask_user_enabled": False,
        "ask_user_timeout": 900,
        "permission_mode": "plan",
        "model": "claude-sonnet-4-5",
    }
    response = _post(client_for(alice), body)

    assert response.status_code == 201
    assert {key: response.json()[key] for key in body} == body


def test_anonymous_create_gets_401_and_creates_nothing() -> None:
    response = _post(Client(), {"name": "Nope"})

    assert response.status_code == 401
    assert not Project.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"name": "X", "ask_user_timeout": 29}, "ask_user_timeout", TIMEOUT_OUT_OF_RANGE),
        ({"name": "X", "ask_user_timeout": 901}, "ask_user_timeout", TIMEOUT_OUT_OF_RANGE),
        ({"name": ""}, "name", NAME_REQUIRED),
        ({"name": "   "}, "name", NAME_REQUIRED),
        (
            {"name": "X", "engine": "sdk", "permission_mode": "bypassPermissions"},
            "permission_mode",
            SDK_BYPASS_REFUSED,
        ),
    ],
)
def test_create_with_bad_settings_gets_422_with_the_reason(
    client_for: ClientFor, alice: Any, body: dict[str, Any], field: str, message: str
) -> None:
    response = _post(client_for(alice), body)

    assert response.status_code == 422
    assert response.json()["errors"] == [
        {"loc": ["body", "payload", field], "msg": message, "type": "value_error"}
    ]
    assert not Project.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "X", "engine": "gpt"}, "engine"),
        ({"name": "X", "permission_mode": "yolo"}, "permission_mode"),
        ({"name": "X", "ask_user_timeout": "soon"}, "ask_user_timeout"),
        ({"context": "no name"}, "name"),
    ],
)
def test_create_with_malformed_input_gets_422_naming_the_field(
    client_for: ClientFor, alice: Any, body: dict[str, Any], field: str
) -> None:
    response = _post(client_for(alice), body)

    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["errors"]] == [["body", "payload", field]]
    assert not Project.objects.exists()


# --- Changing ------------------------------------------------------------------------


def test_owner_can_patch_some_fields_and_the_rest_stay(
    client_for: ClientFor, project: Project, alice: Any
) -> None:
    response = _patch(client_for(alice), project, {"ask_user_timeout": 120, "context": "Be thorough."})

    assert response.status_code == 200
    project.refresh_from_db()
    assert (project.ask_user_timeout, project.context, project.name) == (120, "Be thorough.", "Alpha")
    assert "Be thorough." in (workspace_path(project) / "CLAUDE.local.md").read_text()


def test_member_can_patch_project_settings(client_for: ClientFor, project: Project, bob: Any) -> None:
    response = _patch(client_for(bob), project, {"ask_user_enabled": False})

    assert response.status_code == 200
    assert response.json()["ask_user_enabled"] is False
    assert not (workspace_path(project) / ".mcp.json").exists()


def test_commit_after_run_is_switched_on_through_the_api(
    client_for: ClientFor, project: Project, alice: Any
) -> None:
    response = _patch(client_for(alice), project, {"commit_after_run": True})

    assert response.status_code == 200
    assert response.json()["commit_after_run"] is True
    project.refresh_from_db()
    assert project.commit_after_run is True


def test_other_user_gets_404_and_nothing_changes(client_for: ClientFor, project: Project, carol: Any) -> None:
    before = _snapshot(project)

    response = _patch(client_for(carol), project, {"name": "Hijacked", "ask_user_enabled": False})

    assert response.status_code == 404
    assert response.json() == {"detail": PROJECT_NOT_FOUND, "code": "not_found"}
    assert _snapshot(project) == before


def test_anonymous_patch_gets_401_and_nothing_changes(project: Project) -> None:
    before = _snapshot(project)

    assert _patch(Client(), project, {"name": "Hijacked"}).status_code == 401
    assert _snapshot(project) == before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"ask_user_timeout": 29}, TIMEOUT_OUT_OF_RANGE),
        ({"ask_user_timeout": 901}, TIMEOUT_OUT_OF_RANGE),
        ({"name": " "}, NAME_REQUIRED),
        ({"engine": "sdk", "permission_mode": "bypassPermissions"}, SDK_BYPASS_REFUSED),
    ],
)
def test_patch_with_bad_settings_gets_422_and_nothing_changes(
    client_for: ClientFor, project: Project, alice: Any, body: dict[str, Any], message: str
) -> None:
    before = _snapshot(project)

    response = _patch(client_for(alice), project, body)

    assert response.status_code == 422
    assert _messages(response) == [message]
    assert _snapshot(project) == before


def test_switching_to_sdk_is_refused_while_permissions_are_bypassed(
    client_for: ClientFor, alice: Any
) -> None:
    project = make_project(owner=alice, permission_mode="bypassPermissions")

    response = _patch(client_for(alice), project, {"engine": "sdk"})

    assert response.status_code == 422
    assert _messages(response) == [SDK_BYPASS_REFUSED]
    project.refresh_from_db()
    assert project.engine == "cli"


@pytest.mark.parametrize(
    "body",
    [
        {"engine": "gpt"},
        {"ask_user_timeout": "soon"},
        {"name": None},
        {"context": None},
        {"ask_user_enabled": None},
    ],
)
def test_patch_with_malformed_input_gets_422_naming_the_field(
    client_for: ClientFor, project: Project, alice: Any, body: dict[str, Any]
) -> None:
    before = _snapshot(project)

    response = _patch(client_for(alice), project, body)

    assert response.status_code == 422
    assert [error["loc"][-1] for error in response.json()["errors"]] == list(body)
    assert _snapshot(project) == before


# --- CSRF and documentation --------------------------------------------------------------


def test_post_without_csrf_token_gets_403(alice: Any, client_for: ClientFor) -> None:
    client = client_for(alice, enforce_csrf_checks=True)

    response = _post(client, {"name": "Forged"})

    assert response.status_code == 403
    assert not Project.objects.exists()


def test_patch_without_csrf_token_gets_403(alice: Any, project: Project, client_for: ClientFor) -> None:
    before = _snapshot(project)

    response = _patch(client_for(alice, enforce_csrf_checks=True), project, {"name": "Forged"})

    assert response.status_code == 403
    assert _snapshot(project) == before


def test_post_with_csrf_token_from_a_page_is_accepted(alice: Any, client_for: ClientFor) -> None:
    client = client_for(alice, enforce_csrf_checks=True)
    client.get("/projects/")
    token = client.cookies["csrftoken"].value

    response = client.post(
        "/api/projects", {"name": "Real"}, content_type=JSON, headers={"X-CSRFToken": token}
    )

    assert response.status_code == 201


def test_openapi_documents_the_project_endpoints() -> None:
    schema = Client().get("/api/openapi.json").json()

    assert set(schema["paths"]["/api/projects"]) == {"get", "post"}
    assert set(schema["paths"]["/api/projects/{project_id}"]) == {"get", "patch"}
    assert Client().get("/api/docs").status_code == 200


# --- bypassPermissions is a staff decision ------------------------------------------


def test_a_non_staff_user_cannot_create_a_project_that_bypasses_permissions(
    client_for: ClientFor, alice: Any
) -> None:
    response = _post(client_for(alice), {"name": "Yolo", "permission_mode": "bypassPermissions"})

    assert response.status_code == 403
    assert response.json() == {"detail": BYPASS_STAFF_ONLY, "code": "forbidden"}
    assert not Project.objects.filter(name="Yolo").exists()


def test_a_non_staff_owner_cannot_switch_a_project_to_bypass_permissions(
    client_for: ClientFor, project: Project, alice: Any
) -> None:
    before = _snapshot(project)

    response = _patch(client_for(alice), project, {"permission_mode": "bypassPermissions", "name": "Renamed"})

    assert response.status_code == 403
    assert response.json() == {"detail": BYPASS_STAFF_ONLY, "code": "forbidden"}
    assert _snapshot(project) == before


def test_staff_can_choose_bypass_permissions_and_members_still_edit_such_a_project(
    client_for: ClientFor, project: Project, alice: Any, bob: Any
) -> None:
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])

    assert _patch(client_for(alice), project, {"permission_mode": "bypassPermissions"}).status_code == 200
    response = _patch(client_for(bob), project, {"name": "Renamed by Bob"})

    assert response.status_code == 200
    project.refresh_from_db()
    assert (project.name, project.permission_mode) == ("Renamed by Bob", "bypassPermissions")
