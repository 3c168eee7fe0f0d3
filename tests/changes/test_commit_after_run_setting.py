"""The per-project "commit after each run" switch: off by default, set by the project's
people on the settings page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Project
from promptmgr.services.projects import project_create

pytestmark = pytest.mark.unit

ClientFor = Callable[[Any], Client]


def form(project: Project, **changes: Any) -> dict[str, Any]:
    data = {
        "name": project.name,
        "context": project.context,
        "engine": project.engine,
        "permission_mode": project.permission_mode,
        "ask_user_timeout": project.ask_user_timeout,
        "model": project.model,
        "ask_user_enabled": "on",
    }
    data.update(changes)
    return data


def test_a_new_project_does_not_commit_after_runs_unless_asked(alice: Any) -> None:
    assert project_create(owner=alice, name="Plain").commit_after_run is False
    assert project_create(owner=alice, name="Committing", commit_after_run=True).commit_after_run is True


def test_a_member_switches_commit_after_run_on_and_off_on_the_settings_page(
    client_for: ClientFor, project: Project, bob: Any
) -> None:
    client = client_for(bob)
    page = client.get(f"/projects/{project.pk}/settings/").content.decode()
    assert 'type="checkbox" name="commit_after_run"' in page
    assert "Commit each run&#x27;s changes on the conversation&#x27;s branch" in page

    assert (
        client.post(f"/projects/{project.pk}/settings/", form(project, commit_after_run="on")).status_code
        == 302
    )
    project.refresh_from_db()
    assert project.commit_after_run is True

    assert client.post(f"/projects/{project.pk}/settings/", form(project)).status_code == 302
    project.refresh_from_db()
    assert project.commit_after_run is False
