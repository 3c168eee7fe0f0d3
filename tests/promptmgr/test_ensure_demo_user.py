"""``manage.py ensure_demo_user``: the demo login a fresh install starts with."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from promptmgr.models import Project
from promptmgr.services.demo import DEMO_PROJECT_NAME
from promptmgr.workspaces import workspace_path

pytestmark = [pytest.mark.django_db, pytest.mark.unit]


def _run(*args: str) -> str:
    out = StringIO()
    call_command("ensure_demo_user", *args, stdout=out)
    return out.getvalue()


def test_it_creates_a_superuser_with_a_sample_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)

    output = _run("--base-url", "http://127.0.0.1:9000")

    user = User.objects.get(username="demo")
    assert user.is_superuser and user.is_staff
    assert user.check_password("demo-password")
    project = Project.objects.get(owner=user)
    assert project.name == DEMO_PROJECT_NAME
    assert (workspace_path(project) / ".mcp.json").exists()
    assert "Log in at http://127.0.0.1:9000/accounts/login/" in output
    assert "username: demo" in output
    assert "password: demo-password" in output


def test_running_it_again_changes_nothing(db: Any) -> None:
    _run()
    output = _run()

    assert User.objects.filter(username="demo").count() == 1
    assert Project.objects.count() == 1
    assert "Created" not in output


def test_password_comes_from_the_environment_and_is_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    _run()
    monkeypatch.setenv("DEMO_PASSWORD", "another-secret")

    output = _run()

    assert User.objects.get(username="demo").check_password("another-secret")
    assert "password: another-secret" in output


def test_a_demo_user_with_projects_gets_no_extra_sample(db: Any) -> None:
    user = User.objects.create_user("demo")
    Project.objects.create(owner=user, name="Mine")

    _run()

    assert list(Project.objects.values_list("name", flat=True)) == ["Mine"]
