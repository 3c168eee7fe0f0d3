"""The projects API for repositories: create from a URL, what it shows, credentials, who may."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from promptmgr.git import credentials, urls
from promptmgr.models import Project
from promptmgr.services import git_workspace
from promptmgr.services.projects import SETUP_STAFF_ONLY
from tests.workspaces.support import cloned_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

TOKEN = "ghp_FAKE-token-0123456789abcdef"


def _post(client: Any, body: dict[str, Any]) -> Any:
    return client.post("/api/projects", body, content_type="application/json")


def _errors(response: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for error in response.json()["errors"]:
        found.setdefault(error["loc"][-1], []).append(error["msg"])
    return found


def test_an_ext_url_is_refused_with_422_and_nothing_runs(client_for: Any, alice: Any, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    response = _post(client_for(alice), {"name": "Evil", "git_url": f"ext::sh -c touch% {marker}"})

    assert response.status_code == 422
    assert _errors(response) == {"git_url": [urls.TRANSPORT_REFUSED.format(transport="ext")]}
    assert not Project.objects.exists()
    assert git_workspace._clones == {}
    assert not (Path(settings.STORAGE_ROOT) / "projects").exists()
    assert not marker.exists()


def test_a_scheme_the_server_does_not_allow_is_422(client_for: Any, alice: Any, settings: Any) -> None:
    settings.WORKSPACE_GIT_SCHEMES = ("https", "ssh")

    response = _post(client_for(alice), {"name": "Local", "git_url": "file:///srv/app.git"})

    assert response.status_code == 422
    assert _errors(response) == {"git_url": [urls.SCHEME_REFUSED.format(allowed="https, ssh", scheme="file")]}


def test_create_from_a_url_answers_at_once_with_the_clone_under_way(client_for: Any, alice: Any) -> None:
    response = _post(
        client_for(alice),
        {"name": "App", "git_url": "https://git.example/app.git", "git_ref": "main", "git_token": TOKEN},
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["git_url"], body["git_ref"], body["workspace_status"], body["git_secret_kind"]) == (
        "https://git.example/app.git",
        "main",
        "cloning",
        "token",
    )
    assert TOKEN not in response.content.decode()
    project = Project.objects.get(pk=body["id"])
    assert TOKEN not in project.git_secret
    assert credentials.secret_decrypt(project.git_secret) == TOKEN
    detail = client_for(alice).get(f"/api/projects/{project.pk}")
    assert TOKEN not in detail.content.decode() and "git_secret" not in detail.json()


def test_a_token_without_a_url_or_with_a_key_is_refused(client_for: Any, alice: Any) -> None:
    alone = _post(client_for(alice), {"name": "A", "git_token": TOKEN})
    both = _post(
        client_for(alice),
        {"name": "B", "git_url": "https://h/a.git", "git_token": TOKEN, "git_ssh_key": "-----BEGIN KEY-----"},
    )

    assert (alone.status_code, _errors(alone)) == (422, {"git_url": [git_workspace.MSG_SECRET_WITHOUT_URL]})
    assert (both.status_code, _errors(both)) == (422, {"git_token": [git_workspace.MSG_SECRET_BOTH]})


def test_a_deploy_key_is_stored_encrypted_and_cleared_with_an_empty_string(
    client_for: Any, alice: Any, origin: Path
) -> None:
    project = cloned_project(alice, origin)
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----"

    set_key = client_for(alice).patch(
        f"/api/projects/{project.pk}", {"git_ssh_key": key}, content_type="application/json"
    )
    assert (set_key.status_code, set_key.json()["git_secret_kind"]) == (200, "ssh_key")
    project.refresh_from_db()
    assert credentials.secret_decrypt(project.git_secret) == key + "\n"

    cleared = client_for(alice).patch(
        f"/api/projects/{project.pk}", {"git_ssh_key": ""}, content_type="application/json"
    )
    assert cleared.json()["git_secret_kind"] == ""
    project.refresh_from_db()
    assert project.git_secret == ""


def test_a_cloned_projects_repository_cannot_change(client_for: Any, alice: Any, origin: Path) -> None:
    project = cloned_project(alice, origin)

    response = client_for(alice).patch(
        f"/api/projects/{project.pk}", {"git_url": "https://elsewhere/x.git"}, content_type="application/json"
    )

    assert (response.status_code, response.json()["detail"]) == (409, git_workspace.MSG_REPOSITORY_FIXED)
    assert Project.objects.get(pk=project.pk).git_url == f"file://{origin}"


def test_only_staff_set_the_setup_command(client_for: Any, alice: Any) -> None:
    refused = _post(client_for(alice), {"name": "S", "worktree_setup_command": "npm ci"})
    assert (refused.status_code, refused.json()["detail"]) == (403, SETUP_STAFF_ONLY)

    alice.is_staff = True
    alice.save()
    allowed = _post(client_for(alice), {"name": "S", "worktree_setup_command": "npm ci"})
    assert (allowed.status_code, allowed.json()["worktree_setup_command"]) == (201, "npm ci")


def test_disk_use_is_shown_to_the_team_and_404_to_everyone_else(
    client_for: Any, alice: Any, bob: Any, carol: Any, origin: Path
) -> None:
    project = cloned_project(alice, origin)
    project.members.add(bob)

    for user in (alice, bob):
        body = client_for(user).get(f"/api/projects/{project.pk}/disk-usage").json()
        assert body["repository_bytes"] > 0 and body["worktrees"] == []
        assert body["total_bytes"] == body["repository_bytes"]
    stranger = client_for(carol)
    assert stranger.get(f"/api/projects/{project.pk}/disk-usage").status_code == 404
    assert stranger.post(f"/api/projects/{project.pk}/workspace/retry").status_code == 404
    assert stranger.get(f"/api/projects/{project.pk}").status_code == 404


def test_retry_is_for_failed_clones_only(client_for: Any, alice: Any, origin: Path, tmp_path: Path) -> None:
    ready = cloned_project(alice, origin, name="Ready")
    failed = cloned_project(alice, tmp_path / "missing.git", name="Failed")
    assert failed.workspace_status == "failed"

    refused = client_for(alice).post(f"/api/projects/{ready.pk}/workspace/retry")
    retried = client_for(alice).post(f"/api/projects/{failed.pk}/workspace/retry")

    assert (refused.status_code, refused.json()["detail"]) == (409, git_workspace.MSG_RETRY_NOT_FAILED)
    assert (retried.status_code, retried.json()["workspace_status"], retried.json()["workspace_error"]) == (
        202,
        "cloning",
        "",
    )
