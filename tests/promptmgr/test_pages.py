"""Browser pages: login, the project list with its create form, a project's page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Project
from promptmgr.services.projects import NAME_REQUIRED
from promptmgr.workspaces import workspace_path
from tests.helpers import make_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

ClientFor = Callable[..., Client]
DEMO_BANNER = "Offline demo model is answering — set ANTHROPIC_API_KEY to use Claude"


def test_login_page_shows_the_form() -> None:
    response = Client().get("/accounts/login/")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="username"' in html
    assert 'name="password"' in html
    assert 'type="submit"' in html
    assert "csrfmiddlewaretoken" in html


def test_login_leads_to_the_project_list(alice: Any) -> None:
    client = Client()

    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password"})

    assert response.status_code == 302
    assert response["Location"] == "/projects/"
    assert client.get("/projects/").status_code == 200


def test_wrong_password_shows_an_error(alice: Any) -> None:
    response = Client().post("/accounts/login/", {"username": "alice", "password": "nope"})

    assert response.status_code == 200
    assert "errorlist" in response.content.decode()


@pytest.mark.parametrize("path", ["/projects/", "/projects/1/"])
def test_anonymous_user_is_sent_to_login(path: str) -> None:
    response = Client().get(path)

    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={path}"


def test_list_shows_only_projects_the_user_may_see(
    client_for: ClientFor, project: Project, bob: Any, carol: Any
) -> None:
    make_project(owner=carol, name="Carol's secret")
    make_project(owner=bob, name="Bob's own")

    html = client_for(bob).get("/projects/").content.decode()

    assert "Alpha" in html
    assert "shared by alice" in html
    assert "Bob&#x27;s own" in html
    assert "Carol" not in html


def test_nav_shows_the_user_and_a_logout_form(client_for: ClientFor, alice: Any) -> None:
    html = client_for(alice).get("/projects/").content.decode()

    assert "alice" in html
    assert 'action="/accounts/logout/"' in html
    assert 'method="post"' in html


def test_logout_is_a_post(client_for: ClientFor, alice: Any) -> None:
    client = client_for(alice)

    response = client.post("/accounts/logout/")

    assert response.status_code == 302
    assert client.get("/projects/").status_code == 302


def test_create_form_makes_a_project_and_opens_it(client_for: ClientFor, alice: Any) -> None:
    client = client_for(alice)

    response = client.post("/projects/", {"name": "Beta", "context": "Use tabs.", "engine": "sdk"})

    project = Project.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/projects/{project.pk}/"
    assert (project.name, project.owner, project.engine) == ("Beta", alice, "sdk")
    assert "Use tabs." in (workspace_path(project) / "CLAUDE.local.md").read_text()
    page = client.get(response["Location"]).content.decode()
    assert "Beta" in page
    assert "Project “Beta” created." in page


@pytest.mark.parametrize("name", ["", "   "])
def test_create_form_without_a_name_shows_the_error(client_for: ClientFor, alice: Any, name: str) -> None:
    response = client_for(alice).post("/projects/", {"name": name, "context": "Keep me", "engine": "cli"})

    assert response.status_code == 400
    html = response.content.decode()
    assert NAME_REQUIRED in html
    assert "Keep me" in html
    assert not Project.objects.exists()


def test_create_form_refuses_an_unknown_engine(client_for: ClientFor, alice: Any) -> None:
    response = client_for(alice).post("/projects/", {"name": "X", "engine": "gpt"})

    assert response.status_code == 400
    assert not Project.objects.exists()


def test_create_form_needs_the_csrf_token(alice: Any, client_for: ClientFor) -> None:
    response = client_for(alice, enforce_csrf_checks=True).post("/projects/", {"name": "Forged"})

    assert response.status_code == 403
    assert not Project.objects.exists()


def test_owner_and_member_see_the_project_page(
    client_for: ClientFor, project: Project, alice: Any, bob: Any
) -> None:
    for user in (alice, bob):
        response = client_for(user).get(f"/projects/{project.pk}/")
        assert response.status_code == 200
        assert response.context["project"] == project
        assert "Alpha" in response.content.decode()


def test_project_page_is_404_for_others(client_for: ClientFor, project: Project, carol: Any) -> None:
    assert client_for(carol).get(f"/projects/{project.pk}/").status_code == 404


def test_banner_says_when_the_demo_model_answers(settings: Any) -> None:
    settings.DEMO_MODEL = True
    assert DEMO_BANNER in Client().get("/accounts/login/").content.decode()

    settings.DEMO_MODEL = False
    assert DEMO_BANNER not in Client().get("/accounts/login/").content.decode()
