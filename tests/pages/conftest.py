"""Fixtures for the chat page: a signed-in browser on a project's chat workspace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import browser_login
from tests.pages.chat import OpenChat

if TYPE_CHECKING:
    from tests.conftest import LiveServer


@pytest.fixture(autouse=True)
def no_script_errors(page: Any) -> Iterator[None]:
    """Any uncaught JavaScript error on the page fails the test."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield
    assert errors == []


@pytest.fixture
def open_chat(app_server: LiveServer, page: Any, alice: Any) -> OpenChat:
    """Sign alice in and open a project's chat page; returns the page."""

    def open_project(project: Any) -> Any:
        browser_login(page, app_server, "alice", "alice-password")
        page.goto(f"{app_server.url}/projects/{project.pk}/")
        return page

    return open_project
