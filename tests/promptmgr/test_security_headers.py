"""Every page answers with a Content-Security-Policy that allows no inline script, and no
page carries an inline script or event handler for it to block."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

ClientFor = Callable[..., Client]
# A <script> element that runs code: no src, and not a JSON data block.
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.I)
INLINE_STYLE = re.compile(r"<[a-z][^>]*\sstyle\s*=|<style\b", re.I)


def directives(header: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in (p.strip() for p in header.split(";")) if part}


@pytest.fixture
def staff_client(client_for: ClientFor, alice: Any) -> Client:
    alice.is_staff = True
    alice.is_superuser = True
    alice.save()
    return client_for(alice)


def test_the_policy_allows_scripts_and_styles_from_this_origin_only(
    staff_client: Client, project: Project
) -> None:
    response = staff_client.get(f"/projects/{project.pk}/")

    policy = directives(response["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/login/",
        "/projects/",
        "/projects/{id}/",
        "/projects/{id}/settings/",
        "/admin/",
        "/admin/promptmgr/project/",
        "/admin/promptmgr/project/{id}/change/",
        "/api/docs",
    ],
)
def test_no_page_has_an_inline_script_handler_or_style(
    staff_client: Client, project: Project, path: str
) -> None:
    response = staff_client.get(path.format(id=project.pk))

    assert response.status_code == 200
    html = response.content.decode()
    assert INLINE_SCRIPT.findall(html) == []
    assert INLINE_HANDLER.findall(html) == []
    assert INLINE_STYLE.findall(html) == []
    assert "Content-Security-Policy" in response


def test_api_docs_load_swagger_ui_from_this_server(staff_client: Client) -> None:
    html = staff_client.get("/api/docs").content.decode()

    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert "/static/ninja/swagger-ui-bundle.js" in sources
    assert "/static/ninja/swagger-ui.css" in sources
    assert [s for s in sources if s.startswith(("http:", "https:", "//"))] == []
