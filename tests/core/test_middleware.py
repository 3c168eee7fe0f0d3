"""Django's middleware, run inline on the event loop, still does everything it did.

These requests go through the async handler (``AsyncClient``), which is the path uvicorn
takes and the only one ``core.middleware`` changes.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.test import AsyncClient
from django.utils.module_loading import import_string

from core import middleware

pytestmark = [pytest.mark.unit, pytest.mark.django_db(transaction=True)]


def test_the_app_uses_the_inline_middleware() -> None:
    for path in settings.MIDDLEWARE:
        cls = import_string(path)
        assert "__acall__" in vars(cls) or issubclass(cls, middleware.InlineMixin), path


async def test_a_login_saves_the_session_and_the_next_request_is_authenticated(alice: Any) -> None:
    client = AsyncClient(enforce_csrf_checks=False)
    response = await client.post("/accounts/login/", {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302, response.content[:300]
    assert settings.SESSION_COOKIE_NAME in response.cookies
    page = await client.get("/projects/")
    assert page.status_code == 200
    assert b"alice" in page.content


async def test_an_api_post_without_the_csrf_token_is_refused(alice: Any) -> None:
    client = AsyncClient(enforce_csrf_checks=True)
    await sync_to_async(client.force_login)(alice)
    response = await client.post("/api/projects", {"name": "x"}, content_type="application/json")
    assert response.status_code == 403


async def test_an_api_post_with_the_csrf_token_passes(alice: Any) -> None:
    client = AsyncClient(enforce_csrf_checks=True)
    await sync_to_async(client.force_login)(alice)
    await client.get("/projects/")  # sets the CSRF cookie
    token = client.cookies[settings.CSRF_COOKIE_NAME].value
    response = await client.post(
        "/api/projects",
        {"name": "With a token"},
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 201, response.content


async def test_the_security_headers_are_still_set() -> None:
    response = await AsyncClient().get("/accounts/login/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "Cookie" in response.get("Vary", "")
