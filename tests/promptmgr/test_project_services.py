"""Project services: what the API, pages and admin share."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from promptmgr.models import Project
from promptmgr.services.projects import (
    NAME_REQUIRED,
    SDK_BYPASS_REFUSED,
    TIMEOUT_OUT_OF_RANGE,
    ProjectNotFound,
    project_create,
    project_for_user,
    project_update,
)
from promptmgr.workspaces import workspace_path

pytestmark = [pytest.mark.django_db, pytest.mark.unit]


def test_create_uses_the_server_default_timeout(alice: Any, settings: Any) -> None:
    settings.ASK_USER_DEFAULT_TIMEOUT = 120

    project = project_create(owner=alice, name="Alpha")

    assert project.ask_user_timeout == 120
    assert (workspace_path(project) / "CLAUDE.local.md").exists()


@pytest.mark.parametrize("timeout", [30, 900])
def test_timeout_bounds_are_inclusive(alice: Any, timeout: int) -> None:
    assert project_create(owner=alice, name="Alpha", ask_user_timeout=timeout).ask_user_timeout == timeout


def test_create_collects_every_error(alice: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        project_create(
            owner=alice,
            name=" ",
            ask_user_timeout=10,
            engine="sdk",
            permission_mode="bypassPermissions",
        )

    assert caught.value.message_dict == {
        "name": [NAME_REQUIRED],
        "ask_user_timeout": [TIMEOUT_OUT_OF_RANGE],
        "permission_mode": [SDK_BYPASS_REFUSED],
    }
    assert not Project.objects.exists()


def test_failed_update_leaves_the_object_as_stored(alice: Any) -> None:
    project = project_create(owner=alice, name="Alpha", context="keep")

    with pytest.raises(ValidationError):
        project_update(project=project, context="lost", ask_user_timeout=5)

    assert (project.context, project.ask_user_timeout) == ("keep", 300)


def test_update_refuses_fields_it_does_not_manage(alice: Any, bob: Any) -> None:
    project = project_create(owner=alice, name="Alpha")

    with pytest.raises(TypeError, match="owner"):
        project_update(project=project, owner=bob)


def test_project_for_user_finds_owned_and_shared_projects_only(alice: Any, bob: Any, carol: Any) -> None:
    project = project_create(owner=alice, name="Alpha")
    project.members.add(bob)

    assert project_for_user(user=alice, project_id=project.pk) == project
    assert project_for_user(user=bob, project_id=project.pk) == project
    with pytest.raises(ProjectNotFound):
        project_for_user(user=carol, project_id=project.pk)
