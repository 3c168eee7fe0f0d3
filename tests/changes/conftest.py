"""Fixtures for the changes and file-browser tests (users and settings: ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Conversation, Project
from tests.changes.support import make_repo
from tests.helpers import make_project


@pytest.fixture
def project(alice: Any, bob: Any) -> Project:
    """Alice's project, shared with Bob; Carol is a stranger to it."""
    alpha: Project = make_project(owner=alice, members=(bob,), name="Alpha")
    return alpha


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "worktree",
        {"README.md": "# Demo\n", "src/app.py": "def main():\n    return 1\n", "docs/guide.md": "Guide\n"},
    )


@pytest.fixture
def conversation(project: Project, alice: Any, worktree: Path) -> Conversation:
    """A conversation of Alice's project working in ``worktree``."""
    return Conversation.objects.create(project=project, user=alice, title="c", worktree_path=str(worktree))


@pytest.fixture
def client_for() -> Callable[[Any], Client]:
    def login(user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return login
