"""The pages show where a project's repository stands: cloning, failed (why), disk use."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Project
from promptmgr.services.git_workspace import workspace_clone
from tests.workspaces.support import cloned_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

REFRESH = '<meta http-equiv="refresh" content="5">'


def test_the_create_form_starts_a_clone_and_the_list_says_so_until_it_ends(
    client_for: Any, alice: Any, origin: Path
) -> None:
    client = client_for(alice)
    created = client.post(
        "/projects/", {"name": "From git", "engine": "cli", "git_url": f"file://{origin}", "git_ref": ""}
    )
    assert created.status_code == 302
    project = Project.objects.get(name="From git")

    listing = client.get("/projects/").content.decode()
    assert f"Cloning file://{origin}…" in listing and REFRESH in listing
    chat = client.get(f"/projects/{project.pk}/").content.decode()
    assert "This page reloads until it is ready." in chat and REFRESH in chat

    workspace_clone(project.pk)
    listing = client.get("/projects/").content.decode()
    assert "Cloning" not in listing and REFRESH not in listing


def test_a_failed_clone_shows_its_reason_on_both_pages(client_for: Any, alice: Any, tmp_path: Path) -> None:
    project = cloned_project(alice, tmp_path / "missing.git")
    client = client_for(alice)

    listing = client.get("/projects/").content.decode()
    chat = client.get(f"/projects/{project.pk}/").content.decode()

    assert "Clone failed: Could not clone file://" in listing
    assert (
        "The clone failed: Could not clone file://" in chat
        and "does not appear to be a git repository" in chat
    )


def test_the_project_page_shows_its_disk_use(client_for: Any, alice: Any, origin: Path) -> None:
    project = cloned_project(alice, origin)

    chat = client_for(alice).get(f"/projects/{project.pk}/").content.decode()

    # filesizeformat puts a no-break space before the unit.
    assert re.search(r"\d+(\.\d)?\xa0(KB|MB) on disk", chat)
