"""Workspace tests clone local repositories: the operator's ``file`` scheme is allowed here
(production allows https and ssh only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.workspaces.support import make_origin


@pytest.fixture(autouse=True)
def _file_urls_allowed(settings: Any) -> None:
    settings.WORKSPACE_GIT_SCHEMES = ("https", "ssh", "file")


@pytest.fixture(autouse=True)
def _no_remembered_disk_use() -> None:
    """Project ids come round again from test to test; a figure remembered for one is not another's."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    """A bare repository with a README, its own CLAUDE.md and a .gitignore for .env."""
    return make_origin(tmp_path / "origin.git")


@pytest.fixture
def client_for() -> Any:
    """A Django test client logged in as the given user."""
    from django.test import Client

    def login(user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return login
