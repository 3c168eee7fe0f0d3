"""Fixtures for the foundation tests; users and settings come from ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Project
from tests.helpers import make_project


@pytest.fixture
def project(alice: Any, bob: Any) -> Project:
    """Alice's project, shared with Bob; Carol is a stranger to it."""
    alpha: Project = make_project(owner=alice, members=(bob,), name="Alpha", context="Be brief.")
    return alpha


@pytest.fixture
def client_for() -> Callable[..., Client]:
    """A Django test client logged in as the given user (CSRF checks off, as in Client())."""

    def login(user: Any, *, enforce_csrf_checks: bool = False) -> Client:
        client = Client(enforce_csrf_checks=enforce_csrf_checks)
        client.force_login(user)
        return client

    return login
